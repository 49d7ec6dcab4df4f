"""What counts as the dataset in the output folder: the names this tool gives a dataset's files
(shards, their DALI indexes, metadata) and temporary shards, the files of this tool's dataset
a folder holds (as its own dataset_info.json names them), and the files a commit must not
overwrite. A dataset_info.json that is not this tool's (TFDS writes one, with shards named by
the same template) holds no dataset of this tool, so nothing it names is ever replaced or
removed.
"""
import functools
import os
import re
from typing import Iterable

from pipeline.base.splits import SPLITS
from pipeline.errors import DatasetError, printable
from pipeline.io import fileio
from pipeline.output import dali_index, metadata, shard_formats
from pipeline.output.bounded_reads import read_metadata_files
from pipeline.output.layout import RUN_ID, SHARDS

_SPLIT = '(?:' + '|'.join(SPLITS) + ')'


def metadata_names(splits: Iterable[str]) -> tuple[str, ...]:
    """The files beside the shards of a dataset of `splits` that this version writes."""
    return (metadata.DATASET_INFO, metadata.FEATURES, metadata.LABELS, metadata.CLASS_NAMES,
            metadata.SUMMARY, metadata.LEAKAGE, *(metadata.error_report_name(s) for s in splits),
            *(metadata.damaged_report_name(s) for s in splits))


METADATA_NAMES = (*metadata_names(SPLITS), metadata.OLD_CLASS_NAMES)


@functools.lru_cache(maxsize=None)
def _shard_patterns(suffixes: tuple[str, ...], end: str = '') -> tuple[re.Pattern, re.Pattern]:
    """(final shard name, temporary shard path) for the formats' suffixes, ending in `end`."""
    suffix = '(?:' + '|'.join(map(re.escape, suffixes)) + ')'
    end = re.escape(end) + r'\Z'
    return (re.compile(rf'{metadata.DATASET_NAME}-{_SPLIT}\.{suffix}-\d{{5,}}-of-\d{{5,}}{end}'),
            re.compile(rf'{SHARDS}/{_SPLIT}-\d{{5,}}-[0-9a-f]{{16}}\.{suffix}{end}'))


def _index_patterns() -> tuple[re.Pattern, re.Pattern]:
    """(final index name, temporary index path) of the DALI indexes (dali_index.py)."""
    return _shard_patterns((dali_index.FORMAT.suffix,), dali_index.index_path(''))


def is_shard_name(name: str) -> bool:
    """Whether `name` is a name this tool gives a shard file."""
    return _shard_patterns(tuple(shard_formats.suffixes()))[0].match(name) is not None


def is_index_name(name: str) -> bool:
    """Whether `name` is a name this tool gives a shard's DALI index (dali_index.py)."""
    return _index_patterns()[0].match(name) is not None


def is_temp_shard(path: str) -> bool:
    """Whether `path` (relative to a temporary folder) names a temporary shard file or its
    DALI index."""
    return any(patterns[1].match(path) is not None
               for patterns in (_shard_patterns(tuple(shard_formats.suffixes())),
                                _index_patterns()))


def is_dataset_file(name: str) -> bool:
    """Whether `name` is a name this tool gives a file of a dataset (a shard, a shard's index or
    metadata)."""
    return name in METADATA_NAMES or is_shard_name(name) or is_index_name(name)


def in_folder(output_dir: str) -> list[str]:
    """Names of the files of this tool's dataset in `output_dir`, as its own dataset_info.json
    names them: [] when there is none, or when the folder's dataset_info.json and summary.json
    are not this tool's (see is_own_dataset); one of this tool's that it cannot read is a
    DatasetError."""
    path = fileio.join(output_dir, metadata.DATASET_INFO)
    info, summary = read_metadata_files(output_dir, metadata.DATASET_INFO, metadata.SUMMARY)
    if not is_own_dataset(info, summary):
        return []
    names = named_files(info, path)
    if isinstance(summary.get('digests'), dict):   # It noted the metadata files it wrote.
        names = [n for n in names if n != metadata.OLD_CLASS_NAMES or n in summary['digests']]
    files, _ = _entries(output_dir)
    return [name for name in names if name in files]


def is_own_dataset(info, summary) -> bool:
    """Whether a parsed dataset_info.json and summary.json are those of one dataset this tool
    wrote: the first names this tool as its module, the second carries a run id, the dataset's
    name and the same splits. Any other folder with a dataset_info.json (TFDS writes one, with
    shards named by the same template) holds no dataset of this tool, so nothing in it is ever
    replaced or removed."""
    if not (isinstance(info, dict) and isinstance(summary, dict)
            and isinstance(info.get('splits'), list) and isinstance(summary.get('splits'), dict)):
        return False
    run_id, splits = summary.get('run_id'), [s.get('name') if isinstance(s, dict) else None
                                             for s in info['splits']]
    return (info.get('moduleName') == metadata.MODULE and isinstance(run_id, str)
            and RUN_ID.match(run_id) is not None and summary.get('dataset') == info.get('name')
            and all(isinstance(name, str) for name in splits)
            and sorted(splits) == sorted(summary['splits']))


def named_files(info, path: str) -> list[str]:
    """The file names a dataset_info.json (`info`, read from `path`) describes, validated: a
    DatasetError when it is not one this tool can read."""
    try:
        return _named_files(info)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise DatasetError(f'{path} does not describe a dataset this tool can read '
                           f'({printable(str(exc))[:200]}); move the folder\'s contents away or '
                           'choose another folder') from None


def _named_files(info: dict) -> list[str]:
    if not isinstance(info, dict):
        raise ValueError('not a JSON object')
    name = info['name']
    if not isinstance(name, str) or not re.fullmatch(metadata.DATASET_NAME, name):
        raise ValueError(f'dataset name {name!r}')
    formats = shard_formats.declared(info)
    names = [metadata.DATASET_INFO, metadata.FEATURES, metadata.LABELS, metadata.CLASS_NAMES,
             metadata.OLD_CLASS_NAMES, metadata.SUMMARY, metadata.LEAKAGE]
    for split in info['splits']:
        if split.get('filepathTemplate', metadata.SHARD_TEMPLATE) != metadata.SHARD_TEMPLATE:
            raise ValueError('shard names other than this tool\'s')
        split_name, lengths = split['name'], split['shardLengths']
        if split_name not in SPLITS or not isinstance(lengths, list):
            raise ValueError(f'split {split_name!r}')
        if len(lengths) > metadata.MAX_SHARDS:
            raise ValueError(f'split {split_name} lists {len(lengths)} shards, more than the '
                             f'{metadata.MAX_SHARDS} this tool writes')
        if len(lengths) > 10_000_000 or any(int(n) < 0 for n in lengths) or int(split['numBytes']) < 0:
            raise ValueError(f'split {split_name!r}: shard lengths or bytes')
        names.append(metadata.error_report_name(split_name))
        names.append(metadata.damaged_report_name(split_name))
        for file_format in formats:
            shards = [metadata.shard_name(name, split_name, i, len(lengths), file_format)
                      for i in range(len(lengths))]
            names += shards
            if file_format == dali_index.FORMAT:   # Their indexes, where a run wrote them.
                names += [dali_index.index_path(shard) for shard in shards]
    return names


def _entries(output_dir: str) -> tuple[set[str], set[str]]:
    """(file names, folder names) directly in `output_dir`."""
    if not (fileio.is_gcs(output_dir) or os.path.isdir(output_dir)):
        return set(), set()
    entries = fileio.list_dir(output_dir)
    return ({e.name for e in entries if not e.is_dir and e.error is None},
            {e.name for e in entries if e.is_dir or e.error is not None})


def foreign_files(output_dir: str, names: Iterable[str], dataset: Iterable[str]) -> list[str]:
    """Those of `names` that exist in `output_dir` (as a file, a folder or a broken link) and
    are not files of `dataset`: what a commit must not overwrite."""
    files, folders = _entries(output_dir)
    ours = set(dataset)
    return sorted(n for n in set(names) if (n in files and n not in ours) or n in folders)


def refuse_foreign(output_dir: str, foreign: list[str]) -> None:
    if foreign:
        shown = ', '.join(printable(n) for n in foreign[:5])
        raise DatasetError(f'{output_dir} holds files this run would overwrite that are not part '
                           f'of a dataset it replaces: {shown}'
                           + (f' and {len(foreign) - 5} more' if len(foreign) > 5 else '')
                           + '; move them away or choose another --output_dir')

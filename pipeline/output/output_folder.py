"""The output folder's protocol: one writer at a time, each run's temporary folder, the commit
journal, and what counts as the dataset in the folder, recoverable after a kill at any instant.

Everything lives directly in OUTPUT:

    .lock                     who writes the folder now (JSON: token, run id, host, pid, ...)
    .commit.json              the journal of a commit in progress: run id, phase, file names
    .tmp-RUN/                 the temporary folder of run RUN (16 hex digits)
    .tmp-RUN/.image-tfrecords-run.json   its marker: run id and state, running or committed
    .tmp-RUN/parts/, shards/  its work: a TFRecord part per chunk and shard, a file per shard and
                              format (part_path, shard_path; resume.py says when it is reused)
    .tmp-RUN/groups/          the images of each parquet row group, as one blob (group_path)
    .tmp-RUN/listed/, filed/  sorted runs of the listed inputs and of the records' hashes

**Confinement.** Every path this module touches is derived from OUTPUT and names it validates:
a run id is 16 hex digits, a dataset file is a shard name (or a TFRecord shard's DALI index,
SHARD.idx) or one of the metadata names, a file in a temporary folder is a shard (or its index)
or a staged metadata file. Nothing is ever read from a file as
a path, so no file in the folder, whoever wrote it, can make a run move or delete anything
outside OUTPUT. A journal or lock that breaks these rules is refused in one line and touches
nothing. Temporary folders are recognised by their marker, never by their name alone, and a
symbolic link in their place is refused, so `--overwrite` and `--clean_temp` delete only what
this tool wrote. Inside one, an entry of a kind this tool does not make there (wrong_kinds) is
removed before a rerun reuses the folder (repair_temp) and refused before a commit moves from it.

**The lock.** Taking it is exclusive whether the lock is absent or stale. Locally every change
of `.lock` (create, take over, release) happens under an advisory lock (flock) of the output
folder itself, held only for that moment and dropped by the kernel if the process dies; on
Cloud Storage every change is conditional on the generation read (create: no object yet; take
over: still the stale holder's; release: still ours). A holder is stale when it is provably
gone: a run on this machine (same host name, boot and PID namespace) whose process no longer
exists, is a zombie, or is another process with the same pid (its start time differs), or a
lock older than STALE_UNREADABLE_SECONDS that is empty or unreadable. Anything else (another
host or container, a host restarted since, a Dataflow job) needs `--break_lock`.

**The commit** (transforms/commit.py calls it): the new shards and metadata are complete in the
temporary folder, then the journal lists the old dataset's file names (moved aside into
`.tmp-RUN/replaced/`) and the new files' names (moved in), `dataset_info.json` moved away first
and in last. After the moves the marker says `committed`, then the journal is deleted, then the
temporary folder with the marker last. A kill at any instant leaves a journal (the next run
rolls it forward: every move can be repeated) or a committed marker (the next run finishes the
cleanup); the folder holds the complete old dataset or the complete new one.

This module holds the names, the temporary folders and what counts as the dataset; the lock is
in output_lock.py, the commit journal and recovery in commit_journal.py.
"""

import contextlib
import dataclasses
import functools
import json
import logging
import os
import re
import shutil
from typing import Iterable

from pipeline import faults
from pipeline.errors import DatasetError, printable
from pipeline.base.settings import TEMP_PREFIX
from pipeline.base.splits import SPLITS
from pipeline.io import fileio
from pipeline.output.bounded_reads import NotAFile, as_json, read_metadata_files, read_raw
from pipeline.io.gcs import list_prefix
from pipeline.output import dali_index, metadata, shard_formats
from pipeline.output.shard_formats import ShardFormat

LOG = logging.getLogger('image_tfrecords')
MARKER = '.image-tfrecords-run.json'
KEY_TAG = 'resume-key.tag'   # A tag of the key the run's work is sealed under (resume.py).
RUNNING, COMMITTED = 'running', 'committed'
REPLACED = 'replaced'   # The temporary folder's subfolder for the old dataset's files.
# Its subfolders of work: a TFRecord part per chunk and shard (with a sidecar and entry files
# each), a file per shard and format (and a sidecar), the leakage check's pairs and its linked
# groups, the rounds of merging many entry files into a report, the images of groups of
# inputs read together (transforms/grouped_reads.py), and the sorted runs that pass the listed
# inputs and the converted records' hashes between stages (pipeline/io/sorted_runs.py), and
# the listers' counts so far (transforms/listing.py, shown by pipeline/progress.py).
PARTS, SHARDS, PAIRS, LINKS, MERGE, GROUPS = 'parts', 'shards', 'pairs', 'links', 'merge', 'groups'
LISTED, FILED, FINAL = 'listed', 'filed', 'final'   # FINAL: the commit's staged metadata.
LISTING = 'listing'
WORK_FOLDERS = (PARTS, SHARDS, PAIRS, LINKS, MERGE, GROUPS, LISTED, FILED, FINAL, LISTING)
_RUN_ID = re.compile(r'[0-9a-f]{16}\Z')
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


def _is_temp_shard(path: str) -> bool:
    """Whether `path` (relative to a temporary folder) names a temporary shard file or its
    DALI index."""
    return any(patterns[1].match(path) is not None
               for patterns in (_shard_patterns(tuple(shard_formats.suffixes())),
                                _index_patterns()))


def is_dataset_file(name: str) -> bool:
    """Whether `name` is a name this tool gives a file of a dataset (a shard, a shard's index or
    metadata)."""
    return name in METADATA_NAMES or is_shard_name(name) or is_index_name(name)


def check_output_dir(output_dir: str) -> None:
    """Raises a DatasetError when `output_dir` cannot be an output folder: a file, or below a
    file. (A name with glob characters, which listing would read as a pattern, is refused
    before: pipeline/launch.py.)"""
    if fileio.is_gcs(output_dir):
        return
    path = os.path.abspath(output_dir)
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        below = '' if path == os.path.abspath(output_dir) else f' ({path} is a file)'
        raise DatasetError(f'--output_dir {output_dir} is not a folder{below}; choose a folder')


def check_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise ValueError(f'not a run id: {printable(repr(run_id))}')
    return run_id


def temp_dir(output_dir: str, run_id: str) -> str:
    return fileio.join(output_dir.rstrip('/'), TEMP_PREFIX + check_run_id(run_id))


def plan_note(temp_dir: str, lock_token: str) -> str:
    """Where a run notes its plan (inputs per split) for the launcher of this attempt, which
    shows the progress of the conversion (pipeline/progress.py)."""
    return fileio.join(temp_dir, f'plan-{lock_token}.json')


def part_path(temp_dir: str, split: str, shard: int, chunk: int, chunk_fp: str) -> str:
    return fileio.join(temp_dir, PARTS, f'{split}-{shard:05d}-{chunk:06d}-{chunk_fp}.tfrecord')


def shard_path(temp_dir: str, split: str, shard: int, shard_fp: str,
               shard_format: ShardFormat) -> str:
    return fileio.join(temp_dir, SHARDS, f'{split}-{shard:05d}-{shard_fp}.{shard_format.suffix}')


def group_path(temp_dir: str, group_fp: str) -> str:
    """The blob of a group's images (pipeline/io/image_blobs.py), kept for a rerun."""
    return fileio.join(temp_dir, GROUPS, f'{group_fp}.images')


def pairs_path(temp_dir: str, name: str) -> str:
    """A part of leakage.jsonl (transforms/findings.py), joined into it at the commit."""
    return fileio.join(temp_dir, PAIRS, f'{name}.jsonl')


def links_path(temp_dir: str, name: str) -> str:
    """A linked group of the leakage check (transforms/linked_groups.py), kept for a rerun."""
    return fileio.join(temp_dir, LINKS, name)


def listed_folder(temp_dir: str) -> str:
    """Where listing spills the inputs' refs (transforms/listing.py)."""
    return fileio.join(temp_dir, LISTED)


def filed_folder(temp_dir: str) -> str:
    """Where converted parts file their records' hashes (transforms/leakage.py)."""
    return fileio.join(temp_dir, FILED)


def work_files(temp_dir: str, folder: str, pattern: str) -> str:
    """The glob of files named `pattern` in a subfolder of work (PARTS, SHARDS, ...)."""
    return fileio.join(temp_dir, folder, pattern)


def in_format(shard_file: str, shard_format: ShardFormat) -> str:
    """The path of the same temporary shard in another format."""
    return f'{shard_file.rsplit(".", 1)[0]}.{shard_format.suffix}'


def index_file(shard_file: str) -> str:
    """The DALI index (dali_index.py) of the same temporary shard, given its file in any format."""
    return dali_index.index_path(in_format(shard_file, dali_index.FORMAT))


def _is_link(path: str) -> bool:
    return not fileio.is_gcs(path) and os.path.islink(path)


def _kind(entry: os.DirEntry) -> str:
    if entry.is_symlink():
        return 'a symbolic link'
    if entry.is_dir(follow_symlinks=False):
        return 'a folder'
    return 'a file' if entry.is_file(follow_symlinks=False) else 'a special file'


def wrong_kinds(folder: str) -> list[tuple[str, str]]:
    """The entries of a temporary folder (local disk) that are not of the kind this tool makes
    there, as (path, what it is and what belongs there): its subfolders (WORK_FOLDERS, and
    REPLACED) are real folders, what WORK_FOLDERS hold and everything else in it are regular
    files, and nothing is a symbolic link. REPLACED's contents are the old dataset's own
    files, moved aside as they were (links too), and are not looked at."""
    if fileio.is_gcs(folder) or not os.path.isdir(folder) or os.path.islink(folder):
        return []
    found = []
    for entry in _scan(folder):
        belongs = 'a folder' if entry.name in (*WORK_FOLDERS, REPLACED) else 'a file'
        if _kind(entry) != belongs:
            found.append((entry.path, f'{_kind(entry)} where {belongs} belongs'))
        elif entry.name in WORK_FOLDERS:
            found += [(inner.path, f'{_kind(inner)} where a file belongs')
                      for inner in _scan(entry.path) if _kind(inner) != 'a file']
    return sorted(found)


def _scan(folder: str) -> list[os.DirEntry]:
    with os.scandir(folder) as entries:
        return list(entries)


def refuse_wrong_kinds(folder: str) -> None:
    """Raises a DatasetError if a temporary folder is a symbolic link or a file, or holds an
    entry not of the kind this tool makes there (wrong_kinds): what a run writes into, or a
    commit moves from, is then only ever this tool's."""
    if _is_link(folder):
        raise DatasetError(f'{folder} is a symbolic link; this tool keeps its temporary files '
                           'only in a real folder. Remove the link and rerun')
    if not fileio.is_gcs(folder) and os.path.lexists(folder) and not os.path.isdir(folder):
        raise DatasetError(f'{folder} is a file; this tool keeps its temporary files only in a '
                           'folder of that name. Move it away and rerun')
    wrong = wrong_kinds(folder)
    if wrong:
        path, what = wrong[0]
        holds = ('is a symbolic link; a temporary folder of this tool holds none'
                 if what.startswith('a symbolic link') else f'is {what}')
        raise DatasetError(f'{path} {holds}. Remove it and rerun')


def repair_temp(folder: str) -> list[str]:
    """Readies an earlier attempt's temporary folder (local disk) for this one: removes what
    passed data between its stages (LISTED, FILED: no attempt reuses it) and every entry not of
    the kind this tool makes there (wrong_kinds), a link as a link (never followed), so that
    nothing outside the folder is touched. Returns a description per entry of a wrong kind
    removed (its path in the folder, what it was)."""
    wrong = wrong_kinds(folder)
    for path, _ in wrong:
        _remove_entry(path)
    _drop_passing_runs(folder)
    return [f'{printable(os.path.relpath(path, folder))} ({what})' for path, what in wrong]


def _drop_passing_runs(folder: str) -> None:
    """Removes the sorted runs that passed data between a run's stages (LISTED, FILED) and the
    listers' counts (LISTING)."""
    for passing in (listed_folder(folder), filed_folder(folder), fileio.join(folder, LISTING)):
        if fileio.is_gcs(passing):
            fileio.delete_tree(passing)
        elif not os.path.islink(folder):
            _remove_entry(passing)


def _remove_entry(path: str) -> None:
    """Deletes a file, link or folder tree at `path` (local disk; links are not followed)."""
    with fileio.output_errors(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)


_PARTIAL = re.compile(r'\.(?:commit\.json|lock|image-tfrecords-run\.json)\.partial-'
                      r'[0-9a-f]{8}(?:[0-9a-f]{24})?\Z')


def _remove_partials(output_dir: str, name: str) -> None:
    """Deletes what a kill left of an atomic write of `name` (NAME.partial-HEX) in the folder."""
    if fileio.is_gcs(output_dir) or not os.path.isdir(output_dir):
        return
    for entry in os.scandir(output_dir):
        if (entry.name.startswith(name + '.partial-') and _PARTIAL.match(entry.name)
                and entry.is_file(follow_symlinks=False)):
            os.remove(entry.path)


@dataclasses.dataclass(frozen=True)
class TempFolder:
    path: str
    run_id: str
    state: str     # RUNNING or COMMITTED


def _marker_state(folder: str, run_id: str) -> str | None:
    try:
        found = read_raw(fileio.join(folder, MARKER))
    except NotAFile:
        return None
    marker = as_json(found[0]) if found is not None else None
    if (isinstance(marker, dict) and marker.get('run_id') == run_id
            and marker.get('state') in (RUNNING, COMMITTED)):
        return marker['state']
    return None


def _write_marker(folder: str, run_id: str, state: str) -> None:
    fileio.write_bytes_atomic(fileio.join(folder, MARKER),
                              json.dumps({'run_id': run_id, 'state': state}).encode())


def temp_folders(output_dir: str) -> list[TempFolder]:
    """The temporary folders of this tool's runs in `output_dir`: named `.tmp-RUN`, not a
    link, and carrying a marker for RUN. Anything else is not ours and is left alone."""
    if not (fileio.is_gcs(output_dir) or os.path.isdir(output_dir)):
        return []
    found = []
    for entry in fileio.list_dir(output_dir):
        run_id = entry.name[len(TEMP_PREFIX):]
        if (entry.is_dir and entry.name.startswith(TEMP_PREFIX) and _RUN_ID.match(run_id)
                and not _is_link(entry.path)):
            state = _marker_state(entry.path, run_id)
            if state is not None:
                found.append(TempFolder(entry.path, run_id, state))
    return found


def start_temp(output_dir: str, run_id: str) -> None:
    """Makes sure run `run_id` has its marked temporary folder; refuses a link or a folder of
    that name that this tool did not make (nothing in it is touched)."""
    folder = temp_dir(output_dir, run_id)
    refuse_wrong_kinds(folder)
    state = _marker_state(folder, run_id)
    if state is None:
        _remove_partials(folder, MARKER)   # A kill while the first marker was written.
    if state is None and _has_files(folder):
        raise DatasetError(f'{folder} exists but was not made by this tool (it has no marker '
                           f'{MARKER}); move it away and rerun')
    if state is None:
        _write_marker(folder, run_id, RUNNING)


def drop_if_unused(output_dir: str, run_id: str) -> None:
    """Removes a run's temporary folder that holds its marker alone, or with its key's tag (a run
    that failed before it wrote anything but what passed between its stages leaves nothing
    behind)."""
    folder = temp_dir(output_dir, run_id)
    _drop_passing_runs(folder)
    marker, tag = fileio.join(folder, MARKER), fileio.join(folder, KEY_TAG)
    if fileio.is_gcs(folder):
        found = list_prefix(folder)
        if marker in found and set(found) <= {marker, tag}:
            fileio.delete([p for p in found if p != marker] + [marker])
    elif (not _is_link(folder) and os.path.isdir(folder)
          and MARKER in (names := os.listdir(folder)) and set(names) <= {MARKER, KEY_TAG}):
        for name in sorted(names, key=lambda n: n == MARKER):   # The marker last.
            os.remove(os.path.join(folder, name))
        os.rmdir(folder)


def _has_files(folder: str) -> bool:
    if fileio.is_gcs(folder):
        return bool(list_prefix(folder))
    return os.path.isdir(folder) and bool(os.listdir(folder))


def remove_temp(folder: str) -> None:
    """Deletes a temporary folder, its marker last, so a kill leaves it recognisable."""
    marker = fileio.join(folder, MARKER)
    if fileio.is_gcs(folder):
        fileio.delete([p for p in list_prefix(folder) if p != marker])
        faults.crash_point('cleanup:contents')
        fileio.delete([marker] if fileio.exists(marker) else [])
        return
    if not os.path.isdir(folder) or os.path.islink(folder):
        return
    for entry in os.scandir(folder):
        if entry.name == MARKER:
            continue
        _remove_entry(entry.path)
    faults.crash_point('cleanup:contents')
    with contextlib.suppress(FileNotFoundError):
        os.remove(marker)
    faults.crash_point('cleanup:marker')
    with contextlib.suppress(OSError):
        os.rmdir(folder)


def dataset_files(output_dir: str) -> list[str]:
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
            and _RUN_ID.match(run_id) is not None and summary.get('dataset') == info.get('name')
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

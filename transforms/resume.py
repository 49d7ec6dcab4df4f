"""Resuming a run after a crash: reuse exactly the work that is provably the same.

A run's temporary folder is named by its run id, a fingerprint of every option that shapes the
output bytes (not of --max_error_ratio or the runner), so rerunning the same command finds the
folder an interrupted attempt left. Inside it (the layout is output_folder.py's), every finished
piece of work carries a fingerprint in its name and a small JSON sidecar, written after the data
it describes (so a sidecar means the data is complete):

    parts/SPLIT-SSSSS-CCCCCC-<chunk fingerprint>.tfrecord(.json)   a chunk's records in a shard
    shards/SPLIT-SSSSS-<shard fingerprint>.FORMAT                  a shard made from its parts
    shards/SPLIT-SSSSS-<shard fingerprint>.PRIMARY.json             ... in every output format
    shards/SPLIT-SSSSS-<shard fingerprint>.tfrecord.idx             its DALI index (--dali_index)

(Parts are TFRecord files whatever the output format. A shard has a file per output format,
named with the format's suffix, and with --dali_index an index; the sidecar, named after the
first, is written after them all. A parquet row group's images, groups/<fingerprint>.images,
have none: such a blob is moved into place whole and gives its own size, grouped_reads.py.)

A chunk's fingerprint covers the run id and --max_input_mb, the label map, its place in the
shard plan (so the shards its examples fall in) and, for every input in it, the key, size and modification time
(local files are stat'ed when listing gave no size or time; Cloud Storage inputs from CSVs or
configs are identified by key and any size the listing gave; an archive member also by its
archive's file, size and modification time and its offset in it). A shard's fingerprint covers the fingerprints of its chunks. Work is
reused only under an identical fingerprint, so a changed input or option redoes exactly the
chunks and shards it affects, and a resumed run writes the same bytes as an uninterrupted one.
"""
import dataclasses
import json
import os
from typing import Iterable

from pipeline.base.fingerprints import fingerprint
from pipeline.io import fileio
from pipeline.output import bounded_reads, output_folder, shard_formats
from transforms import entries
from pipeline.base.settings import ConversionSettings
from transforms.shard_results import ShardResult
from pipeline.base.refs import ExampleRef

def input_identity(ref: ExampleRef) -> tuple:
    """What identifies an input's content without reading it: key, size, modification time;
    for an archive member also the archive's file, size, modification time and the member's
    offset in it."""
    size, mtime = ref.size, ref.mtime
    if mtime is None and ref.member is None and ref.source and not fileio.is_gcs(ref.source):
        try:
            stat = os.stat(ref.source)
            size, mtime = stat.st_size, stat.st_mtime
        except OSError:
            pass  # Reported when the chunk is converted.
    identity = ref.key, size, mtime, ref.label, ref.extras, ref.problem
    return identity + (ref.member.identity,) if ref.member is not None else identity


def chunk_fingerprint(work_id: str, label_map, key: tuple, placement: tuple,
                      refs: Iterable[ExampleRef]) -> str:
    """`work_id`: the run's (ConversionSettings.work_id); `placement`: what decides the shards
    of the chunk's examples (its first rank, the split's shard count and example count)."""
    return fingerprint(work_id, label_map, key, placement, sorted(input_identity(r) for r in refs))


def shard_fingerprint(chunk_fingerprints: Iterable[tuple[int, str]]) -> str:
    return fingerprint(sorted(chunk_fingerprints))


def save_done(path: str, result) -> None:
    """Marks the data file `path` complete, with what it holds (a ShardResult: its fields hold
    no dataclasses, so they need not be copied as dataclasses.asdict would)."""
    fields = {field.name: getattr(result, field.name) for field in dataclasses.fields(result)}
    fileio.write_bytes_atomic(f'{path}.json', json.dumps(fields).encode())


def load_done(path: str, result_type, **expected):
    """The result saved for `path` if it is complete: its sidecar there (with the `expected`
    field values), and its data file there with the size the sidecar says (else None, and the
    work is done again)."""
    result = load_sidecar(path, result_type, **expected)
    if result is None or fileio.is_untrusted(path):
        return None
    try:
        return result if fileio.size(path) == result.bytes else None
    except FileNotFoundError:
        return None


def load_sidecar(path: str, result_type, **expected):
    """The result saved for `path`, also once its data is gone (a part joined into its shard);
    None when there is none, it does not parse, or a field differs from `expected` (split,
    shard, chunk: what the run knows the file holds), or it is untrusted (fileio.is_untrusted:
    hard linked or no regular file; it is made again, under a new file). Its `temp_path` is `path`,
    whatever the file says: no path is ever taken from a file's contents."""
    if fileio.is_untrusted(f'{path}.json'):
        return None
    data = bounded_reads.read_file(f'{path}.json')
    if data is None:
        return None
    try:
        fields = json.loads(data)
        fields['label_counts'] = {int(k): v for k, v in fields['label_counts'].items()}
        fields['dropped'] = [tuple(e) for e in fields['dropped']]
        result = dataclasses.replace(result_type(**fields), temp_path=path)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if not all(type(getattr(result, name)) is int for name in ('errors', 'damaged')):
        return None
    return result if all(getattr(result, k) == v for k, v in expected.items()) else None


def finished_work(temp_dir: str) -> tuple[int, int]:
    """(chunks, shards) that an earlier attempt finished in `temp_dir`."""
    parts = fileio.match(output_folder.work_files(temp_dir, output_folder.PARTS, '*.tfrecord.json'))
    shards = fileio.match(output_folder.work_files(temp_dir, output_folder.SHARDS, '*.json'))
    return len({chunk_of_part(m.path) for m in parts}), len(shards)


def reuse_note(temp_dir: str, lock_token: str) -> str:
    """Where a resumed run notes, before it converts a chunk, how much of the work an earlier
    attempt finished it reuses, for this attempt's launcher (pipeline/progress.py)."""
    return fileio.join(temp_dir, f'reuse-{lock_token}.json')


def note_reuse(fingerprints: list, plans: dict, temp_dir: str, path: str) -> None:
    """Writes to `path` the chunks (and their inputs) of this run whose every part an earlier
    attempt finished under the same fingerprint, of those it finished: `fingerprints` are
    ((split, chunk), fingerprint) of every chunk. Part files are found by name (one listing), as
    the progress display finds them; a part whose data turns out incomplete is converted again
    all the same."""
    finished = {p for p in fileio.file_names(fileio.join(temp_dir, output_folder.PARTS))
                if p.endswith('.tfrecord.json')}
    chunks = inputs = 0
    for (split, chunk), fp in fingerprints:
        plan = plans[split]
        if all(f'{output_folder.part_path(temp_dir, split, shard, chunk, fp)}.json' in finished
               for shard in plan.shards_of_chunk(chunk)):
            chunks += 1
            inputs += plan.first_rank(chunk + 1) - plan.first_rank(chunk)
    earlier = len({chunk_of_part(p) for p in finished})
    fileio.write_bytes(path, json.dumps({'chunks': chunks, 'inputs': inputs,
                                         'earlier_chunks': earlier}).encode())


def chunk_of_part(path: str) -> tuple[str, str]:
    """(split, chunk) of a part file's path: a chunk has a part per shard it falls in."""
    split, _, chunk, _ = fileio.basename(path).split('.')[0].rsplit('-', 3)
    return split, chunk


def complete_shard(path: str, split: str, shard: int,
                   settings: ConversionSettings) -> ShardResult | None:
    """The result of a shard an earlier attempt finished: its sidecar, and a file in every
    output format (and its DALI index, with --dali_index) with the size the sidecar gives it,
    and its entry files, none untrusted (fileio.is_untrusted); else None (it is made again)."""
    result = load_done(path, ShardResult, split=split, shard=shard)
    if result is None:
        return None
    files = {output_folder.in_format(path, f): result.format_bytes.get(f.name)
             for f in shard_formats.named(settings.output_formats)}
    if settings.dali_index:
        files[output_folder.index_file(path)] = result.index_bytes
    try:
        if entries.trusted(path) and all(
                not fileio.is_untrusted(file) and fileio.size(file) == size
                for file, size in files.items()):
            return result
    except FileNotFoundError:
        pass
    return None

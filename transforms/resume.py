"""Resuming a run after a crash: reuse exactly the work that is provably the same.

A run's temporary folder is named by its run id, a fingerprint of every option that shapes the
output bytes (not of --max_error_ratio or the runner), so rerunning the same command finds the
folder an interrupted attempt left. Inside it (its layout: output/layout.py), every finished
piece of work carries a fingerprint in its name and a small JSON sidecar, written after the data
it describes (so a sidecar means the data is complete):

    parts/SPLIT-SSSSS-CCCCCC-<chunk fingerprint>.tfrecord(.json)   a chunk's records in a shard
    shards/SPLIT-SSSSS-<shard fingerprint>.FORMAT                  a shard made from its parts
    shards/SPLIT-SSSSS-<shard fingerprint>.PRIMARY.json             ... in every output format
    shards/SPLIT-SSSSS-<shard fingerprint>.tfrecord.idx             its DALI index (--dali_index)

(Parts are TFRecord files whatever the output format. A shard has a file per output format,
named with the format's suffix, and with --dali_index an index; the sidecar, named after the
first, is written after them all. A parquet row group's images, groups/<fingerprint>.images,
have none: such a blob is moved into place whole and ends in the SHA-256 of its images,
pipeline/io/image_blobs.py.)

Nothing is reused by its name or size alone: the folder is anyone's who can write it, and a
disk can flip a bit. A sidecar is parsed with bounds (bounded_reads.py) into fields of exactly
their types, and a finished piece is reused only when its bytes match the digests its sidecar
holds: a part's records their SHA-256s (`marks`), read back and checked as TFRecord; a shard's
records, in every output format, its `content` (records.content_digest); entry files and a DALI
index their SHA-256 (`digests`). A sidecar without them (an older layout) is not reused. What
does not match is done again, with a line saying so.

A chunk's fingerprint covers the run id and --max_input_mb, the label map, its place in the
shard plan (so the shards its examples fall in) and, for every input in it, the key, size and modification time
(local files are stat'ed when listing gave no size or time; Cloud Storage inputs from CSVs or
configs are identified by key and any size the listing gave; an archive member also by its
archive's file, size and modification time and its offset in it). A shard's fingerprint covers the fingerprints of its chunks. Work is
reused only under an identical fingerprint, so a changed input or option redoes exactly the
chunks and shards it affects, and a resumed run writes the same bytes as an uninterrupted one.
"""
import collections
import dataclasses
import json
import logging
import os
from typing import Iterable

from pipeline.base import resume_key
from pipeline.base.fingerprints import fingerprint
from pipeline.errors import DatasetError
from pipeline.io import fileio
from pipeline.output import bounded_reads, layout, records, shard_formats
from transforms import entries
from pipeline.base.settings import ConversionSettings
from transforms.shard_results import ShardResult
from pipeline.base.refs import ExampleRef

LOG = logging.getLogger('image_tfrecords')


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
    """Of a shard, from (chunk, fingerprint) of each chunk whose examples fall in it."""
    return fingerprint(sorted(chunk_fingerprints))


def shard_fingerprints(chunk_fps: Iterable[tuple[tuple[str, int], str]],
                       shard_plans: dict) -> dict[tuple[str, int], str]:
    """((split, chunk), fingerprint) of every chunk -> {(split, shard): fingerprint} of every
    shard."""
    chunks_of: dict[tuple[str, int], list[tuple[int, str]]] = collections.defaultdict(list)
    for (split, index), fp in chunk_fps:
        for shard in shard_plans[split].shards_of_chunk(index):
            chunks_of[(split, shard)].append((index, fp))
    return {key: shard_fingerprint(chunks) for key, chunks in chunks_of.items()}


def save_done(path: str, result, key: bytes) -> None:
    """Marks the data file `path` complete, with what it holds (a ShardResult: its fields hold
    no dataclasses, so they need not be copied as dataclasses.asdict would), sealed under `key`
    (_sealed_text)."""
    fields = {field.name: getattr(result, field.name) for field in dataclasses.fields(result)}
    fields = json.loads(json.dumps(fields))   # Sealed as read back: label ids as text.
    fields[SEAL] = resume_key.seal(key, _sealed_text(path, fields))
    fileio.write_bytes_atomic(f'{path}.json', json.dumps(fields).encode())


SEAL = 'seal'   # A sidecar's HMAC-SHA256 of what it stands for and holds (resume_key.py).


def _sealed_text(path: str, fields: dict) -> bytes:
    """What a sidecar's seal covers: the piece it stands for (its temporary folder, which names
    the run, and its file name: split, shard, chunk and the fingerprint of its inputs) and
    every field it holds but its path."""
    piece = '/'.join(path.split('/')[-3:])
    held = {name: value for name, value in fields.items() if name not in ('temp_path', SEAL)}
    return json.dumps([piece, held], sort_keys=True).encode()


def load_done(path: str, result_type, key: bytes, **expected):
    """The result saved for the part file `path` if it is complete: its sidecar there (with the
    `expected` field values), its data file there with the size and the records (their
    SHA-256s) the sidecar says, and its entry files with theirs; else None (the work is done
    again; a file that differs from its sidecar is named in a line)."""
    result = load_sidecar(path, result_type, key, **expected)
    if result is None:
        return None
    changed = _changed_part(path, result)
    if changed is not None:
        if changed:
            LOG.warning('%s', changed)
        return None
    return result


def _changed_part(path: str, result) -> str | None:
    """None when the part file `path` and its entry files hold what `result` says; '' when it
    is missing or untrusted (fileio.is_untrusted); else a line naming the file that differs."""
    redoing = f'redoing chunk {result.chunk} of {result.split}:'
    try:
        if fileio.is_untrusted(path):
            return ''
        if fileio.size(path) != result.bytes:
            return f'{redoing} its part {path} is not the size its record gives'
        marks = ''.join(records.content_mark(r) for r in shard_formats.TFRECORD.read_records(path))
    except FileNotFoundError:
        return ''
    except records.RecordError:
        marks = None
    if marks != result.marks:
        return f'{redoing} its part {path} differs from its record (digest)'
    entry = entries.match(path, result.digests)
    return None if entry is None else f'{redoing} {entry} differs from its record (digest)'


def load_sidecar(path: str, result_type, key: bytes, tell: bool = True, **expected):
    """The result saved for `path`, also once its data is gone (a part joined into its shard);
    None when there is none, it is untrusted (fileio.is_untrusted: hard linked or no regular
    file; it is made again, under a new file), larger than bounded_reads allows, not JSON of
    exactly the fields and types it is written with (an older layout, without digests or seal,
    neither), not sealed under `key` for this very piece (edited, copied from another piece's
    name, or written under another key: with `tell`, a line says so), or a field differs from
    `expected` (split, shard, chunk: what the run knows the file holds). Its `temp_path` is
    `path`, whatever the file says: no path is ever taken from a file's contents."""
    sidecar = f'{path}.json'
    if fileio.is_untrusted(sidecar):
        return None
    try:
        data = bounded_reads.read_file(sidecar, bounded=True)
        fields = None if data is None else bounded_reads.parse_json(sidecar, data)
    except DatasetError:
        return None
    if type(fields) is not dict or not _well_formed(
            {k: v for k, v in fields.items() if k != SEAL}, result_type):
        return None
    if not resume_key.sealed(key, _sealed_text(path, fields), fields.pop(SEAL, None)):
        if tell:
            LOG.warning('not reusing %s: it is not sealed for this piece under your resume key '
                        '(changed, copied from another piece, or written under another key); '
                        'its work is done again', sidecar)
        return None
    fields['label_counts'] = {int(k): v for k, v in fields['label_counts'].items()}
    fields['dropped'] = [tuple(e) for e in fields['dropped']]
    fields['hashes'] = [tuple(e) for e in fields['hashes']]
    result = dataclasses.replace(result_type(**fields), temp_path=path)
    return result if all(getattr(result, k) == v for k, v in expected.items()) else None


def changed_sidecar(path: str) -> DatasetError:
    """The error of a sidecar this run wrote, or found sealed, that is gone or changed under it
    (as sorted_runs.changed: one line, never wrapped in the runner's traceback)."""
    return DatasetError(f'{path}.json, which this run wrote, is gone or changed; keep others '
                        'from writing the output folder while a run is on, and rerun')


def _well_formed(fields, result_type) -> bool:
    """Whether `fields` are a sidecar's: every field of `result_type`, each of its type."""
    names = [field.name for field in dataclasses.fields(result_type)]
    if type(fields) is not dict or sorted(fields) != sorted(names):
        return False
    ints = ('shard', 'records', 'bytes', 'errors', 'passed_through', 'damaged', 'index_bytes')
    texts = ('split', 'temp_path', 'first_record', 'marks', 'content')
    return (all(type(fields[name]) is int for name in ints)
            and all(type(fields[name]) is str for name in texts)
            and (fields['chunk'] is None or type(fields['chunk']) is int)
            and type(fields['seconds']) in (int, float)
            and _mapping(fields['label_counts'], int) and _mapping(fields['format_bytes'], int)
            and _mapping(fields['digests'], str) and _mapping(fields['format_digests'], str)
            and all(k.isdigit() and len(k) < 12 for k in fields['label_counts'])
            and _rows(fields['dropped'], (str, str))
            and _rows(fields['hashes'], (str, str, int, int, int, int))
            and type(fields['sizes']) is list and all(type(n) is int for n in fields['sizes']))


def _mapping(value, kind: type) -> bool:
    return type(value) is dict and all(type(v) is kind for v in value.values())


def _rows(value, kinds: tuple) -> bool:
    return type(value) is list and all(
        type(row) is list and len(row) == len(kinds)
        and all(type(v) is k for v, k in zip(row, kinds)) for row in value)


def reuse_note(temp_dir: str, lock_token: str) -> str:
    """Where a resumed run notes, before it converts a chunk, how much of the work an earlier
    attempt finished it reuses, for this attempt's launcher (pipeline/progress.py)."""
    return fileio.join(temp_dir, f'reuse-{lock_token}.json')


def reused_work(fingerprints: list, plan, temp_dir: str,
                note: str | None) -> dict[tuple[str, int], str]:
    """((split, chunk), fingerprint) of every chunk of the plan (planning.Plan) -> the shards'
    fingerprints, under which a resumed run finds the shards an earlier attempt finished; with
    `note`, once what it reuses is noted there (note_reuse)."""
    if note:
        note_reuse(fingerprints, plan.shard_plans, temp_dir, note)
    return shard_fingerprints(fingerprints, plan.shard_plans)


def note_reuse(fingerprints: list, plans: dict, temp_dir: str, path: str) -> None:
    """Writes to `path` the chunks (and their inputs) of this run whose every part an earlier
    attempt finished under the same fingerprint, of those it finished: `fingerprints` are
    ((split, chunk), fingerprint) of every chunk. Part files are found by name (one listing), as
    the progress display finds them; a part whose data turns out incomplete is converted again
    all the same."""
    finished = {p for p in fileio.file_names(fileio.join(temp_dir, layout.PARTS))
                if p.endswith('.tfrecord.json')}
    chunks = inputs = 0
    for (split, chunk), fp in fingerprints:
        plan = plans[split]
        if all(f'{layout.part_path(temp_dir, split, shard, chunk, fp)}.json' in finished
               for shard in plan.shards_of_chunk(chunk)):
            chunks += 1
            inputs += plan.first_rank(chunk + 1) - plan.first_rank(chunk)
    earlier = len({layout.chunk_of_part(p) for p in finished})
    fileio.write_bytes(path, json.dumps({'chunks': chunks, 'inputs': inputs,
                                         'earlier_chunks': earlier}).encode())


def complete_shard(path: str, split: str, shard: int, settings: ConversionSettings,
                   tell: bool = True) -> ShardResult | None:
    """The result of a shard an earlier attempt finished: its sidecar, and a file in every
    output format with the size and the records (`content`) the sidecar gives it, its DALI
    index (with --dali_index) and its entry files with their digests, none untrusted
    (fileio.is_untrusted); else None (it is made again; with `tell`, a file that differs from
    its sidecar is named in a line)."""
    result = load_sidecar(path, ShardResult, settings.resume_key, tell, split=split, shard=shard)
    if result is None:
        return None
    try:
        changed = _changed_shard(path, result, settings)
    except FileNotFoundError:
        return None
    if changed is not None:
        if tell:
            LOG.warning('remaking %s shard %d: %s differs from its record (digest)', split,
                        shard + 1, changed)
        return None
    return result


def _changed_shard(path: str, result: ShardResult, settings: ConversionSettings) -> str | None:
    """None when every file of the shard `path` holds what `result` says; else the first that
    does not (FileNotFoundError when one is missing)."""
    for shard_format in shard_formats.named(settings.output_formats):
        file = layout.in_format(path, shard_format)
        if (fileio.is_untrusted(file)
                or fileio.size(file) != result.format_bytes.get(shard_format.name)):
            return file
        try:
            marks = ''.join(records.content_mark(r) for r in shard_format.read_records(file))
        except records.RecordError:
            return file
        if records.content_digest(marks) != result.content:
            return file
    if settings.dali_index:
        index = layout.index_file(path)
        if (fileio.is_untrusted(index)
                or entries.file_digest(index) != result.digests.get('index')):
            return index
    return entries.match(path, result.digests)

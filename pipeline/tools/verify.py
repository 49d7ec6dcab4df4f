"""Proves a written dataset is sound: `python -m pipeline.tools.verify OUTPUT_DIR [--sample F]`.

Reads every shard in parallel (one process per core) and checks each record's integrity
(TFRecord: length and data CRCs; ArrayRecord: the hash of every chunk), that it parses as
tf.train.Example with the expected keys and types, its label against the label names, its
SHA-256 key against its bytes, and (for all, or a `--sample` fraction) that the image decodes to
the stored size; then that shard names, shard counts and bytes agree with dataset_info.json,
that no shard is missing or left from another run, and that no image occurs twice within a split
or in two splits. A dataset written in two formats is read in both: each shard of the second
must hold exactly the records (byte for byte) of its twin in the first, whose images are the
ones decoded. When summary.json says the run wrote DALI indexes (--dali_index), each TFRecord
shard's SHARD.idx must hold exactly the offsets and sizes of its records, read from the shard's
framing. The files beside the shards are checked against the records and against what
the run noted in summary.json (pipeline/tools/metadata_checks.py): counts, each shard's bytes
and content (records swapped within or between shards), class names, feature types and each metadata file's SHA-256. Prints every
problem with shard and record index (or the file's name) and exits non-zero if there is any; a held lock and temporary folders of unfinished runs are warnings, an interrupted commit an error (exit 2) that says how to complete it.
"""
import argparse
import collections
import dataclasses
import hashlib
import io
import multiprocessing
import os
import re
import sys

from PIL import Image

from pipeline.io import fileio
from pipeline.output import (bounded_reads, commit_journal, dali_index, metadata, output_folder,
                             output_lock, records, shard_formats)
from pipeline.errors import DatasetError, printable
from pipeline.tools import metadata_checks, quality_checks

Image.MAX_IMAGE_PIXELS = None


@dataclasses.dataclass
class ShardReport:
    file_format: str
    split: str
    index: int
    name: str
    records: int = 0
    bytes: int = 0
    problems: list = dataclasses.field(default_factory=list)
    digests: list = dataclasses.field(default_factory=list)   # (16-byte digest, record index)
    content: str = ''                                 # records.content_digest of its records.
    first: str = ''                                            # records.record_digest of record 0.
    hashes: list = dataclasses.field(default_factory=list)     # (source, sha256, hash, mirror)
    classes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    kinds: dict = dataclasses.field(default_factory=dict)      # Record key -> type of values.


def _check_record(data: bytes, names: list[str], sample: float,
                  report: ShardReport) -> tuple[list[str], bytes, tuple]:
    """Problems of one record, the digest of its image, and (source, sha256, hashes); counts
    its class and notes its value types in `report`."""
    try:
        example = records.decode_example(data)
    except ValueError as exc:
        return [f'does not parse as tf.train.Example ({exc})'], b'', ()
    metadata_checks.note_kinds(report.kinds, example)
    problems = []
    for key, kind in records.IMAGE_FEATURES.items():
        values = example.get(key)
        if key in quality_checks.HASH_FEATURES and values is None:   # Written before hashes.
            continue
        ok_type = values is not None and len(values) == 1 and isinstance(
            values[0], int if kind == 'int' else bytes)
        if not ok_type:
            problems.append(f'{key} is missing or not a single {kind}')
    if problems:
        return problems, b'', ()
    value = {key: example[key][0] for key in records.IMAGE_FEATURES if key in example}
    label, text = value[records.LABEL], value[records.TEXT].decode()
    report.classes[text] += 1
    if not 0 <= label < len(names):
        problems.append(f'label {label} is out of range 0..{len(names) - 1}')
    elif names[label] != text:
        problems.append(f'label {label} is {names[label]!r} in the label names but the record says {text!r}')
    digest = hashlib.sha256(value[records.ENCODED]).digest()
    if digest.hex() != value[records.SHA256].decode():
        problems.append('image/key/sha256 does not match the image bytes')
    if int.from_bytes(digest[:4], 'big') < sample * 2**32:
        problems += _check_image(value)
    hashes = (value[records.SOURCE].decode(), digest.hex(), *quality_checks.stored_hashes(example))
    return problems, digest[:16], hashes


def _check_image(value: dict) -> list[str]:
    damage = quality_checks.damage(value[records.ENCODED], value[records.WIDTH], value[records.HEIGHT])
    if damage:
        return [damage]
    try:
        image = Image.open(io.BytesIO(value[records.ENCODED]))
        image.load()
    except Exception as exc:
        return [f'image does not decode ({exc})']
    size = (value[records.WIDTH], value[records.HEIGHT])
    problems = []
    if image.size != size:
        problems.append(f'image is {image.size[0]}x{image.size[1]} but the record says {size[0]}x{size[1]}')
    if image.format != 'JPEG' or image.mode != 'RGB':
        problems.append(f'image is {image.format} {image.mode}, not an RGB JPEG')
    return problems


def check_shard(task: tuple) -> ShardReport:
    """Reads one shard and checks every record, and its DALI index when `indexed` (runs in a
    worker process)."""
    shard_format, split, index, path, names, sample, indexed = task
    report = ShardReport(shard_format.name, split, index, fileio.basename(path))
    content = hashlib.sha256()   # records.content_digest, a record at a time.
    sizes = []                   # Each record's size on disk, from its framing.
    if not fileio.is_gcs(path) and os.path.exists(path) and not os.path.isfile(path):
        report.problems.append('not a regular file (a folder, pipe or device)')
        return report
    try:
        for number, data in enumerate(shard_format.read_records(path)):
            content.update(hashlib.sha256(data).digest())
            report.first = report.first or records.record_digest(data)
            problems, digest, hashes = _check_record(data, names, sample, report)
            report.problems += [f'record {number}: {p}' for p in problems]
            report.hashes += [hashes] if hashes else []
            report.digests.append((digest, number))
            report.records += 1
            report.bytes += len(data) + 16
            sizes.append(len(data) + dali_index.FRAMING)
        if indexed:
            report.problems += _index_problems(path, sizes)
        if not shard_format.joins_parts:  # The file's own size, index and footer included.
            report.bytes = fileio.size(path)
        report.content = content.hexdigest()
    except records.RecordError as exc:
        report.problems.append(str(exc))
    except Exception as exc:  # A missing or unreadable file.
        reason = (str(exc) or type(exc).__name__).splitlines()[0][:200]
        report.problems.append(f'cannot read: {reason}')
    return report


def _index_problems(path: str, sizes: list[int]) -> list[str]:
    """What is wrong with the DALI index of the TFRecord shard `path`, whose records take
    `sizes` bytes on disk: at most one line, naming the index and its first bad line."""
    index = dali_index.index_path(path)
    name = fileio.basename(index)
    expected = len(dali_index.index_bytes(sizes))
    try:
        found = bounded_reads.read_raw(index, expected + 64)   # Enough to see it is longer.
    except bounded_reads.NotAFile as exc:
        return [f'index {name}: {exc}, not the index --dali_index writes']
    if found is None:
        return [f'index {name}: missing ({metadata.SUMMARY} says the run wrote DALI indexes); '
                'rerun the conversion with --overwrite to write it again']
    wrong = dali_index.problem(found[0], sizes)
    return [f'index {name}: {wrong}'] if wrong else []


def _layout_problems(output_dir: str, info: dict) -> list[str]:
    expected = {fileio.basename(p) for f in shard_formats.declared(info) for s in info['splits']
                for p in metadata.shard_paths(output_dir, info, s['name'], f)}
    found = {entry.name for entry in fileio.list_dir(output_dir)
             if not entry.is_dir and output_folder.is_shard_name(entry.name)}
    problems = [f'{name}: missing shard' for name in sorted(expected - found)]
    for name in sorted(found - expected):
        problems.append(f'{name}: not part of this dataset (a shard from another run or dataset); '
                        'remove it')
    return problems


def _shard_count_problems(output_dir: str, info: dict) -> list[str]:
    """A line per split whose number of shards in dataset_info.json is not the one the run
    noted in summary.json; without a summary of this dataset, one line when dataset_info.json
    lists another number of shards than the folder holds."""
    summary = bounded_reads.load_metadata(output_dir, metadata.SUMMARY)
    if not output_folder.is_own_dataset(info, summary):
        listed = len(shard_formats.declared(info)) * sum(len(s['shardLengths'])
                                                         for s in info['splits'])
        held = sum(1 for entry in fileio.list_dir(output_dir)
                   if not entry.is_dir and output_folder.is_shard_name(entry.name))
        return [] if listed == held else [
            f'{metadata.DATASET_INFO}: lists {listed} shards, the folder holds {held} and has '
            f'no {metadata.SUMMARY} of this dataset; no shard was read']
    problems = []
    for split in info['splits']:
        noted = summary['splits'][split['name']]
        count = len(split['shardLengths'])
        shards = noted.get('shards') if isinstance(noted, dict) else None
        if shards != count:
            problems.append(f"{metadata.DATASET_INFO}: {split['name']} lists {count} shards, "
                            f'{metadata.SUMMARY} says {shards}; no shard was read')
    return problems


LINES_PER_KIND = 20   # Problems of one kind printed before "... and N more".


def capped(problems: list[str]) -> list[str]:
    """`problems` with at most LINES_PER_KIND of each kind (the text after the first ': ',
    digits aside), the rest of a kind counted in one line after its last."""
    kinds = collections.Counter(_kind(p) for p in problems)
    shown, lines = collections.Counter(), []
    for problem in problems:
        kind = _kind(problem)
        shown[kind] += 1
        if shown[kind] <= LINES_PER_KIND:
            lines.append(problem)
        elif shown[kind] == kinds[kind]:
            lines.append(f'... and {kinds[kind] - LINES_PER_KIND} more: '
                         f'{problem.split(": ", 1)[-1]}')
    return lines


def _kind(problem: str) -> str:
    return re.sub(r'\d+', 'N', problem.split(': ', 1)[-1])


def warnings(output_dir: str) -> list[str]:
    """What is left in `output_dir` besides the dataset: a lock, temporary folders."""
    found = []
    state = output_lock.read_lock(output_dir)
    if state is not None:
        found.append(f'{output_lock.lock_path(output_dir)}: held by '
                     f'{output_lock.describe(state)}; {output_lock.lock_advice(state)}')
    for folder in output_folder.temp_folders(output_dir):
        size = f'{fileio.tree_bytes(folder.path) / 1e6:.1f} MB'
        if folder.state == output_folder.COMMITTED:
            found.append(f'{folder.path}: left by run {folder.run_id}, whose commit finished '
                         f'({size}); the next run on this folder removes it')
        else:
            found.append(f'{folder.path}: temporary folder of an unfinished run ({size}); '
                         'rerunning it resumes from there, --clean_temp or --overwrite removes it')
    return found


def verify(output_dir: str, sample: float = 1.0, processes: int | None = None) -> list[str]:
    """All problems of the dataset under `output_dir` ([] when it is sound)."""
    output_dir = output_dir.rstrip('/')
    journal = commit_journal.read_journal(output_dir)
    if journal is not None:
        raise DatasetError(f'{output_dir} holds an interrupted commit of run {journal.run_id} '
                           f'({commit_journal.journal_path(output_dir)}); rerun the conversion '
                           'command to complete it')
    info = bounded_reads.load_metadata(output_dir, metadata.DATASET_INFO)
    labels = bounded_reads.read_file(fileio.join(output_dir, metadata.LABELS), bounded=True)
    if info is None or labels is None:
        raise DatasetError(f'{output_dir} has no readable dataset_info.json and labels.txt (a '
                           'JSON object and a text file of this tool)')
    names = labels.decode(errors='replace').splitlines()
    output_folder.named_files(info, fileio.join(output_dir, metadata.DATASET_INFO))
    mismatched = _shard_count_problems(output_dir, info)
    if mismatched:   # No shard is read nor named one by one: the counts already disagree.
        print(f'{len(mismatched)} problem(s)')
        return mismatched
    problems = _layout_problems(output_dir, info)
    formats = shard_formats.declared(info)
    summary = bounded_reads.load_metadata(output_dir, metadata.SUMMARY)
    indexed = isinstance(summary, dict) and summary.get('dali_index') is True
    # A second format's records must equal the first's, so only the first's images are decoded.
    tasks = [(f, s['name'], i, path, names, sample if f == formats[0] else 0.0,
              indexed and f == dali_index.FORMAT)
             for f in formats for s in info['splits']
             for i, path in enumerate(metadata.shard_paths(output_dir, info, s['name'], f))]
    with multiprocessing.get_context('spawn').Pool(processes) as pool:
        reports = sorted(pool.imap_unordered(check_shard, tasks),
                         key=lambda r: ([f.name for f in formats].index(r.file_format), r.split,
                                        r.index))
    primary = {(r.split, r.index): r for r in reports if r.file_format == formats[0].name}
    seen: dict[bytes, tuple] = {}
    for split in info['splits']:
        lengths = [int(n) for n in split['shardLengths']]
        for report in (r for r in reports if r.split == split['name']):
            where = f"{split['name']} shard {report.index} ({report.name})"
            problems += [f'{where} {p}' for p in report.problems]
            if report.records != lengths[report.index]:
                problems.append(f'{where}: {report.records} records, dataset_info.json says '
                                f'{lengths[report.index]}')
            twin = primary[(report.split, report.index)]
            if report is not twin:
                if not report.problems and not twin.problems and report.content != twin.content:
                    problems.append(f'{where}: records differ from {twin.name}')
                continue
            for digest, number in report.digests:
                if digest and digest in seen:
                    other = seen[digest]
                    kind = 'within a split' if other[0] == split['name'] else 'across splits (leakage)'
                    problems.append(f'{where} record {number}: same image as {other[0]} shard '
                                    f'{other[1]} record {other[2]}: duplicate {kind}')
                elif digest:
                    seen[digest] = (split['name'], report.index, number)
        shards = [r for key, r in primary.items() if key[0] == split['name']]
        total = sum(r.bytes for r in shards)
        if not any(r.problems for r in shards) and total != int(split['numBytes']):
            problems.append(f"{split['name']}: {total} bytes, dataset_info.json says {split['numBytes']}")
    problems += metadata_checks.metadata_problems(output_dir, info, labels,
                                                  list(primary.values()))
    problems += quality_checks.leakage_problems(
        output_dir, [(r.split, *h) for r in primary.values() for h in r.hashes])
    _print_summary(info, reports, problems)
    return problems


def _print_summary(info: dict, reports: list[ShardReport], problems: list[str]) -> None:
    for file_format in (f.name for f in shard_formats.declared(info)):
        for split in info['splits']:
            shards = [r for r in reports
                      if r.split == split['name'] and r.file_format == file_format]
            print(f"{split['name']:<12}{sum(r.records for r in shards):>10} records"
                  f"{len(shards):>6} {file_format + ' shards':<20}"
                  f"{sum(r.bytes for r in shards) / 1e6:>8.1f} MB")
    print(f'{len(problems)} problem(s)' if problems else 'OK: no problems found')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog='python -m pipeline.tools.verify', description=__doc__.split('\n\n')[0])
    parser.add_argument('output_dir', help='The dataset folder (local or gs://).')
    parser.add_argument('--sample', type=float, default=1.0,
                        help='Fraction of images to decode (default 1: all); every record is '
                        'still read, CRC-checked, parsed and hashed.')
    parser.add_argument('--processes', type=int, default=None, help='Default: one per core.')
    args = parser.parse_args(argv)
    try:
        problems = verify(args.output_dir, args.sample, args.processes)
        for warning in warnings(args.output_dir.rstrip('/')):
            print(f'warning: {printable(warning)}', file=sys.stderr)
    except DatasetError as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 2
    for problem in capped(problems):
        print(printable(problem), file=sys.stderr)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())

"""One shard read and checked, in a worker process of `verify`: each record's integrity, its
Example's keys and types, its label against the label names, its SHA-256 key against its bytes,
(for a sample) its image decoded against the stored size, and the shard's DALI index; in a
format that rewrites the records (not TFRecord), the SHA-256 of the whole file."""
import collections
import dataclasses
import hashlib
import io
import os

import numpy as np
from PIL import Image

from pipeline.io import fileio
from pipeline.output import bounded_reads, dali_index, metadata, records
from pipeline.output.shard_formats import ShardFormat
from pipeline.tools import metadata_checks, quality_checks

Image.MAX_IMAGE_PIXELS = None


@dataclasses.dataclass(frozen=True)
class ShardTask:
    """One shard to read, and how: `sample` the fraction of images decoded (0 for a twin),
    `indexed` whether its DALI index is read, `hashed` whether its records must carry
    perceptual hashes (None: they may), `compute_hashes` whether those without are computed
    (datasets of versions before hashes), `damaged_kept` whether a damaged JPEG is a finding
    (--damaged_images=keep) rather than a problem."""
    shard_format: ShardFormat
    split: str
    index: int
    path: str
    names: tuple[str, ...]
    sample: float
    indexed: bool
    hashed: bool | None
    compute_hashes: bool
    damaged_kept: bool


@dataclasses.dataclass
class ShardReport:
    file_format: str
    split: str
    index: int
    name: str
    records: int = 0
    bytes: int = 0
    complete: bool = False        # Read to its end: its bytes and content are known.
    problems: list = dataclasses.field(default_factory=list)        # Of its records, its reading.
    index_problems: list = dataclasses.field(default_factory=list)  # Of its DALI index.
    content: str = ''             # records.content_digest of its records.
    first: str = ''               # records.record_digest of record 0.
    rows: np.ndarray = dataclasses.field(   # A quality_checks.RECORD row per record.
        default_factory=lambda: np.zeros(0, quality_checks.RECORD))
    damaged: int = 0              # Damaged JPEGs, where kept (--damaged_images=keep).
    damaged_examples: list = dataclasses.field(default_factory=list)  # (number, source, reason)
    classes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    kinds: dict = dataclasses.field(default_factory=dict)      # Record key -> type of values.
    sha256: str | None = None     # Of the file's bytes, for a format that rewrites the records.


def _check_record(data: bytes, number: int, task: ShardTask,
                  report: ShardReport) -> tuple[list[str], tuple | None]:
    """Problems of one record and its RECORD row (None when it has not the keys to make
    one); counts its class, notes its value types and (where kept) its damage in `report`."""
    try:
        example = records.decode_example(data)
    except ValueError as exc:
        return [f'does not parse as tf.train.Example ({exc})'], None
    metadata_checks.note_kinds(report.kinds, example)
    problems = []
    for key, kind in records.IMAGE_FEATURES.items():
        values = example.get(key)
        if key in quality_checks.HASH_FEATURES and values is None and not task.hashed:
            continue
        ok_type = values is not None and len(values) == 1 and isinstance(
            values[0], int if kind == 'int' else bytes)
        if not ok_type:
            problems.append(f'{key} is missing or not a single {kind}')
    if problems:
        return problems, None
    value = {key: example[key][0] for key in records.IMAGE_FEATURES if key in example}
    label, text = value[records.LABEL], value[records.TEXT].decode(errors='replace')
    source = value[records.SOURCE].decode(errors='replace')
    report.classes[text] += 1
    if not 0 <= label < len(task.names):
        problems.append(f'label {label} is out of range 0..{len(task.names) - 1}')
    elif task.names[label] != text:
        problems.append(f'label {label} is {task.names[label]!r} in the label names but the '
                        f'record says {text!r}')
    digest = hashlib.sha256(value[records.ENCODED]).digest()
    if digest.hex() != value[records.SHA256].decode(errors='replace'):
        problems.append('image/key/sha256 does not match the image bytes')
    if int.from_bytes(digest[:4], 'big') < task.sample * 2**32:
        problems += _image_problems(value, number, source, task, report)
    hashes = quality_checks.stored_hashes(example, task.compute_hashes)
    return problems, quality_checks.record_row(number, digest, hashes, source)


def _image_problems(value: dict, number: int, source: str, task: ShardTask,
                    report: ShardReport) -> list[str]:
    """Problems of a record's decoded image; a damaged JPEG that the run kept
    (`task.damaged_kept`) is counted in `report` instead."""
    damage = quality_checks.damage(value[records.ENCODED], value[records.WIDTH],
                                   value[records.HEIGHT])
    if damage is None:
        return _decode_problems(value)
    if not task.damaged_kept:
        return [damage]
    report.damaged += 1
    if len(report.damaged_examples) < quality_checks.EXAMPLES:
        report.damaged_examples.append((number, source, damage))
    return []


def _decode_problems(value: dict) -> list[str]:
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


def check_shard(task: ShardTask) -> ShardReport:
    """Reads one shard and checks every record, and its DALI index when `task.indexed` (runs
    in a worker process)."""
    report = ShardReport(task.shard_format.name, task.split, task.index,
                         fileio.basename(task.path))
    content = hashlib.sha256()   # records.content_digest, a record at a time.
    sizes, rows = [], []         # Each record's size on disk (from its framing), its row.
    path = task.path
    if not fileio.is_gcs(path) and os.path.exists(path) and not os.path.isfile(path):
        report.problems.append('not a regular file (a folder, pipe or device)')
        return report
    try:
        for number, data in enumerate(task.shard_format.read_records(path)):
            content.update(hashlib.sha256(data).digest())
            report.first = report.first or records.record_digest(data)
            problems, row = _check_record(data, number, task, report)
            report.problems += [f'record {number}: {p}' for p in problems]
            rows += [row] if row else []
            report.records += 1
            report.bytes += len(data) + 16
            sizes.append(len(data) + dali_index.FRAMING)
        if not task.shard_format.joins_parts:  # The file's own size, index and footer included.
            report.bytes = fileio.size(path)
        report.content, report.complete = content.hexdigest(), True
    except records.RecordError as exc:
        report.problems.append(str(exc))
    except Exception as exc:  # A missing or unreadable file.
        report.problems.append(f'cannot read: {_reason(exc)}')
    if not task.shard_format.joins_parts:   # Its bytes besides its records (index, footer).
        try:
            report.sha256 = bounded_reads.file_sha256(path)
        except Exception as exc:
            if report.complete:   # Else already reported: it could not be read.
                report.problems.append(f'cannot read: {_reason(exc)}')
    if task.indexed and report.complete:
        report.index_problems = _index_problems(path, sizes)
    report.rows = np.array(rows, dtype=quality_checks.RECORD)
    return report


def _reason(exc: Exception) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0][:200]


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

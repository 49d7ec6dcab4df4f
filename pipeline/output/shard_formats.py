"""Shard file formats: one object per format, all in one registry.

A format says what it is called (`--output_format`, the TFDS `fileFormat` of dataset_info.json,
the suffix in shard file names), how a shard file is written from records, and how one is read
back. Reading checks integrity: every record is checked as it is read (a CRC per TFRecord
record, a hash per ArrayRecord chunk), and damage raises a RecordError.

Workers write a chunk's records into TFRecord part files (pipeline/output/records.py); a shard
in a format is made from its parts, in order. TFRecord shards are the parts joined (a compose on
Cloud Storage, a kernel copy on disk); any other format streams the parts' records through its
writer into a local file, which is then uploaded and checked. Everything else asks this module
for a format by name; adding one is a module that builds a ShardFormat and a `register` call.
"""
import dataclasses
import difflib
import os
import tempfile
from typing import Callable, Iterable, Iterator, Sequence

from pipeline.output import array_records, bounded_reads, records
from pipeline.io import fileio
from pipeline.errors import DatasetError


def _read_tfrecord(path: str) -> Iterator[bytes]:
    with fileio.open_read(path) as stream:
        yield from records.read_records(stream)


def _write_tfrecord(serialized: Iterable[bytes], local_path: str) -> int:
    count = 0
    with open(local_path, 'wb') as out:
        for record in serialized:
            out.write(records.frame_record(record))
            count += 1
    return count


@dataclasses.dataclass(frozen=True)
class ShardFormat:
    """A shard file format. Workers receive the object itself, so a format registered only in
    the launcher still writes on every worker."""
    name: str          # As typed in --output_format.
    suffix: str        # In shard file names: NAME-SPLIT.SUFFIX-00000-of-00008.
    tfds_name: str     # TFDS's fileFormat / alternativeFileFormats entry in dataset_info.json.
    # Records -> a new local file; returns the number of records written.
    write_file: Callable[[Iterable[bytes], str], int] = dataclasses.field(repr=False, compare=False)
    # The records of a local or gs:// file, in order, each checked (RecordError on damage).
    read_records: Callable[[str], Iterator[bytes]] = dataclasses.field(repr=False, compare=False)
    # Lines of Python that load a dataset in this format, with {out} for its folder.
    load_lines: tuple[str, ...] = ()
    joins_parts: bool = False   # A shard is its TFRecord parts' bytes joined (no rewrite).

    def write_shard(self, parts: list[str], target: str) -> tuple[int, str | None]:
        """Writes the records of the TFRecord files `parts`, in order, as the shard `target`
        (local or gs://); returns its size in bytes and, for a format that rewrites the
        records, the SHA-256 of its bytes (None for TFRecord: its bytes are its records
        framed, which their CRCs and summary.json's shard_content cover)."""
        if self.joins_parts:
            return fileio.concatenate(parts, target), None
        handle, local = tempfile.mkstemp(prefix='image-tfrecords-shard-', suffix=f'.{self.suffix}')
        os.close(handle)
        try:
            self.write_file((r for part in parts for r in _read_tfrecord(part)), local)
            digest = bounded_reads.file_sha256(local)
            return fileio.upload(local, target), digest
        finally:
            os.remove(local)


TFRECORD = ShardFormat(
    name='tfrecord', suffix='tfrecord', tfds_name='tfrecord', write_file=_write_tfrecord,
    read_records=_read_tfrecord, joins_parts=True,
    load_lines=('tfds.builder_from_directory({out!r}).as_dataset(split="train")',))
ARRAY_RECORD = ShardFormat(
    name='array_record', suffix='array_record', tfds_name='array_record',
    write_file=array_records.write_file, read_records=array_records.read_records,
    load_lines=('tfds.builder_from_directory({out!r}).as_data_source(split="train")',
                '# or with Grain: from pipeline.readers.grain_data import dataset',
                '#   dataset({out!r}, "train", seed=0)'))

_REGISTRY: dict[str, ShardFormat] = {}


def register(shard_format: ShardFormat) -> ShardFormat:
    """Makes a format known by its name (its suffix must be its own); returns it."""
    for known in _REGISTRY.values():
        if shard_format.name != known.name and shard_format.suffix == known.suffix:
            raise ValueError(f'format {shard_format.name}: suffix {known.suffix!r} is taken')
    _REGISTRY[shard_format.name] = shard_format
    return shard_format


register(TFRECORD)
register(ARRAY_RECORD)


def names() -> list[str]:
    """The names --output_format accepts."""
    return list(_REGISTRY)


def suffixes() -> list[str]:
    return [f.suffix for f in _REGISTRY.values()]


def parse(text: str) -> tuple[ShardFormat, ...]:
    """--output_format (names, comma-separated; the first is the primary format) as formats;
    an unknown or repeated name is a DatasetError."""
    return named([name.strip() for name in str(text).split(',')])


def named(wanted: Sequence[str]) -> tuple[ShardFormat, ...]:
    """The formats of these names, in their order (see `parse`)."""
    for name in wanted:
        if name not in _REGISTRY:
            near = difflib.get_close_matches(name, names(), 1)
            raise DatasetError(f'--output_format: unknown format {name!r}; choose from '
                               f'{", ".join(names())}'
                               + (f' (did you mean {near[0]}?)' if near else ''))
    if len(set(wanted)) < len(wanted):
        raise DatasetError(f'--output_format names a format twice: {",".join(wanted)}')
    return tuple(_REGISTRY[name] for name in wanted)


def declared(info: dict) -> list[ShardFormat]:
    """The formats dataset_info.json declares, the default one first (TFDS: tfrecord when none
    is); a ValueError for one this tool does not know."""
    tfds_names = [info.get('fileFormat', TFRECORD.tfds_name), *info.get('alternativeFileFormats', [])]
    by_tfds = {f.tfds_name: f for f in _REGISTRY.values()}
    if not all(isinstance(n, str) and n in by_tfds for n in tfds_names):
        raise ValueError(f'file formats {tfds_names!r}')
    return [by_tfds[n] for n in tfds_names]

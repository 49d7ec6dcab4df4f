"""ArrayRecord shard files: the writer options, writing one shard, reading one back.

ArrayRecord (a Riegeli file with an index and a footer) gives random access to every record, which
Grain and TFDS's `as_data_source()` use for a true global shuffle. The records are the same
serialized `tf.train.Example`s as in the TFRecord shards, in the same order.

WRITER_OPTIONS was chosen by measurement (benchmarks/array_record.py, numbers in docs/performance.md):
`group_size:1` puts every record in its own chunk, so reading one record decodes one record (with
larger groups a random read decompresses the whole group); `uncompressed` because the records are
JPEG bytes, which zstd does not shrink, and compressing them costs write time.

Riegeli hashes every chunk, so a changed byte is found when the record is read (RecordError).
The library writes local files only; it reads local files and, since array_record 0.8.6, gs://
objects (through the Cloud Storage C++ client and Application Default Credentials).
"""
from typing import Iterable, Iterator

from pipeline.output.records import RecordError

WRITER_OPTIONS = 'group_size:1,uncompressed'
_READ_BATCH = 64          # Records per read call when reading a file through.
_SEQUENTIAL = 'readahead_buffer_size:4M,max_parallelism:1'


def write_file(serialized: Iterable[bytes], local_path: str, options: str = WRITER_OPTIONS) -> int:
    """Writes the records in order into a new ArrayRecord file; returns how many."""
    from array_record.python.array_record_module import ArrayRecordWriter

    writer = ArrayRecordWriter(local_path, options)
    count = 0
    try:
        for record in serialized:
            writer.write(record)
            count += 1
    finally:
        writer.close()
    return count


def open_reader(path: str, options: str = _SEQUENTIAL):
    """An ArrayRecordReader of a local or gs:// file; a damaged file is a RecordError."""
    from array_record.python.array_record_module import ArrayRecordReader

    try:
        return ArrayRecordReader(path, options)
    except RuntimeError as exc:
        raise RecordError(_first_line(exc)) from None


def read_records(path: str) -> Iterator[bytes]:
    """Yields the records of an ArrayRecord file in order, checking every chunk's hash."""
    reader = open_reader(path)
    try:
        total = reader.num_records()
        for start in range(0, total, _READ_BATCH):
            end = min(start + _READ_BATCH, total)
            try:
                batch = reader.read(start, end)
            except RuntimeError as exc:
                raise RecordError(f'records {start}-{end - 1}: {_first_line(exc)}') from None
            yield from batch
    finally:
        reader.close()


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:300]

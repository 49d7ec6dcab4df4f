"""Fuzzes Hugging Face parquet files (pipeline/inputs/parquet_files.py, parquet_row_groups.py,
parquet_pages.py): the schema's huggingface metadata (its JSON, the Image and ClassLabel
features), Image structs of other shapes and paths (read under a root of the whole disk or of
the case's own folder), label columns of other types, row groups and pages
of other sizes, unknown thrift fields (lists, sets and maps of any element, nested deep or
claiming more elements than there are bytes) in the footer and page headers, and the file's
own bytes. Every file is refused in one line naming it (a
DatasetError), or every one of its rows is one ref, and each ref read is an image or a reported
input; nothing else is raised. pyarrow's own code runs here, so the suite runs this in a process
of its own.

    python -m benchmarks.fuzz_parquet --seconds 300 [--seed 1]
"""
import io
import json
import os
import random
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks import fuzz_thrift, fuzzing
from pipeline.errors import DatasetError
from pipeline.inputs.parquet_files import ParquetFile, read_columns
from pipeline.inputs.parquet_image_paths import ImageRoot
from pipeline.testing import imagemaker

LIMIT = 1 << 20   # --max_input_mb of the cases: small, so that pages over it come cheap.
JPEG = imagemaker.jpeg(8, 8)
TOKENS = [b'{', b'}', b'[', b']', b'"', b',', b':', b'0', b'9', b'-1', b'1e10', b'null',
          b'"names"', b'"num_classes"', b'"_type"', b'"ClassLabel"', b'"Image"', b'\\u0000',
          b'\xff', b'\n']


def _features(rng: random.Random) -> bytes:
    """The huggingface metadata: what datasets writes, its values swapped or its text mutated."""
    label = {'_type': 'ClassLabel', 'names': ['a', 'b', 'c']}
    change = rng.randrange(6)
    if change == 0:
        label['names'] = rng.choice([[], 'abc', [1, 2], ['a', 'a'], [str(i) for i in range(5000)],
                                     None, {'a': 1}])
    elif change == 1:
        label = {'_type': 'ClassLabel', 'num_classes': rng.choice(
            [3, '5', 10 ** 10, -1, 2.5, True, None, [3], 2_000_000])}
    elif change == 2:
        label = rng.choice([5, 'x', [], None, {'_type': 'Value', 'dtype': 'int64'}])
    text = json.dumps({'info': {'features': {'image': {'_type': 'Image'}, 'label': label}}})
    data = text.encode()
    if rng.random() < 0.3:
        data = fuzzing.mutated(rng, data, TOKENS)
    return data


def _images(rng: random.Random, rows: int) -> pa.Array:
    """An image column: Image structs of some shape, or plain values."""
    images = [None if rng.random() < 0.1 else
              rng.choice([JPEG, b'', b'x' * rng.choice((1, 1000, LIMIT + 1))]) for _ in range(rows)]
    shape = rng.randrange(6)
    if shape == 0:
        return pa.array(images, pa.binary())
    path_type = [pa.string(), pa.int64(), pa.struct([('x', pa.string())]), None, pa.large_string()][
        rng.randrange(5)]
    paths = [rng.choice([None, 'a.jpg', '', '../x.jpg', '/dev/zero', '/proc/self/status',
                         'x' * 5000, 'a\0b', 'gs://b/a.jpg', 'link/../../x.jpg'])
             if path_type in (pa.string(), pa.large_string()) else
             rng.choice([None, 7]) if path_type == pa.int64() else
             rng.choice([None, {'x': 'a'}]) for _ in range(rows)]
    fields = [pa.field('bytes', pa.large_binary() if shape == 1 else pa.binary())]
    arrays = [pa.array(images, fields[0].type)]
    if path_type is not None:
        fields.append(pa.field('path', path_type))
        arrays.append(pa.array(paths, path_type))
    mask = pa.array([rng.random() < 0.05 for _ in range(rows)])
    return pa.StructArray.from_arrays(arrays, fields=fields, mask=mask)


def _labels(rng: random.Random, rows: int) -> pa.Array:
    kind = rng.randrange(5)
    if kind == 0:
        return pa.array([rng.choice(['a', 'b', None, '', 'x' * 70_000, 'two\nlines'])
                         for _ in range(rows)])
    if kind == 1:
        return pa.array([rng.random() * 3 for _ in range(rows)])
    return pa.array([rng.choice([0, 1, 2, -1, None, 7, 10 ** 12]) for _ in range(rows)],
                    pa.int64())


def make(rng: random.Random) -> bytes:
    """A parquet file's bytes."""
    rows = rng.choice((1, 3, 40))
    table = pa.table({'image': _images(rng, rows), 'label': _labels(rng, rows)})
    table = table.replace_schema_metadata({b'huggingface': _features(rng)})
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=rng.choice((1, 4, 64)),
                   compression=rng.choice(['none', 'snappy', 'zstd']),
                   use_dictionary=rng.random() < 0.5, write_batch_size=rng.choice((1, 1024)),
                   data_page_size=rng.choice((1, 1 << 20)))
    data = out.getvalue()
    if rng.random() < 0.15:   # An unknown thrift field in the footer or a page header.
        data = _with_field(rng, data, _thrift_field(rng))
    if rng.random() < 0.25:   # Damage: anywhere, or in the footer and page headers mostly.
        data = fuzzing.mutated(rng, data, [b'\0', b'\xff', b'\x15', b'\x19\x1c'], steps=2)
    return data


def _thrift_field(rng: random.Random) -> bytes:
    """An unknown field (id 100) of a struct, the shapes that once hung or crashed a reader: a
    map of booleans claiming 2**60 entries, lists nested 5,000 deep, and their like."""
    kind = rng.choice((9, 10, 11))
    return bytes([kind]) + fuzz_thrift.varint(200) + fuzz_thrift.container(rng, kind, 0)


def _with_field(rng: random.Random, data: bytes, field: bytes) -> bytes:
    """The parquet file `data` with `field` as the last field of its footer, or the first of the
    first page header of a column chunk (the offsets after it left as they were)."""
    length = int.from_bytes(data[-8:-4], 'little')
    footer = data[-8 - length:-8]
    if rng.random() < 0.5 and footer.endswith(b'\0'):
        footer = footer[:-1] + field + b'\0'
        return data[:-8 - length] + footer + len(footer).to_bytes(4, 'little') + b'PAR1'
    metadata = pq.ParquetFile(io.BytesIO(data)).metadata
    column = metadata.row_group(0).column(rng.randrange(metadata.num_columns))
    start = column.dictionary_page_offset or column.data_page_offset
    return data[:start] + field + data[start:]


def check(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, 'train-00000-of-00001.parquet')
        with open(path, 'wb') as out:
            out.write(data)
        try:
            # The whole disk as the root in half the cases: its devices and /proc are read.
            root = '/' if len(data) % 2 else os.path.realpath(folder)
            _list_and_read(path, len(data), ImageRoot(root))
        except DatasetError as exc:
            assert path in str(exc) and '\n' not in str(exc), exc


def _list_and_read(path: str, size: int, root: ImageRoot) -> None:
    columns = read_columns(path, size)
    rows = pq.ParquetFile(path).metadata.num_rows   # Not a column chunk's: those may abort.
    refs = [ref for span in ParquetFile('train', path, 'x.parquet', size, None, columns,
                                        LIMIT, root).split_further() for ref in span.examples()]
    assert len(refs) == rows, (len(refs), rows)
    for ref in refs:
        assert (ref.problem is None) == (ref.group is not None), ref
    grouped = [ref for ref in refs if ref.group is not None]
    for ref in (grouped[0].group.read(grouped) if grouped else ()):
        assert (ref.data is None) != (ref.problem is None), ref
        assert ref.data is None or len(ref.data) <= LIMIT


def fuzz(seconds: float, seed: int) -> int:
    return fuzzing.run(make, check, seconds, seed)


if __name__ == '__main__':
    fuzzing.main(fuzz, 'parquet files')

"""Fuzzes CSV inputs (`--csv_SPLIT`, pipeline/inputs/csv_files.py): headers, quotes (stray ones
inside a field too), line endings, field counts and sizes, encodings. Every CSV is refused in
one line naming it and line 1 (a header that cannot name features), or every chunk of it lists
into refs that each are a reported input naming the file and line, or a path with a label
that is UTF-8 text; and cut into chunks of a few bytes, it gives a ref for each record the
csv module reads in the whole file, in order, with the same label (a chunk cut inside a record
dropped rows, or made two of one).

    python -m benchmarks.fuzz_csv --seconds 300 [--seed 1]
"""
import csv
import io
import os
import random
import tempfile

from benchmarks import fuzzing
from pipeline.errors import DatasetError
from pipeline.inputs import csv_files

SEEDS = [b'uri,label\na.jpg,cat\nb.jpg,dog\n', b'a.jpg,cat\r\n"b,c.jpg",dog\r\n',
         b'path,label,size,caption\na.jpg,cat,123,"two\nlines"\n', b'\xef\xbb\xbfuri,label\nx,y\n',
         b'uri,label,size\nsub/a.jpg,cat,7\n', b'uri,label\na"b.jpg,12" vinyl\n"c\nd.jpg",cd\n',
         b'a.jpg,caf\xe9\nb.jpg,caf\xe8\n']
TOKENS = [b'"', b',', b'\n', b'\r', b'\0', b'\xff', b'\xef\xbb\xbf', b'label', b'uri', b'size',
          b'image/encoded', b'9' * 30, b'\xc2\xb2', b'x' * 200_000, b'a,' * 1000, b'12" vinyl',
          b'""', b'caf\xe9', b'\r\n"', b',"', b'"\n']


def make(rng: random.Random) -> bytes:
    return fuzzing.mutated(rng, rng.choice(SEEDS), TOKENS)


def check(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, 'train.csv')
        with open(path, 'wb') as out:
            out.write(data)
        try:
            chunks = csv_files.CsvFile('train', path).split_further()
        except DatasetError as exc:
            assert f'{path} line 1:' in str(exc), exc
            return
        refs = [ref for chunk in chunks for ref in chunk.examples()]
        for ref in refs:
            if ref.problem is not None:
                assert ref.problem.startswith(f'{path} line '), ref.problem
            else:
                assert ref.source and ref.label, ref
                ref.label.encode()   # UTF-8 text: no byte of another encoding kept as is.
        every, block = csv_files.CSV_CHUNK_BYTES, csv_files._BLOCK
        try:   # Cut into chunks of a few bytes, scanned a few bytes at a time: the same records.
            csv_files.CSV_CHUNK_BYTES, csv_files._BLOCK = 7, 5 if len(data) < 1 << 16 else 1 << 12
            small = [ref for chunk in csv_files.CsvFile('train', path).split_further()
                     for ref in chunk.examples()]
        finally:
            csv_files.CSV_CHUNK_BYTES, csv_files._BLOCK = every, block
        rows = _rows(data, header=bool(chunks) and chunks[0].columns is not None)
        assert len(small) == len(refs) == len(rows), (len(small), len(refs), len(rows))
        for ref, other, row in zip(refs, small, rows):
            assert ref == other, (ref, other)
            assert ref.problem is not None or ref.label == row[1].strip(), (ref, row)


def _rows(data: bytes, header: bool) -> list[list[str]]:
    """The records the csv module reads in the whole file (no field bound), blank lines and the
    header left out."""
    csv_files._lift_field_limit()
    text = data.decode('utf-8-sig', 'surrogateescape')
    rows = [row for row in csv.reader(io.StringIO(text, newline=''))]
    return [row for row in rows[1 if header else 0:] if row]


def fuzz(seconds: float, seed: int) -> int:
    return fuzzing.run(make, check, seconds, seed)


if __name__ == '__main__':
    fuzzing.main(fuzz, 'CSV files')

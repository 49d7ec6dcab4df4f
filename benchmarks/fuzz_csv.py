"""Fuzzes CSV inputs (`--csv_SPLIT`, pipeline/inputs/csv_files.py): headers, quotes, line
endings, field counts and sizes, encodings. Every CSV is refused in one line naming it and
line 1 (a header that cannot name features), or every chunk of it lists into refs that each
are a reported input naming the file and line, or a path with a label.

    python -m benchmarks.fuzz_csv --seconds 300 [--seed 1]
"""
import os
import random
import tempfile

from benchmarks import fuzzing
from pipeline.errors import DatasetError
from pipeline.inputs import csv_files

SEEDS = [b'uri,label\na.jpg,cat\nb.jpg,dog\n', b'a.jpg,cat\r\n"b,c.jpg",dog\r\n',
         b'path,label,size,caption\na.jpg,cat,123,"two\nlines"\n', b'\xef\xbb\xbfuri,label\nx,y\n',
         b'uri,label,size\nsub/a.jpg,cat,7\n']
TOKENS = [b'"', b',', b'\n', b'\r', b'\0', b'\xff', b'\xef\xbb\xbf', b'label', b'uri', b'size',
          b'image/encoded', b'9' * 30, b'\xc2\xb2', b'x' * 200_000, b'a,' * 1000]


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
        for chunk in chunks:
            for ref in chunk.examples():
                if ref.problem is not None:
                    assert ref.problem.startswith(f'{path} line '), ref.problem
                else:
                    assert ref.source and ref.label, ref


def fuzz(seconds: float, seed: int) -> int:
    return fuzzing.run(make, check, seconds, seed)


if __name__ == '__main__':
    fuzzing.main(fuzz, 'CSV files')

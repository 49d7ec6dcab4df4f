"""Fuzzes `--labels_file` (one class name per line; read by pipeline/sources.py): line endings,
blank lines, repeated names, encodings, control characters and other line breaks (form feed,
U+2028, NEL, \\x1c), long lines. Every file gives its names, each one line of text free of
control characters and line i (from 0) of the file naming id i, or is refused in one line
naming the flag and the file.

    python -m benchmarks.fuzz_labels_file --seconds 300 [--seed 1]
"""
import os
import random
import tempfile
import unicodedata

from benchmarks import fuzzing
from pipeline.errors import DatasetError
from pipeline.sources import _read_labels_file

SEEDS = [b'cat\ndog\nfox\n', b'n01440764\r\nn01443537\r\n', b'  tench \n\ngoldfish\n',
         '\u00e9t\u00e9\nhiver\n'.encode()]
TOKENS = [b'\n', b'\r', b'\0', b'\xff', b'\x1c', b'\xc2\x85', b'\xe2\x80\xa8', b'\xef\xbb\xbf',
          b'cat\n', b' ', b'\t', b'x' * 10_000]


def make(rng: random.Random) -> bytes:
    return fuzzing.mutated(rng, rng.choice(SEEDS), TOKENS)


def check(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, 'classes.txt')
        with open(path, 'wb') as out:
            out.write(data)
        try:
            names = _read_labels_file(path)
        except DatasetError as exc:
            assert str(exc).startswith(f'--labels_file {path}'), exc
            return
        assert len(set(names)) == len(names) and all(names)
        for name in names:
            assert name == name.strip() and not any(
                unicodedata.category(c) in ('Cc', 'Zl', 'Zp') for c in name), name
        lines = data.decode('utf-8-sig').split('\n')   # Line i (from 0) names id i.
        while lines and not lines[-1].strip():
            lines.pop()
        assert names == tuple(line.strip() for line in lines), (names, lines)


def fuzz(seconds: float, seed: int) -> int:
    return fuzzing.run(make, check, seconds, seed)


if __name__ == '__main__':
    fuzzing.main(fuzz, '--labels_file')

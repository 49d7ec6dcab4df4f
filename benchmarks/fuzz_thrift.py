"""Fuzzes the Thrift compact reader of parquet footers and page headers
(pipeline/inputs/thrift_compact.py) on its own, fast enough for thousands of cases a second:
structs of every field type, lists, sets and maps of every element type (booleans included),
nested deep or claiming far more elements than there are bytes, then mutated. Every buffer is
read, or refused with the reader's IndexError or ValueError, within SECONDS: a hang (a map whose
booleans took no byte never ended) fails the case instead of the run, and so does a
RecursionError (lists nested thousands deep).

    python -m benchmarks.fuzz_thrift --seconds 300 [--seed 1]
"""
import random
import signal

from benchmarks import fuzzing
from pipeline.inputs import parquet_footer, parquet_pages, thrift_compact

SECONDS = 2.0   # Of one case: the largest take milliseconds.
SPECS = [parquet_footer._FOOTER, parquet_pages._HEADER]
TOKENS = [b'\x00', b'\x11', b'\x19', b'\x1b', b'\x0b', b'\x0c', b'\x09', b'\xff\xff\xff\xff\x0f',
          b'\x80' * 9 + b'\x01', b'\x19' * 100]


def varint(value: int) -> bytes:
    """`value` as a compact-protocol varint."""
    out = b''
    while value > 0x7F:
        out += bytes([value & 0x7F | 0x80])
        value >>= 7
    return out + bytes([value])


def _value(rng: random.Random, kind: int, depth: int) -> bytes:
    """A value of compact type `kind` as a list or map element writes it (a boolean: a byte)."""
    if kind in (1, 2, 3):
        return bytes([rng.choice((0, 1, 2, 0xFF))])
    if kind in (4, 5, 6):
        return varint(rng.choice((0, 1, 300, 1 << 40)))
    if kind == 7:
        return bytes(8)
    if kind == 8:
        text = rng.choice((b'', b'abc', b'x' * 200))
        return varint(len(text)) + text
    if kind == 12:
        return _struct(rng, depth + 1)
    return container(rng, kind, depth + 1)


def container(rng: random.Random, kind: int, depth: int) -> bytes:
    """A list, set or map, its elements of any type, its count as written or a huge claim, its
    nesting up to thousands deep (one byte a level)."""
    element = rng.choice((1, 2, 3, 5, 8, 9, 10, 11, 12))
    claim = rng.random() < 0.3
    count = rng.choice((1 << 60, 1 << 31, 5000, 14, 15)) if claim else rng.randrange(4)
    if depth > rng.choice((2, 6, 20, 5000)):
        element, count, claim = 5, 0, False
    if kind == 11:
        value = rng.choice((1, 2, 3, 5, 9, 11, 12))
        head = varint(count) + (bytes([element << 4 | value]) if count else b'')
        if claim:
            return head
        return head + b''.join(_value(rng, element, depth) + _value(rng, value, depth)
                               for _ in range(count))
    head = bytes([count << 4 | element]) if count < 15 else bytes([0xF0 | element]) + varint(count)
    if claim:
        return head
    return head + b''.join(_value(rng, element, depth) for _ in range(count))


def _struct(rng: random.Random, depth: int) -> bytes:
    """A struct of a few fields of any type (ids as parquet uses them, and unknown ones)."""
    out, last = b'', 0
    for _ in range(rng.randrange(5) if depth < rng.choice((3, 30)) else 0):
        field = last + rng.randrange(1, 20) if rng.random() < 0.8 else rng.choice((100, 32767))
        kind = rng.choice((1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12))
        head = bytes([(field - last) << 4 | kind]) if 0 < field - last < 16 else \
            bytes([kind]) + varint(field << 1)
        body = b'' if kind in (1, 2) else _value(rng, kind, depth)
        out, last = out + head + body, field
    return out + b'\x00'


def make(rng: random.Random) -> bytes:
    data = _struct(rng, 0)
    if rng.random() < 0.5:
        data = fuzzing.mutated(rng, data, TOKENS, steps=2)
    return data


def check(data: bytes) -> None:
    def stop(signum, frame):
        raise TimeoutError(f'read_struct took more than {SECONDS} s')

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, SECONDS)
    try:
        for spec in SPECS:
            try:
                fields, end = thrift_compact.read_struct(data, spec)
            except (IndexError, ValueError):
                continue
            assert isinstance(fields, dict) and 0 < end <= len(data), (fields, end)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def fuzz(seconds: float, seed: int) -> int:
    return fuzzing.run(make, check, seconds, seed)


if __name__ == '__main__':
    fuzzing.main(fuzz, 'thrift structs')

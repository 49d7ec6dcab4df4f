"""Fuzzes `--webdataset` brace patterns (pipeline/inputs/brace_patterns.py): each pattern
expands to at most MAX_NAMES names, the very names braceexpand (webdataset's expander, where it
is installed: the test extra brings it) gives, or is refused in one line naming the flag (a
DatasetError from webdataset_shards.shard_lists).

    python -m benchmarks.fuzz_brace_patterns --seconds 300 [--seed 1]
"""
import random

try:
    from braceexpand import braceexpand
except ImportError:   # Installed with webdataset, which the product does not need.
    braceexpand = None

from benchmarks import fuzzing
from pipeline.errors import DatasetError
from pipeline.inputs import brace_patterns
from pipeline.inputs.webdataset_shards import shard_lists

SEEDS = [b'/data/train-{000000..001281}.tar', b'gs://b/p/{00..10..5}-{a,b}.tar.gz',
         b'a{1..3}b{x,y}', b'python{2.{5..7},3.{2,3}}', b'{a,{b,c}d}.tar', br'{1\{2,3}.tar',
         b'{a..g..2}.tar', b'{-05..3}.tar', br'a{b\\,c}d{e\\}\{f']
TOKENS = [b'{', b'}', b',', b'..', b'\\', b'\\\\', b'0', b'9', b'-', b'a', b'Z', b'{0..9999}',
          b'{a,b}', b'{0..99999999999999999999}', b'{{', b'}}', b'/', b'\xc3\xa9']


def make(rng: random.Random) -> str:
    return fuzzing.mutated(rng, rng.choice(SEEDS), TOKENS).decode('utf-8', 'replace')


def check(pattern: str) -> None:
    try:
        names = brace_patterns.expand(pattern)
    except ValueError:
        names = None
    if names is not None:
        assert len(names) <= brace_patterns.MAX_NAMES
        # braceexpand is the reference (slower: compared where the names are few). It expands
        # a stray `}` as text, which is refused here (names is None).
        if braceexpand is not None and len(names) <= 10_000:
            assert names == list(braceexpand(pattern)), 'the names differ from braceexpand\'s'
    try:
        shard_lists([f'train={pattern}'])
    except DatasetError as exc:
        assert str(exc).startswith('--webdataset train='), exc


def fuzz(seconds: float, seed: int) -> int:
    return fuzzing.run(make, check, seconds, seed)


if __name__ == '__main__':
    fuzzing.main(fuzz, 'brace patterns')

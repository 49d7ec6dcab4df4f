"""Near-duplicate pairs across splits by multi-index hashing, without Beam: the definitions the
Beam stage (leakage.py) and `verify` share.

A pair is two records of different splits whose perceptual hashes (phash.py) lie within RADIUS
bits of each other, one's hash against the other's hash or mirror hash (a mirrored copy),
byte-identical copies included. Comparing every pair is quadratic, so candidates come from
multi-index hashing: each 64-bit hash is cut into BANDS bands of 16 bits, and each record is
filed under (band, value) for every band of its hash and of its mirror hash; records that share
a bucket are candidates, and their full distance decides. A pair that differs in at most
BANDS - 1 bits always shares a bucket; one further apart does unless its differences fall in
every band (recall measured in the README). At 10^8 images a bucket holds ~1,500 hashes on
average. A bucket with more than MAX_BUCKET entries is a degenerate hash (one look that many
images share): it is reported as crowded, with its size and a few sources, and not paired, so
memory stays bounded. Flat images (phash.FLAT) are counted and never filed.
"""
import dataclasses
from typing import Iterable, Iterator

import numpy as np

from pipeline.formats.metadata import SPLITS
from transforms.phash import FLAT, distance, from_int64

RADIUS = 8
BANDS = 4
BAND_BITS = 64 // BANDS
MAX_BUCKET = 20_000
CROWDED_EXAMPLES = 3

# An entry: (split, source, sha256 hex, hash, mirror hash), one per record; hashes as records
# store them (signed int64: Beam's integer coder takes no larger value).
Entry = tuple[str, str, str, int, int]
BucketKey = tuple[int, int]   # (band, value)


@dataclasses.dataclass(frozen=True, order=True)
class Pair:
    """Two records of different splits, `first` in the earlier split (train < validation <
    test): (split, source) each."""
    first: tuple[str, str]
    second: tuple[str, str]
    distance: int
    mirrored: bool
    exact: bool

    def line(self) -> dict:
        return {'split_a': self.first[0], 'source_a': self.first[1], 'split_b': self.second[0],
                'source_b': self.second[1], 'distance': self.distance, 'mirrored': self.mirrored,
                'exact': self.exact}


def _order(split: str) -> int:
    return SPLITS.index(split)


def _band(value: int, band: int) -> int:
    return (from_int64(value) >> (BAND_BITS * (BANDS - 1 - band))) & ((1 << BAND_BITS) - 1)


def band_keys(entry: Entry) -> Iterator[tuple[BucketKey, tuple[bool, Entry]]]:
    """((band, value), (mirrored, entry)) for every band of the entry's hash and mirror hash."""
    for band in range(BANDS):
        yield (band, _band(entry[3], band)), (False, entry)
        if entry[4] != entry[3]:
            yield (band, _band(entry[4], band)), (True, entry)


def crowded(key: BucketKey, kept: list, count: int) -> tuple:
    """What a crowded bucket is reported as: (band, value, entries, a few sources)."""
    return key[0], key[1], count, sorted(m[1][1] for m in kept)[:CROWDED_EXAMPLES]


def candidates(members: list) -> Iterator[tuple[tuple, tuple]]:
    """(pair key, (distance, mirrored, exact)) of the candidates in one bucket: every entry
    filed under its own hash against every entry of another split."""
    if len({m[1][0] for m in members}) < 2:   # One split only: nothing can leak.
        return
    values = np.array([m[1][4] if m[0] else m[1][3] for m in members], dtype=np.int64)
    splits = np.array([_order(m[1][0]) for m in members])
    for i, (mirrored, entry) in enumerate(members):
        if mirrored:
            continue
        near = np.nonzero((np.bitwise_count(values ^ np.int64(entry[3])) <= RADIUS)
                          & (splits != splits[i]))[0]
        for j in near:
            other_mirrored, other = members[j]
            first, second = sorted((entry, other), key=lambda e: (_order(e[0]), e[1]))
            d = distance(from_int64(entry[3]), from_int64(other[4] if other_mirrored else other[3]))
            yield ((first[0], first[1]), (second[0], second[1])), (d, other_mirrored,
                                                                   first[2] == second[2])


def best(key: tuple, found: Iterable[tuple]) -> Pair:
    """The pair of `key` at the smallest distance any bucket found it."""
    d, mirrored, exact = min(found)
    return Pair(key[0], key[1], d, mirrored, exact)


def bucket_candidates(keyed: Iterable[tuple[BucketKey, tuple]]) -> Iterator[tuple[str, tuple]]:
    """('candidate', (pair key, (distance, mirrored, exact))) for the candidates of every bucket
    among `keyed` ((bucket, member) as band_keys gives them), and ('crowded', crowded(...)) for
    every bucket of more than MAX_BUCKET members. Memory: at most MAX_BUCKET members a bucket."""
    buckets: dict[BucketKey, list] = {}
    counts: dict[BucketKey, int] = {}
    for key, member in keyed:
        counts[key] = counts.get(key, 0) + 1
        if counts[key] <= MAX_BUCKET:
            buckets.setdefault(key, []).append(member)
    for key, members in sorted(buckets.items()):
        if counts[key] > MAX_BUCKET:
            yield 'crowded', crowded(key, members, counts[key])
        else:
            yield from (('candidate', found) for found in candidates(members))


def find_pairs(entries: Iterable[Entry]) -> tuple[list[Pair], dict, list]:
    """In memory: (sorted pairs, flat images per split, crowded buckets) of `entries`."""
    flat: dict[str, int] = {}

    def keyed() -> Iterator[tuple[BucketKey, tuple]]:
        for entry in entries:
            if entry[3] == FLAT:
                flat[entry[0]] = flat.get(entry[0], 0) + 1
            else:
                yield from band_keys(entry)
    found: dict[tuple, list] = {}
    full = []
    for kind, value in bucket_candidates(keyed()):
        if kind == 'crowded':
            full.append(value)
        else:
            found.setdefault(value[0], []).append(value[1])
    return sorted(best(k, v) for k, v in found.items()), flat, full

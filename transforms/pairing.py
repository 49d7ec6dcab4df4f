"""Near-duplicate pairs across splits by multi-index hashing, without Beam: the definitions the
Beam stage (leakage.py) and `verify` share.

A pair is two records of different splits whose perceptual hashes (phash.py) lie within RADIUS
bits of each other, one's hash against the other's hash or mirror hash (a mirrored copy),
byte-identical copies included. Comparing every pair is quadratic, so candidates come from
multi-index hashing: each 64-bit hash is cut into BANDS bands of 16 bits, and each record is
filed under (band, value) for every band of its hash and of its mirror hash; records that share
a bucket are candidates, and their full distance decides. A pair that differs in at most
BANDS - 1 bits always shares a bucket; one further apart does unless its differences fall in
every band (recall measured in docs/performance.md). At 10^8 images a bucket holds ~1,500 hashes on
average. A bucket with more than MAX_BUCKET entries is a degenerate hash (one look that many
images share): it is reported as crowded, with its size and a few sources, and not paired, so
memory stays bounded. Flat images (phash.FLAT) are counted and never filed.

Records travel as rows of a numpy table (ROW: hashes, a 64-bit digest of the SHA-256, where the
record is) with their sources beside it, and a band's buckets are paired with array operations:
a few bytes and microseconds per record, whatever the language's per-object costs.
"""
import dataclasses
import hashlib
import operator
from typing import Iterable, Iterator

import numpy as np

from pipeline.formats.metadata import SPLITS
from transforms.phash import FLAT

RADIUS = 8
BANDS = 4
BAND_BITS = 64 // BANDS
MAX_BUCKET = 20_000
CROWDED_EXAMPLES = 3

# One record: hash and mirror hash as records store them (signed int64), a digest of its
# SHA-256 (equal for byte-identical images), its split (index in SPLITS), and where it is: shard,
# chunk, place in its part file, with its label id and whether it was passed through (what
# --leakage=drop needs to leave it out of its shard).
ROW = np.dtype([('phash', '<i8'), ('mirror', '<i8'), ('sha', '<i8'), ('split', 'u1'),
                ('shard', '<u4'), ('chunk', '<u4'), ('index', '<u4'), ('label', '<i4'),
                ('passed', '?')])
# An entry, as `verify` and benchmarks give records: (split, source, sha256 hex, hash, mirror
# hash), hashes as records store them.
Entry = tuple[str, str, str, int, int]


@dataclasses.dataclass
class Table:
    """Records as ROW rows, their sources beside them; `mirrored`: per row, filed under its
    mirror hash (else its hash)."""
    rows: np.ndarray
    sources: list[str]
    mirrored: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def take(self, index: np.ndarray, mirrored: bool | np.ndarray = False) -> 'Table':
        flags = np.broadcast_to(np.asarray(mirrored, dtype=bool), index.shape)
        return Table(self.rows[index], [self.sources[i] for i in index.tolist()], flags.copy())

    @staticmethod
    def concatenate(tables: Iterable['Table']) -> 'Table':
        tables = list(tables)
        return Table(np.concatenate([t.rows for t in tables]),
                     [s for t in tables for s in t.sources],
                     np.concatenate([t.mirrored for t in tables]))


@dataclasses.dataclass(frozen=True, order=True)
class Pair:
    """Two records of different splits, `first` in the earlier split (train < validation <
    test): (split, source) each. `where`: the second's (shard, chunk, place in its part file,
    label id, passed through), where --leakage=drop finds it."""
    first: tuple[str, str]
    second: tuple[str, str]
    distance: int
    mirrored: bool
    exact: bool
    where: tuple = dataclasses.field(default=(), compare=False)

    def line(self) -> dict:
        return {'split_a': self.first[0], 'source_a': self.first[1], 'split_b': self.second[0],
                'source_b': self.second[1], 'distance': self.distance, 'mirrored': self.mirrored,
                'exact': self.exact}


_FIELDS = operator.attrgetter('first', 'second', 'distance', 'mirrored', 'exact', 'where')


@dataclasses.dataclass(frozen=True)
class PairList:
    """Pairs in order, as one element between stages: their fields as plain tuples, which pickle
    in one C call, where Beam encodes a list of objects item by item (and again to measure it),
    pickling each apart."""
    rows: tuple[tuple, ...] = ()

    @staticmethod
    def of(pairs: Iterable[Pair]) -> 'PairList':
        return PairList(tuple(sorted(_FIELDS(pair) for pair in pairs)))

    @property
    def pairs(self) -> tuple[Pair, ...]:
        """The pairs, in order (sorting their fields sorts them as Pairs compare: two pairs
        never agree on the compared fields)."""
        return tuple(Pair(*row) for row in self.rows)


def sha_digest(sha256: str) -> int:
    """64 bits standing for a SHA-256 text: equal texts, equal digests."""
    return int.from_bytes(hashlib.blake2b(sha256.encode(), digest_size=8).digest(), 'little',
                          signed=True)


def table(entries: Iterable[Entry]) -> Table:
    """Entries as a Table (their place: their order)."""
    entries = list(entries)
    rows = np.zeros(len(entries), dtype=ROW)
    for i, (split, _, sha, phash, mirror) in enumerate(entries):
        rows[i] = phash, mirror, sha_digest(sha), SPLITS.index(split), 0, 0, i, 0, False
    return Table(rows, [e[1] for e in entries])


def band_values(hashes: np.ndarray, band: int) -> np.ndarray:
    """Bits of `band` of each hash (stored int64) as unsigned values."""
    shift = np.uint64(BAND_BITS * (BANDS - 1 - band))
    return ((hashes.view(np.uint64) >> shift) & np.uint64((1 << BAND_BITS) - 1)).astype(np.uint16)


def filed(records: Table) -> np.ndarray:
    """The hash each row is filed under: its mirror hash where mirrored, else its hash."""
    return np.where(records.mirrored, records.rows['mirror'], records.rows['phash'])


def filings(records: Table) -> Iterator[tuple[int, Table]]:
    """(band, the table filed under that band) for every band: each non-flat record under its
    hash and, where it differs, under its mirror hash."""
    hashed = np.flatnonzero(records.rows['phash'] != FLAT)
    mirrors = hashed[records.rows['mirror'][hashed] != records.rows['phash'][hashed]]
    both = Table.concatenate([records.take(hashed), records.take(mirrors, True)])
    for band in range(BANDS):
        yield band, both


def pair_band(members: Table, band: int, counts: np.ndarray | None = None
              ) -> tuple[list[tuple[tuple, tuple]], list[tuple]]:
    """Candidates among `members`, all filed under `band`: ([(pair key, (distance, mirrored,
    exact, where))], [crowded(...) of each bucket of more than MAX_BUCKET]).

    A candidate is a member filed under its own hash and a member of another split in its
    bucket whose filed hash lies within RADIUS of it. `counts` (members per bucket value, when
    the caller kept only some members of big buckets) decides which buckets are crowded.
    """
    rows, values = members.rows, band_values(filed(members), band)
    counts = np.bincount(values, minlength=1 << BAND_BITS) if counts is None else counts
    crowded_values = np.flatnonzero(counts > MAX_BUCKET)
    full = [crowded(band, int(v), int(counts[v]),
                    [members.sources[i] for i in np.flatnonzero(values == v).tolist()])
            for v in crowded_values.tolist()]
    keep = np.flatnonzero(counts[values] <= MAX_BUCKET)
    order = keep[np.argsort(values[keep], kind='stable')]
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.repeat(np.r_[starts[1:], len(order)], np.diff(np.r_[starts, len(order)]))
    hashes, targets = rows['phash'], filed(members)
    found = []
    at = np.arange(len(order))
    offset = 1
    active = at[ends - at > offset]
    while active.size:   # Each member against the one `offset` places after it in its bucket.
        a, b = order[active], order[active + offset]
        a, b = a[rows['split'][a] != rows['split'][b]], b[rows['split'][a] != rows['split'][b]]
        for x, y, one_way in ((a, b, True), (b, a, False)):
            # x filed under its own hash against y's filed hash; a pair of two own hashes once.
            d = np.bitwise_count(hashes[x] ^ targets[y])
            near = ~members.mirrored[x] & (d <= RADIUS)
            if not one_way:
                near &= members.mirrored[y]
            found += _candidates(members, x[near], y[near], d[near])
        offset += 1
        active = active[ends[active] - active > offset]
    return found, full


def _candidates(members: Table, i: np.ndarray, j: np.ndarray, d: np.ndarray) -> list[tuple]:
    """[(pair key, (distance, mirrored, exact, where of the later split's record))] of members
    i[k] (filed under its own hash) and j[k] at distance d[k]."""
    rows = members.rows
    later = rows['split'][j] > rows['split'][i]
    first, second = np.where(later, i, j), np.where(later, j, i)
    places = zip(*(rows[name][second].tolist()
                   for name in ('shard', 'chunk', 'index', 'label', 'passed')))
    return [(((SPLITS[a_split], members.sources[a]), (SPLITS[b_split], members.sources[b])),
             (distance, mirrored, exact, place))
            for a, b, a_split, b_split, distance, mirrored, exact, place in zip(
                first.tolist(), second.tolist(), rows['split'][first].tolist(),
                rows['split'][second].tolist(), d.tolist(), members.mirrored[j].tolist(),
                (rows['sha'][i] == rows['sha'][j]).tolist(), places)]


def crowded(band: int, value: int, count: int, sources: list[str]) -> tuple:
    """What a crowded bucket is reported as: (band, value, images, a few sources)."""
    return band, value, count, sorted(sources)[:CROWDED_EXAMPLES]


def nearest(candidates: Iterable[tuple[tuple, tuple]]) -> PairList:
    """The pairs of `candidates` (pair_band's, from any bands), each at the smallest distance
    any bucket found it."""
    found: dict[tuple, list] = {}
    for key, value in candidates:
        found.setdefault(key, []).append(value)
    return PairList.of(Pair(*key, *min(values)) for key, values in found.items())


def find_pairs(entries: Iterable[Entry]) -> tuple[list[Pair], dict, list]:
    """In memory: (sorted pairs, flat images per split, crowded buckets) of `entries`."""
    records = table(entries)
    flat: dict[str, int] = {}
    for split in records.rows['split'][records.rows['phash'] == FLAT].tolist():
        flat[SPLITS[split]] = flat.get(SPLITS[split], 0) + 1
    candidates, full = [], []
    for band, members in filings(records):
        found, crowded_buckets = pair_band(members, band)
        candidates += found
        full += crowded_buckets
    return list(nearest(candidates).pairs), flat, full

"""Near-duplicate clusters by multi-index hashing, without Beam: the definitions the Beam stage
(leakage.py) and `verify` share.

Two records are near-duplicates when their perceptual hashes (phash.py) lie within RADIUS bits
of each other, one's hash against the other's hash or mirror hash (a mirrored copy),
byte-identical copies included. A cluster is a connected component of that relation, within
and across splits; it leaks when its members lie in more than one split.

Comparing every pair is quadratic, so candidates come from multi-index hashing: each 64-bit hash
is cut into BANDS bands of 16 bits, and each record is filed under (band, value) for every band
of its hash and of its mirror hash; records that share a bucket are compared, and their full
distance decides. A pair that differs in at most BANDS - 1 bits always shares a bucket; one
further apart does unless its differences fall in every band (recall measured in docs/performance.md).

A bucket's members are ordered by their filed hash (then by record), and each is compared with
the WINDOW members after it. A bucket of up to WINDOW + 1 members is so compared in full: at
2N / 65,536 members per bucket on average, every bucket of a dataset of distinct images up to
~10^7 images. A bigger bucket is a group of look-alikes (crops of one photo, frames of one
video): its members are compared with their WINDOW nearest in that order, which joins the
group's chain of neighbours into one cluster in WINDOW comparisons per member instead of the
bucket's size. What this bound can cost: a near pair of a bucket of more than WINDOW + 1
members that lie more than WINDOW places apart, and that no other band and no chain of compared
pairs joins, falls in different clusters. Measured (2026-12-05): on 4,000 crops of 6 photos
(benchmarks/leakage_scale.py, buckets of up to 483 members) a WINDOW of 32, 256 or unbounded
gives the same 6 clusters; the planted copies of tests/test_leakage.py lie in small buckets,
compared in full. A bucket with more than MAX_BUCKET entries is a degenerate hash (one look
that many images share): it is reported as crowded, with its size and a few sources, and not
compared, so memory stays bounded. Flat images (phash.FLAT) are counted and never filed.

What is found is reduced as it goes (union-find, `components`): a group of buckets gives a
spanning forest (one link per member) and, per cluster, its closest pair across splits, so what
travels between stages grows with the images, never with the pairs. Within a band a link that
the links reduced so far make redundant (inside one cluster and not across splits, or across
splits but further apart than the cluster's closest pair) is dropped as it is found, so a
group of look-alikes costs its comparisons, not its links. Records travel as rows of
a numpy table (ROW) with their sources beside it, and buckets are compared with array
operations: a few bytes and microseconds per record.
"""
import dataclasses
import hashlib
from typing import Iterable, Iterator

import numpy as np

from pipeline.base.splits import SPLITS
from pipeline.quality.phash import FLAT

RADIUS = 8
BANDS = 4
BAND_BITS = 64 // BANDS
WINDOW = 256
MAX_BUCKET = 20_000
CROWDED_EXAMPLES = 3

# One record: hash and mirror hash as records store them (signed int64), a digest of its
# SHA-256 (equal for byte-identical images), its split (index in SPLITS), and where it is: shard,
# chunk, place in its part file, with its label id and whether it was passed through (what
# --leakage=drop needs to leave it out of its shard); `id` (record_ids) names it in links.
ROW = np.dtype([('phash', '<i8'), ('mirror', '<i8'), ('sha', '<i8'), ('split', 'u1'),
                ('shard', '<u4'), ('chunk', '<u4'), ('index', '<u4'), ('label', '<i4'),
                ('passed', '?'), ('id', '<u8')])
# An entry, as `verify` and benchmarks give records: (split, source, sha256 hex, hash, mirror
# hash), hashes as records store them.
Entry = tuple[str, str, str, int, int]
# A link between two records: their ids (`a` in the earlier split, or the smaller id within a
# split), their distance, whether `b`'s mirror hash was compared, whether they are byte-identical.
LINK = np.dtype([('a', '<u8'), ('b', '<u8'), ('distance', 'u1'), ('mirrored', '?'),
                 ('exact', '?'), ('cross', '?')])
# Bits of each field of a record id: split, shard (sharding.MAX_SHARDS < 2^20), chunk (of
# sharding.CHUNK_EXAMPLES examples: 2^24 chunks hold 2 x 10^9 examples a split) and place in its
# part file.
_ID_BITS = (('split', 2), ('shard', 20), ('chunk', 24), ('index', 18))
_INDEX_BITS = _ID_BITS[-1][1]


def record_places(ids: np.ndarray) -> dict[str, np.ndarray]:
    """The fields record_ids packed: split, shard, chunk and place of each id."""
    places, ids = {}, ids.astype(np.uint64)
    for name, bits in reversed(_ID_BITS):
        places[name] = (ids & np.uint64((1 << bits) - 1)).astype(np.int64)
        ids = ids >> np.uint64(bits)
    return places


def record_ids(rows: np.ndarray) -> np.ndarray:
    """Each row's id: its split, shard, chunk and place in its part, packed into 64 bits."""
    ids = np.zeros(len(rows), dtype=np.uint64)
    for name, bits in _ID_BITS:
        values = rows[name].astype(np.uint64)
        if values.size and int(values.max()) >> bits:
            raise ValueError(f'record {name} {int(values.max())} does not fit in {bits} bits')
        ids = (ids << np.uint64(bits)) | values
    return ids


# A record as filed under a band: its row, and whether under its mirror hash.
FILING = np.dtype(ROW.descr + [('mirrored', '?')])


@dataclasses.dataclass
class Table:
    """Records as ROW rows, their sources beside them (None where they are not at hand: found
    by id when needed); `mirrored`: per row, filed under its mirror hash (else its hash)."""
    rows: np.ndarray
    sources: list[str] | None
    mirrored: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def take(self, index: np.ndarray, mirrored: bool | np.ndarray = False) -> 'Table':
        flags = np.broadcast_to(np.asarray(mirrored, dtype=bool), index.shape)
        sources = None if self.sources is None else [self.sources[i] for i in index.tolist()]
        return Table(self.rows[index], sources, flags.copy())

    @staticmethod
    def concatenate(tables: Iterable['Table']) -> 'Table':
        tables = list(tables)
        sources = (None if any(t.sources is None for t in tables)
                   else [s for t in tables for s in t.sources])
        return Table(np.concatenate([t.rows for t in tables]), sources,
                     np.concatenate([t.mirrored for t in tables]))

    def filings(self) -> np.ndarray:
        """Its rows as FILING rows."""
        filed = np.zeros(len(self.rows), dtype=FILING)
        for name in ROW.names:
            filed[name] = self.rows[name]
        filed['mirrored'] = self.mirrored
        return filed

    @staticmethod
    def of_filings(filed: np.ndarray) -> 'Table':
        """FILING rows as a Table without sources."""
        rows = np.zeros(len(filed), dtype=ROW)
        for name in ROW.names:
            rows[name] = filed[name]
        return Table(rows, None, filed['mirrored'].copy())


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


@dataclasses.dataclass(frozen=True, order=True)
class Cluster:
    """Near-duplicates that span splits: `members` ((split, sorted sources) per split, in
    SPLITS order), `closest` their closest pair across splits; `later`: where each member
    after the earliest split is ((split, shard, chunk, place, label id, passed through,
    source)), what --leakage=drop leaves out."""
    members: tuple[tuple[str, tuple[str, ...]], ...]
    closest: Pair
    later: tuple = dataclasses.field(default=(), compare=False)

    @property
    def images(self) -> int:
        return sum(len(sources) for _, sources in self.members)

    def line(self) -> dict:
        """Its line of leakage.jsonl."""
        return {'images': self.images, 'members': {split: list(s) for split, s in self.members},
                'closest': self.closest.line()}


def sha_digest(sha256: str) -> int:
    """64 bits standing for a SHA-256 text: equal texts, equal digests."""
    return int.from_bytes(hashlib.blake2b(sha256.encode(), digest_size=8).digest(), 'little',
                          signed=True)


def table(entries: Iterable[Entry]) -> Table:
    """Entries as a Table (their place, chunk and place in it: their order)."""
    entries = list(entries)
    rows = np.zeros(len(entries), dtype=ROW)
    for i, (split, _, sha, phash, mirror) in enumerate(entries):
        rows[i] = (phash, mirror, sha_digest(sha), SPLITS.index(split), 0, i >> _INDEX_BITS,
                   i & ((1 << _INDEX_BITS) - 1), 0, False, 0)
    rows['id'] = record_ids(rows)
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


def link_band(members: Table, band: int, counts: np.ndarray | None = None
              ) -> tuple[np.ndarray, list[tuple]]:
    """Links (LINK) among `members`, all filed under `band`, and (band, value, images, the
    members' places in `members`) of each bucket of more than MAX_BUCKET (crowded).

    A link is a member filed under its own hash and another record in its bucket, at most
    WINDOW places apart in the bucket's order, whose filed hash lies within RADIUS of it.
    `counts` (members per bucket value, when the caller kept only some members of big buckets)
    decides which buckets are crowded.
    """
    rows, values = members.rows, band_values(filed(members), band)
    counts = np.bincount(values, minlength=1 << BAND_BITS) if counts is None else counts
    full = [(band, int(v), int(counts[v]), np.flatnonzero(values == v))
            for v in np.flatnonzero(counts > MAX_BUCKET).tolist()]
    keep = np.flatnonzero(counts[values] <= MAX_BUCKET)
    hashes, targets = rows['phash'], filed(members)
    order = keep[np.lexsort((rows['id'][keep], targets[keep].view(np.uint64), values[keep]))]
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.repeat(np.r_[starts[1:], len(order)], np.diff(np.r_[starts, len(order)]))
    found, known = [], _Known(members)
    at = np.arange(len(order))
    active = at[ends - at > 1]
    for offset in range(1, WINDOW + 1):   # Each member against the one `offset` places on.
        if not active.size:
            break
        a, b = order[active], order[active + offset]
        for x, y, one_way in ((a, b, True), (b, a, False)):
            # x filed under its own hash against y's filed hash; a pair of two own hashes once.
            d = np.bitwise_count((hashes[x] ^ targets[y]).view(np.uint64))   # Of all 64 bits.
            near = ~members.mirrored[x] & (d <= RADIUS) & (rows['id'][x] != rows['id'][y])
            if not one_way:
                near &= members.mirrored[y]
            near[near] = known.adds(x[near], y[near], d[near])
            found.append(_links(members, x[near], y[near], d[near]))
        # Reduced when links pile up (memory: a few a member), and after offsets 1, 2, 4, ...
        # so that links the reduced ones make redundant are not kept at all.
        if sum(map(len, found)) > 4 * len(members) + 1024 or offset & (offset - 1) == 0:
            found = [reduce_links(np.concatenate(found))]
            known.update(found[0])
        active = active[ends[active] - active > offset + 1]
    return (np.concatenate(found) if found else np.zeros(0, LINK)), full


class _Known:
    """What the links reduced so far say of each member of a band: its component (the root
    id) and the smallest distance across splits found in it. A further link adds nothing to
    reduce_links' result when it joins members of one component and is not across splits, or
    is across splits but further apart than a link that component already has."""

    def __init__(self, members: Table):
        self._ids, self._split = members.rows['id'], members.rows['split']
        self._root = self._ids.copy()
        self._closest = np.full(len(members), 255, dtype=np.uint8)

    def adds(self, x: np.ndarray, y: np.ndarray, d: np.ndarray) -> np.ndarray:
        """Per candidate link x[k]-y[k] at distance d[k]: whether it may change the result."""
        joins = self._root[x] != self._root[y]
        return joins | ((self._split[x] != self._split[y]) & (d <= self._closest[x]))

    def update(self, links: np.ndarray) -> None:
        """Learns the components and closest cross distances of reduced `links`."""
        if not len(links):
            return
        nodes, roots = components(links['a'], links['b'])
        where = np.searchsorted(nodes, self._ids)
        inside = where < len(nodes)
        inside[inside] = nodes[where[inside]] == self._ids[inside]
        self._root = np.where(inside, roots[np.minimum(where, len(nodes) - 1)], self._ids)
        cross = links[links['cross']]
        closest = np.full(len(nodes), 255, dtype=np.uint8)
        place = np.searchsorted(nodes, roots[np.searchsorted(nodes, cross['a'])])
        np.minimum.at(closest, place, cross['distance'])
        self._closest = np.where(inside, closest[np.searchsorted(nodes, self._root)
                                                 .clip(0, len(nodes) - 1)], 255).astype(np.uint8)


def _links(members: Table, i: np.ndarray, j: np.ndarray, d: np.ndarray) -> np.ndarray:
    """LINK rows of members i[k] (filed under its own hash) and j[k] at distance d[k]."""
    rows = members.rows
    links = np.zeros(len(i), dtype=LINK)
    swap = (rows['split'][j] < rows['split'][i]) | (
        (rows['split'][j] == rows['split'][i]) & (rows['id'][j] < rows['id'][i]))
    links['a'] = np.where(swap, rows['id'][j], rows['id'][i])
    links['b'] = np.where(swap, rows['id'][i], rows['id'][j])
    links['distance'], links['mirrored'] = d, members.mirrored[j]
    links['exact'] = rows['sha'][i] == rows['sha'][j]
    links['cross'] = rows['split'][i] != rows['split'][j]
    return links


def crowded(band: int, value: int, count: int, sources: list[str]) -> tuple:
    """What a crowded bucket is reported as: (band, value, images, a few sources)."""
    return band, value, count, sorted(sources)[:CROWDED_EXAMPLES]


def components(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union-find of the links a[k]-b[k] (ids): (every id linked, sorted; the root of its
    component, its smallest id). Each root hooks to the smallest root it is linked to, then
    every node jumps to its parent's parent until all point at roots; repeated until no link
    joins two roots: array passes, no Python loop over the links."""
    nodes = np.unique(np.concatenate([a, b]))
    u, v = np.searchsorted(nodes, a), np.searchsorted(nodes, b)
    parent = np.arange(len(nodes))
    while True:
        pu, pv = parent[u], parent[v]
        differ = pu != pv
        if not differ.any():
            return nodes, nodes[parent]
        np.minimum.at(parent, np.maximum(pu, pv)[differ], np.minimum(pu, pv)[differ])
        while True:
            grand = parent[parent]
            if np.array_equal(grand, parent):
                break
            parent = grand


def reduce_links(links: np.ndarray) -> np.ndarray:
    """Links joining the same records as `links`: a spanning forest (each record to its root),
    and the closest link across splits of each component (closest: smallest distance, not
    mirrored before mirrored, then the smallest ids)."""
    if not len(links):
        return links
    nodes, roots = components(links['a'], links['b'])
    tree = np.zeros(int(np.count_nonzero(nodes != roots)), dtype=LINK)
    tree['a'], tree['b'] = roots[nodes != roots], nodes[nodes != roots]
    cross = links[links['cross']]
    root = roots[np.searchsorted(nodes, cross['a'])]
    best = cross[np.lexsort((cross['b'], cross['a'], cross['mirrored'], cross['distance'], root))]
    root = np.sort(root)
    return np.concatenate([tree, best[np.r_[True, root[1:] != root[:-1]]] if len(best) else best])


def leaking(links: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The clusters of reduced `links` that span splits: (their records' ids, sorted; each
    one's root; the closest cross link of each root, in root order)."""
    links = reduce_links(links)
    nodes, roots = components(links['a'], links['b']) if len(links) else (
        np.zeros(0, np.uint64), np.zeros(0, np.uint64))
    best = links[links['cross']]
    best_roots = roots[np.searchsorted(nodes, best['a'])] if len(best) else np.zeros(0, np.uint64)
    spans = np.isin(roots, best_roots)
    return nodes[spans], roots[spans], best[np.argsort(best_roots, kind='stable')]


def clusters(members: Table, nodes: np.ndarray, roots: np.ndarray,
             closest: np.ndarray) -> list[Cluster]:
    """The Clusters of `members` (the records of clusters that span splits, each once or
    more) from leaking()'s nodes, roots and closest links."""
    ids = members.rows['id']
    where = {i: k for k, i in enumerate(ids.tolist())}
    closest_roots = roots[np.searchsorted(nodes, closest['a'])]   # Sorted, as closest is.
    chosen = np.unique(ids[np.isin(ids, nodes)])
    by_root: dict[int, list[int]] = {}
    for i, root in zip(chosen.tolist(), roots[np.searchsorted(nodes, chosen)].tolist()):
        by_root.setdefault(root, []).append(where[i])
    return sorted(_cluster(members, picked, closest[np.searchsorted(closest_roots, np.uint64(root))])
                  for root, picked in by_root.items())


def _cluster(members: Table, picked: list[int], link: np.void) -> Cluster:
    """The Cluster of rows `picked` of `members`, whose closest cross link is `link`."""
    rows, sources = members.rows, members.sources
    where = {int(rows['id'][k]): k for k in picked}
    a, b = where[int(link['a'])], where[int(link['b'])]
    pair = Pair((SPLITS[rows['split'][a]], sources[a]), (SPLITS[rows['split'][b]], sources[b]),
                int(link['distance']), bool(link['mirrored']), bool(link['exact']))
    by_split: dict[int, list[int]] = {}
    for k in picked:
        by_split.setdefault(int(rows['split'][k]), []).append(k)
    first = min(by_split)
    later = tuple(sorted((SPLITS[s], int(rows['shard'][k]), int(rows['chunk'][k]),
                          int(rows['index'][k]), int(rows['label'][k]), bool(rows['passed'][k]),
                          sources[k])
                         for s, ks in by_split.items() if s != first for k in ks))
    return Cluster(tuple((SPLITS[s], tuple(sorted(sources[k] for k in ks)))
                         for s, ks in sorted(by_split.items())), pair, later)


def find_clusters(entries: Iterable[Entry]) -> tuple[list[Cluster], dict, list]:
    """In memory: (sorted clusters that span splits, flat images per split, crowded buckets)
    of `entries`."""
    records = table(entries)
    flat: dict[str, int] = {}
    for split in records.rows['split'][records.rows['phash'] == FLAT].tolist():
        flat[SPLITS[split]] = flat.get(SPLITS[split], 0) + 1
    links, full = [], []
    for band, members in filings(records):
        found, crowded_buckets = link_band(members, band)
        links.append(reduce_links(found))
        full += [crowded(b, v, count, [members.sources[i] for i in places.tolist()])
                 for b, v, count, places in crowded_buckets]
    nodes, roots, closest = leaking(np.concatenate(links))
    return clusters(records, nodes, roots, closest), flat, full

"""Near-duplicate leakage across splits: pairs of records in different splits whose perceptual
hashes (phash.py) lie within RADIUS bits of each other, one's hash against the other's hash or
mirror hash (a mirrored copy), byte-identical copies included.

Comparing every pair is quadratic, so candidates come from multi-index hashing: each 64-bit hash
is cut into BANDS bands of 16 bits, and each image is filed under (band, value) for every band of
its hash and of its mirror hash; images that share a bucket are candidates, and their full
distance decides. Two hashes within RADIUS differ in some band by at most RADIUS // BANDS bits,
so a pair differing in at most BANDS - 1 bits always shares a bucket, and one further apart
does unless its differences fall in every band (measured recall in the README). Buckets are a
GroupByKey: at 10^8 images a bucket holds ~1,500 hashes on average. A bucket with more than
MAX_BUCKET entries is a degenerate hash (one look many images share, such as a near-blank
image): it is reported as crowded, with its size and a few sources, and not paired, so memory
stays bounded; flat images (phash.FLAT) are counted and never filed.

With --leakage=drop the eval-side copy of each pair (the later split of train, validation, test)
is left out of its shard when the shard's parts are joined (`drop_from_part`).
"""
import dataclasses
from typing import Iterator

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipeline.formats import fileio, records
from pipeline.formats.metadata import SPLITS
from transforms.phash import FLAT, distance, from_int64

NAMESPACE = 'image_tfrecords'
RADIUS = 8
BANDS = 4
BAND_BITS = 64 // BANDS
MAX_BUCKET = 20_000
CROWDED_EXAMPLES = 3
ACTIONS = ('report', 'drop', 'fail')


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


# An entry: (split, source, sha256 hex, hash, mirror hash), one per record; hashes as records
# store them (signed int64: Beam's integer coder takes no larger value).
Entry = tuple[str, str, str, int, int]


def _order(split: str) -> int:
    return SPLITS.index(split)


def _band(value: int, band: int) -> int:
    return (from_int64(value) >> (BAND_BITS * (BANDS - 1 - band))) & ((1 << BAND_BITS) - 1)


def band_keys(entry: Entry) -> Iterator[tuple[tuple[int, int], tuple[bool, Entry]]]:
    """((band, value), (mirrored, entry)) for every band of the entry's hash and mirror hash."""
    for band in range(BANDS):
        yield (band, _band(entry[3], band)), (False, entry)
        if entry[4] != entry[3]:
            yield (band, _band(entry[4], band)), (True, entry)


class PairBucket(beam.DoFn):
    """((band, value), [(mirrored, entry)]) -> candidate pairs within RADIUS; a crowded bucket
    goes to the 'crowded' output as (band, value, entries, a few sources) instead."""

    def setup(self) -> None:
        self._crowded = Metrics.counter(NAMESPACE, 'leakage_crowded_buckets')

    def process(self, element: tuple) -> Iterator:
        key, members = element
        kept, count = [], 0
        for member in members:
            count += 1
            if count <= MAX_BUCKET:
                kept.append(member)
        if count > MAX_BUCKET:
            self._crowded.inc()
            sources = sorted(m[1][1] for m in kept)[:CROWDED_EXAMPLES]
            yield beam.pvalue.TaggedOutput('crowded', (key[0], key[1], count, sources))
            return
        if len({m[1][0] for m in kept}) < 2:   # One split only: nothing can leak.
            return
        yield from _pairs(kept)


def _pairs(members: list) -> Iterator[tuple[tuple, tuple]]:
    """(pair key, (distance, mirrored, exact)) of the candidates in one bucket: every entry
    filed under its own hash against every entry of another split."""
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


def _best(pair: tuple) -> Pair:
    (first, second), candidates = pair
    d, mirrored, exact = min(candidates)
    return Pair(first, second, d, mirrored, exact)


def _entries(result) -> Iterator[Entry]:
    for source, sha256, phash, mirrored, _, _ in result.hashes:
        yield result.split, source, sha256, phash, mirrored


class FindLeakage(beam.PTransform):
    """Part results (with their records' hashes) -> a dict of PCollections: 'pairs' (Pair),
    'flat' ((split, flat images)) and 'crowded' ((band, value, entries, sources))."""

    def expand(self, parts: beam.PCollection):
        entries = parts | 'Hash Entries' >> beam.FlatMap(_entries)
        flat = (entries
                | 'Flat Images' >> beam.Filter(lambda e: e[3] == FLAT)
                | 'Split Of Flat' >> beam.Map(lambda e: (e[0], 1))
                | 'Count Flat' >> beam.CombinePerKey(sum))
        buckets = (entries
                   | 'Drop Flat' >> beam.Filter(lambda e: e[3] != FLAT)
                   | 'Key By Band' >> beam.FlatMap(band_keys)
                   | 'Group By Band' >> beam.GroupByKey()
                   | 'Pair Within Buckets' >> beam.ParDo(PairBucket()).with_outputs(
                       'crowded', main='candidates'))
        pairs = (buckets.candidates
                 | 'Group Candidates' >> beam.GroupByKey()
                 | 'Best Distance' >> beam.Map(_best))
        return {'pairs': pairs, 'flat': flat, 'crowded': buckets.crowded}


def dropped_copy(pair: Pair) -> tuple[tuple[str, str], str]:
    """((split, source) of the eval-side copy, the reason it is left out)."""
    return pair.second, (f'near-duplicate of {pair.first[0]} image {pair.first[1]} '
                         f'(distance {pair.distance}{", mirrored" if pair.mirrored else ""})')


def drop_from_part(part, dropped: dict):
    """The part result (write_shards.ShardResult) with the records `dropped` names
    ((split, source) -> reason) left out: their part file is rewritten without them."""
    drops = [i for i, h in enumerate(part.hashes) if (part.split, h[0]) in dropped]
    if not drops or not part.temp_path:
        return part
    kept_path = part.temp_path.replace('.tfrecord', '-kept.tfrecord')
    result = dataclasses.replace(part, temp_path=kept_path, records=0, bytes=0, label_counts={},
                                 passed_through=0,
                                 dropped=list(part.dropped), hashes=[])
    drop_set = set(drops)
    with fileio.open_read(part.temp_path) as stream, fileio.writing(kept_path) as out:
        for index, record in enumerate(records.read_records(stream)):
            entry = part.hashes[index]
            if index in drop_set:
                result.dropped.append((entry[0], dropped[(part.split, entry[0])]))
                continue
            framed = records.frame_record(record)
            out.write(framed)
            result.records += 1
            result.bytes += len(framed)
            result.label_counts[entry[4]] = result.label_counts.get(entry[4], 0) + 1
            result.passed_through += entry[5]
            result.hashes.append(entry)
    return result

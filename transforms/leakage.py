"""Near-duplicate leakage across splits as a Beam stage: pairing.py's multi-index hashing with
a GroupByKey of buckets. Each part's records come as a table (part_table: numpy rows of hashes
and places, and their sources) apart from the part results the shards are joined from; the part
sends one table per group of buckets (a band and the top bits of its value, as many groups as
keep each at about GROUP_SIZE members), so the shuffle moves a few compact elements per part
and memory per worker stays bounded at any scale.

The candidates a group finds travel on as one list per group and partition of the pair keys
(`candidate_partition`, as many partitions as groups per band), and the pairs as one list per
partition: the shuffle that keeps the nearest sighting of each pair, and the collection of
the pairs for the commit, move a few elements per group (PairList), not several per pair; the
commit gets each list as a part of leakage.jsonl, written where it was found (findings.py).

With --leakage=drop the eval-side copy of each pair (the later split of train, validation, test)
is left out of its shard when the shard's parts are joined (`drop_from_part`), found by its
place (shard, chunk, place in the part file), which the pair carries.
"""
import dataclasses
import zlib
from typing import Iterable, Iterator

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipeline.formats import fileio, records
from pipeline.formats.metadata import SPLITS
from transforms.pairing import (BAND_BITS, MAX_BUCKET, ROW, PairList, Table,
                                band_values, filed, filings, nearest, pair_band, sha_digest)
from transforms.phash import FLAT

NAMESPACE = 'image_tfrecords'
ACTIONS = ('report', 'drop', 'fail', 'off')   # off: no hashes, no check.


GROUP_SIZE = 1 << 16   # Members a shuffle group expects: a few MB, whatever the dataset's size.


def group_bits(total: int) -> int:
    """How many top bits of a band's value key a shuffle group: enough groups that each expects
    at most GROUP_SIZE members (every image is filed under its hash and its mirror hash)."""
    groups = -(-2 * total // GROUP_SIZE)
    return min(BAND_BITS, max(0, groups - 1).bit_length())


def part_table(part) -> Table:
    """A part's records (write_shards.ShardResult.hashes) as a pairing Table."""
    rows = np.zeros(len(part.hashes), dtype=ROW)
    for i, (_, sha256, phash, mirror, label, passed) in enumerate(part.hashes):
        rows[i] = (phash, mirror, sha_digest(sha256), SPLITS.index(part.split), part.shard,
                   part.chunk or 0, i, label, passed)
    return Table(rows, [h[0] for h in part.hashes])


def candidate_partition(key: tuple, bits: int) -> int:
    """The partition of the pair keys a candidate pair (its key) is deduplicated in: a stable
    hash of its first source, so every sighting of a pair meets in one."""
    return zlib.crc32(key[0][1].encode()) & ((1 << bits) - 1)


def _flat(records: Table) -> Iterator[tuple[str, int]]:
    count = int(np.count_nonzero(records.rows['phash'] == FLAT))
    if count:
        yield SPLITS[int(records.rows['split'][0])], count


def _groups(records: Table, plans: dict) -> Iterator[tuple[tuple[int, int, int], Table]]:
    """The part's filings, one Table per shuffle group (band, top bits of the filed value), each
    keyed with the group bits: a few elements per part instead of eight per image."""
    bits = group_bits(sum(plan.count for plan in plans.values()))
    shift = BAND_BITS - bits
    for band, members in filings(records):
        tops = band_values(filed(members), band) >> shift
        for top in np.unique(tops).tolist():
            chosen = np.flatnonzero(tops == top)
            yield (band, top, bits), Table(members.rows[chosen],
                                           [members.sources[i] for i in chosen.tolist()],
                                           members.mirrored[chosen])


class PairGroup(beam.DoFn):
    """(group, its Tables) -> (partition, [candidate pairs within RADIUS in each bucket]) for
    each partition of the pair keys (candidate_partition) it found candidates in; a crowded
    bucket goes to the 'crowded' output as (band, value, images, a few sources).

    Members of a bucket past MAX_BUCKET are counted, not kept (a part's at most), so memory
    stays bounded by the group's size however degenerate its hashes."""

    def setup(self) -> None:
        self._crowded = Metrics.counter(NAMESPACE, 'leakage_crowded_buckets')

    def process(self, element: tuple) -> Iterator:
        (band, _, bits), tables = element
        counts = np.zeros(1 << BAND_BITS, dtype=np.int64)
        kept = []
        for members in tables:
            values = band_values(filed(members), band)
            room = np.flatnonzero(counts[values] <= MAX_BUCKET)
            kept.append(Table(members.rows[room], [members.sources[i] for i in room.tolist()],
                              members.mirrored[room]))
            counts += np.bincount(values, minlength=1 << BAND_BITS)
        found, full = pair_band(Table.concatenate(kept), band, counts) if kept else ([], [])
        for bucket in full:
            self._crowded.inc()
            yield beam.pvalue.TaggedOutput('crowded', bucket)
        partitions: dict[int, list] = {}
        for candidate in found:
            partitions.setdefault(candidate_partition(candidate[0], bits), []).append(candidate)
        yield from partitions.items()


def _nearest(partition: tuple[int, Iterable[list]]) -> PairList:
    """The pairs of a partition of the pair keys, from its groups' lists of candidates."""
    return nearest(candidate for candidates in partition[1] for candidate in candidates)


class FindLeakage(beam.PTransform):
    """Part tables (part_table) -> a dict of PCollections: 'pairs' (PairLists; every pair in
    one of them), 'flat' ((split, flat images)) and 'crowded' ((band, value, images, sources)).

    `plans`: the shard plans as a dict side input; their example counts size the shuffle groups
    (known before any image is converted, so nothing waits for them)."""

    def __init__(self, plans: beam.pvalue.AsDict):
        super().__init__()
        self._plans = plans

    def expand(self, tables: beam.PCollection):
        flat = (tables
                | 'Flat Images' >> beam.FlatMap(_flat)
                | 'Count Flat' >> beam.CombinePerKey(sum))
        buckets = (tables
                   | 'Key By Band' >> beam.FlatMap(_groups, plans=self._plans)
                   | 'Group By Band' >> beam.GroupByKey()
                   | 'Pair Within Buckets' >> beam.ParDo(PairGroup()).with_outputs(
                       'crowded', main='candidates'))
        pairs = (buckets.candidates
                 | 'Group Candidates' >> beam.GroupByKey()
                 | 'Best Distance' >> beam.Map(_nearest))
        return {'pairs': pairs, 'flat': flat, 'crowded': buckets.crowded}


def dropped_copies(pairs: PairList) -> Iterator[tuple[tuple, tuple]]:
    """For each pair, ((split, shard, chunk, place) of the eval-side copy, (the reason it is
    left out, its source, label id, passed through))."""
    for pair in pairs.pairs:
        shard, chunk, place, label, passed = pair.where
        reason = (f'near-duplicate of {pair.first[0]} image {pair.first[1]} '
                  f'(distance {pair.distance}{", mirrored" if pair.mirrored else ""})')
        yield (pair.second[0], shard, chunk, place), (reason, pair.second[1], label, passed)


def by_shard(copy: tuple[tuple, tuple]) -> tuple[tuple[str, int], tuple]:
    """A dropped copy keyed by its shard: ((split, shard), (chunk, place, reason, source, label
    id, passed through))."""
    (split, shard, chunk, place), what = copy
    return (split, shard), (chunk, place, *what)


def drop_from_part(part, drops: list[tuple]):
    """The part result (write_shards.ShardResult) without the records of `drops` (by_shard's
    values) in its chunk: its part file is rewritten without them."""
    mine = {place: what for chunk, place, *what in drops if chunk == part.chunk}
    if not mine or not part.temp_path:
        return part
    kept_path = part.temp_path.replace('.tfrecord', '-kept.tfrecord')
    result = dataclasses.replace(part, temp_path=kept_path, label_counts=dict(part.label_counts),
                                 dropped=list(part.dropped))
    with fileio.open_read(part.temp_path) as stream, fileio.writing(kept_path) as out:
        for place, record in enumerate(records.read_records(stream)):
            framed = records.frame_record(record)
            if place not in mine:
                out.write(framed)
                continue
            reason, source, label, passed = mine[place]
            result.dropped.append((source, reason))
            result.records -= 1
            result.bytes -= len(framed)
            result.label_counts[label] -= 1
            result.passed_through -= passed
    result.label_counts = {k: n for k, n in result.label_counts.items() if n}
    return result

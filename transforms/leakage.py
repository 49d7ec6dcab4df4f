"""Near-duplicate leakage across splits as Beam stages: pairing.py's clusters of multi-index
hashing, found in four steps whose elements grow with the images, never with the pairs.

1. Each part's records come as a table (part_table: numpy rows of hashes and places, and their
   sources) apart from the part results the shards are joined from; the part sends one table
   per group of buckets (a band and the top bits of its value, as many groups as keep each at
   about GROUP_SIZE members), so the shuffle moves a few compact elements per part.
2. Each group links the near-duplicates of its buckets and reduces the links to a spanning
   forest and the closest pair across splits of each cluster (GroupLinks: at most two links a
   record, with the records they join), kept in the temporary folder for a rerun after a crash
   (linked_groups.py).
3. The forests are joined into the clusters of the whole dataset (JoinLinks, a combine that
   keeps them reduced: memory of about 40 bytes per record that has a near-duplicate), and only
   the clusters that span splits are kept (Leaking: a side input).
4. Each group's records of those clusters go to the partition of their cluster (as many
   partitions as groups per band), where the clusters are made (ClusterList), each partition's
   written as a part of leakage.jsonl where it is found (findings.py).

With --leakage=drop the members of each cluster in its later splits (after the earliest of
train, validation, test it spans) are left out of their shards when the shards' parts are
joined (`drop_from_part`), found by their place (shard, chunk, place in the part file), which
the cluster carries.
"""
import dataclasses
from typing import Iterable, Iterator

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipeline import faults
from pipeline.io import fileio
from pipeline.output import records
from pipeline.base.splits import SPLITS
from pipeline.quality.pairing import (BAND_BITS, LINK, MAX_BUCKET, ROW, Cluster, Table, band_values,
                                clusters, filed, filings, leaking, link_band, record_ids,
                                reduce_links, sha_digest)
from transforms import linked_groups
from pipeline.quality.phash import FLAT

NAMESPACE = 'image_tfrecords'   # Of the Beam metrics the stages count (the job reads them back).


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
                   part.chunk or 0, i, label, passed, 0)
    rows['id'] = record_ids(rows)
    return Table(rows, [h[0] for h in part.hashes])


def cluster_partition(roots: np.ndarray, bits: int) -> np.ndarray:
    """The partition each cluster (its root id) is made in: the top `bits` bits of a mix of the
    root, so that clusters spread evenly whatever their ids."""
    mixed = roots * np.uint64(0x9E3779B97F4A7C15)
    return (mixed >> np.uint64(64 - bits)) if bits else np.zeros(len(roots), np.uint64)


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


@dataclasses.dataclass(frozen=True)
class GroupLinks:
    """A shuffle group's reduced links (pairing.reduce_links), the records they join, and the
    group's bits (which give the number of partitions of the clusters)."""
    links: np.ndarray
    members: Table
    bits: int


class LinkGroup(beam.DoFn):
    """(group, its Tables) -> GroupLinks of the near-duplicates in its buckets; a crowded
    bucket goes to the 'crowded' output as (band, value, images, a few sources).

    Members of a bucket past MAX_BUCKET are counted, not kept (a part's at most), so memory
    stays bounded by the group's size however degenerate its hashes. Each group's result is
    kept in `temp_dir` (linked_groups.py), and an earlier attempt's is reused when `resuming`."""

    def __init__(self, temp_dir: str, resuming: bool):
        self._temp_dir, self._resuming = temp_dir, resuming

    def setup(self) -> None:
        self._crowded = Metrics.counter(NAMESPACE, 'leakage_crowded_buckets')
        self._linked = Metrics.counter(NAMESPACE, 'link_groups_linked')
        self._reused = Metrics.counter(NAMESPACE, 'link_groups_reused')

    def process(self, element: tuple) -> Iterator:
        key, tables = element[0], list(element[1])
        where = linked_groups.path(self._temp_dir, key, tables)
        saved = linked_groups.load(where) if self._resuming else None
        if saved is None:
            saved = _link(key[0], tables)
            linked_groups.save(where, *saved)
            faults.crash_point('links', counted=True)
            self._linked.inc()
        else:
            self._reused.inc()
        links, members, full = saved
        for bucket in full:
            self._crowded.inc()
            yield beam.pvalue.TaggedOutput('crowded', bucket)
        if len(links):
            yield GroupLinks(links, members, key[2])


def _link(band: int, tables: list[Table]) -> tuple[np.ndarray, Table, list[tuple]]:
    """(reduced links, the records they join, crowded buckets) of a group's tables."""
    counts = np.zeros(1 << BAND_BITS, dtype=np.int64)
    kept = []
    for members in tables:
        values = band_values(filed(members), band)
        room = np.flatnonzero(counts[values] <= MAX_BUCKET)
        kept.append(Table(members.rows[room], [members.sources[i] for i in room.tolist()],
                          members.mirrored[room]))
        counts += np.bincount(values, minlength=1 << BAND_BITS)
    members = Table.concatenate(kept)
    links, full = link_band(members, band, counts)
    links = reduce_links(links)
    linked = np.flatnonzero(np.isin(members.rows['id'], np.concatenate([links['a'], links['b']])))
    return links, members.take(linked, members.mirrored[linked]), full


class JoinLinks(beam.CombineFn):
    """GroupLinks' links -> the Leaking clusters of the whole dataset (pairing.leaking); the
    links are reduced whenever they have doubled, so memory follows the records linked."""

    def create_accumulator(self) -> list:
        return []

    def add_input(self, accumulator: list, links: np.ndarray) -> list:
        accumulator.append(links)
        return _compact(accumulator)

    def merge_accumulators(self, accumulators: Iterable[list]) -> list:
        return _compact([links for accumulator in accumulators for links in accumulator])

    def extract_output(self, accumulator: list) -> tuple:
        return leaking(np.concatenate(accumulator) if accumulator else np.zeros(0, LINK))


def _compact(parts: list) -> list:
    """`parts` of links, reduced to one when they hold twice as many links as their first."""
    if len(parts) > 1 and sum(map(len, parts)) > 2 * len(parts[0]) + 4096:
        return [reduce_links(np.concatenate(parts))]
    return parts


def _by_partition(group: GroupLinks, spanning: tuple) -> Iterator[tuple[int, Table]]:
    """The group's records of clusters that span splits, one Table per partition of the
    clusters (cluster_partition)."""
    nodes, roots, _ = spanning
    ids = group.members.rows['id']
    chosen = np.flatnonzero(np.isin(ids, nodes))
    partitions = cluster_partition(roots[np.searchsorted(nodes, ids[chosen])], group.bits)
    for partition in np.unique(partitions).tolist():
        picked = chosen[partitions == partition]
        yield partition, group.members.take(picked, group.members.mirrored[picked])


def _clusters(partition: tuple[int, Iterable[Table]], spanning: tuple) -> tuple[Cluster, ...]:
    """The clusters of a partition, from its groups' records."""
    return tuple(clusters(Table.concatenate(partition[1]), *spanning))


class FindLeakage(beam.PTransform):
    """Part tables (part_table) -> a dict of PCollections: 'clusters' (tuples of Clusters, each
    cluster that spans splits in one of them), 'flat' ((split, flat images)) and 'crowded'
    ((band, value, images, sources)).

    `plans`: the shard plans as a dict side input; their example counts size the shuffle groups
    (known before any image is converted, so nothing waits for them). Each group's links are
    kept in `temp_dir`, and reused when `resuming` (LinkGroup)."""

    def __init__(self, plans: beam.pvalue.AsDict, temp_dir: str, resuming: bool = False):
        super().__init__()
        self._plans, self._temp_dir, self._resuming = plans, temp_dir, resuming

    def expand(self, tables: beam.PCollection):
        flat = (tables
                | 'Flat Images' >> beam.FlatMap(_flat)
                | 'Count Flat' >> beam.CombinePerKey(sum))
        groups = (tables
                  | 'Key By Band' >> beam.FlatMap(_groups, plans=self._plans)
                  | 'Group By Band' >> beam.GroupByKey()
                  | 'Link Within Buckets' >> beam.ParDo(
                      LinkGroup(self._temp_dir, self._resuming)).with_outputs(
                      'crowded', main='links'))
        spanning = beam.pvalue.AsSingleton(
            groups.links
            | 'Links' >> beam.Map(lambda group: group.links)
            | 'Join Links' >> beam.CombineGlobally(JoinLinks()))
        found = (groups.links
                 | 'Members By Cluster' >> beam.FlatMap(_by_partition, spanning)
                 | 'Group Clusters' >> beam.GroupByKey()
                 | 'Make Clusters' >> beam.Map(_clusters, spanning)
                 | 'Any Cluster' >> beam.Filter(len))
        return {'clusters': found, 'flat': flat, 'crowded': groups.crowded}


def dropped_copies(found: tuple[Cluster, ...]) -> Iterator[tuple[tuple, tuple]]:
    """For each member of a cluster in a later split than its earliest, ((split, shard, chunk,
    place), (the reason it is left out, its source, label id, passed through))."""
    for cluster in found:
        first, images = cluster.closest.first, cluster.images
        reason = (f'near-duplicate of {first[0]} image {first[1]} (a cluster of {images} '
                  f'images across splits, closest distance {cluster.closest.distance})')
        for split, shard, chunk, place, label, passed, source in cluster.later:
            yield (split, shard, chunk, place), (reason, source, label, passed)


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
                                 dropped=list(part.dropped), first_record='',
                                 marks='', sizes=[n for place, n in enumerate(part.sizes)
                                                  if place not in mine])
    with fileio.open_read(part.temp_path) as stream, fileio.writing(kept_path) as out:
        for place, record in enumerate(records.read_records(stream)):
            framed = records.frame_record(record)
            if place not in mine:
                out.write(framed)
                result.first_record = result.first_record or records.record_digest(record)
                result.marks += records.content_mark(record)
                continue
            reason, source, label, passed = mine[place]
            result.dropped.append((source, reason))
            result.records -= 1
            result.bytes -= len(framed)
            result.label_counts[label] -= 1
            result.passed_through -= passed
    result.label_counts = {k: n for k, n in result.label_counts.items() if n}
    return result

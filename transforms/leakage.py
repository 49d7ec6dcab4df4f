"""Near-duplicate leakage across splits, in the steps of the quality check (check_quality.py):
pairing.py's clusters of multi-index hashing, found in four steps in which nothing grows with
the pairs and nothing per image passes through the runner.

1. As each part is converted (encode_chunks.py), its records are filed into sorted runs in the
   run's temporary folder (pipeline/io/sorted_runs.py): under every band of their hash and of
   their mirror hash, keyed by the band's value (`file_part`). The runner carries the runs'
   descriptions only.
2. A link task takes a band and a range of its values (as many ranges as keep each at about
   GROUP_SIZE filings), reads that range of every run, links the near-duplicates of its buckets
   and reduces the links to a spanning forest and the closest pair across splits of each cluster
   (LinkGroup: at most two links a record), kept in the temporary folder for a rerun after a
   crash (linked_groups.py).
3. The forests are joined on one worker into the clusters of the whole dataset (`join_links`,
   which keeps them reduced: about 40 bytes per record that has a near-duplicate), and only the
   clusters that span splits are kept (Spanning, from pairing.leaking: their records' ids and
   roots, and each one's closest link; a side input of about 16 bytes per record in them).
4. The clusters are cut into partitions by their roots (about GROUP_SIZE records each), and
   each partition's clusters are made from its records' ids alone: what a cluster tells of a
   record (its source, label, place) is found by id in its part's sidecar (part_records.py).
   Each partition's clusters are written as a part of leakage.jsonl where they are made
   (findings.py).

With --leakage=drop the members of each cluster in its later splits (after the earliest of
train, validation, test it spans) are left out of their shards when the shards' parts are
joined (`drop_from_part`), found by their place (shard, chunk, place in the part file), which
the cluster carries; the count of exact copies leaves out their ids (Spanning.later).
"""
import dataclasses
from typing import Iterable, Iterator

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipeline import faults
from pipeline.base.splits import SPLITS
from pipeline.io import fileio, sorted_runs
from pipeline.io.sorted_runs import RunWriter
from pipeline.output import records
from pipeline.quality.pairing import (BAND_BITS, BANDS, FILING, LINK, MAX_BUCKET, ROW, Cluster,
                                      Table, band_values, clusters, crowded, filed, filings,
                                      leaking, link_band, record_ids, record_places, reduce_links,
                                      sha_digest)
from pipeline.quality.phash import FLAT
from transforms import linked_groups
from transforms.part_records import PartRecords

NAMESPACE = 'image_tfrecords'   # Of the Beam metrics the stages count (the job reads them back).
GROUP_SIZE = 1 << 16   # Filings a link task expects: a few MB, whatever the dataset's size.


def group_bits(total: int) -> int:
    """How many top bits of a band's value make a link task's range: enough tasks that each
    expects at most GROUP_SIZE filings (every image is filed under its hash and its mirror
    hash)."""
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


def file_part(writer: RunWriter, table: Table) -> int:
    """Files a part's records under every band (see the module docstring); returns how many
    are flat (never filed)."""
    both = next(filings(table))[1]
    if len(both):
        rows, hashes = both.filings(), filed(both)
        for band in range(BANDS):
            writer.add_rows(band, band_values(hashes, band).astype(np.uint64), rows)
    return int(np.count_nonzero(table.rows['phash'] == FLAT))


@dataclasses.dataclass(frozen=True)
class Filed:
    """A bundle's filings: its runs, its flat images per split, and the fingerprint of each
    chunk whose records it filed ((split, chunk) -> fingerprint: they name the part files
    whose sidecars keep the records' sources, part_records.py)."""
    runs: list
    flat: dict
    chunks: dict = dataclasses.field(default_factory=dict)


def filed_runs(filed: Iterable[Filed]) -> list:
    """The runs of every bundle."""
    return [run for found in filed for run in found.runs]


def filed_chunks(filed: Iterable[Filed]) -> dict:
    """The chunks' fingerprints of every bundle."""
    return {chunk: fp for found in filed for chunk, fp in found.chunks.items()}


def link_tasks(plan) -> Iterator[tuple[int, int, int]]:
    """(band, top bits of its values, bits) of every link task: as many as the plan's
    (planning.Plan) examples need."""
    bits = group_bits(sum(shard_plan.count for shard_plan in plan.shard_plans.values()))
    for band in range(BANDS):
        for top in range(1 << bits):
            yield band, top, bits


class LinkGroup(beam.DoFn):
    """A link task -> (the reduced links (pairing.reduce_links) of the near-duplicates in its
    buckets, its crowded buckets as (band, value, images, a few sources)), unless it has none.

    At most MAX_BUCKET + 1 members of a bucket are kept (the first by record id), so memory
    stays bounded by the task's size however degenerate its hashes. Each task's result is kept
    in `temp_dir` (linked_groups.py), and an earlier attempt's is reused when `resuming`."""

    def __init__(self, temp_dir: str, resuming: bool, key: bytes):
        self._temp_dir, self._resuming, self._key = temp_dir, resuming, key

    def setup(self) -> None:
        self._crowded = Metrics.counter(NAMESPACE, 'leakage_crowded_buckets')
        self._linked = Metrics.counter(NAMESPACE, 'link_groups_linked')
        self._reused = Metrics.counter(NAMESPACE, 'link_groups_reused')

    def process(self, task: tuple, filed: list) -> Iterator:
        band, top, bits = task
        shift = BAND_BITS - bits
        members, counts = _members(sorted_runs.read_rows(filed_runs(filed), band, top << shift,
                                                         (top + 1) << shift, FILING), band)
        where = linked_groups.path(self._temp_dir, task, members)
        saved = linked_groups.load(where, self._key) if self._resuming else None
        if saved is None:
            links, full = link_band(members, band, counts)
            records = PartRecords(self._temp_dir, filed_chunks(filed), self._key)
            saved = reduce_links(links), [
                crowded(b, v, n, records.sources(members.rows['id'][places]))
                for b, v, n, places in full]
            linked_groups.save(where, *saved, self._key)
            faults.crash_point('links', counted=True)
            self._linked.inc()
        else:
            self._reused.inc()
        links, full = saved
        if full:
            self._crowded.inc(len(full))
        if len(links) or full:
            yield links, full


def _members(filed_rows: np.ndarray, band: int) -> tuple[Table, np.ndarray]:
    """A task's filings as a Table in a fixed order (by value, record id, mirrored), at most
    MAX_BUCKET + 1 of each value kept; and the count of every value, all filings counted."""
    members = Table.of_filings(filed_rows)
    values = band_values(filed(members), band)
    counts = np.bincount(values, minlength=1 << BAND_BITS)
    order = np.lexsort((members.mirrored, members.rows['id'], values))
    ordered = values[order]
    rank = np.arange(len(order)) - np.searchsorted(ordered, ordered, side='left')
    kept = order[rank <= MAX_BUCKET]
    return members.take(kept, members.mirrored[kept]), counts


@dataclasses.dataclass(frozen=True)
class Spanning:
    """The clusters that span splits (pairing.leaking): their records' ids (sorted), each one's
    root, and the closest link across splits of each root (in root order); with `later`, the
    ids of their members in later splits than each one's earliest (--leakage=drop); and the
    link tasks' crowded buckets."""
    nodes: np.ndarray
    roots: np.ndarray
    closest: np.ndarray
    later: np.ndarray
    crowded: list


def join_links(found: Iterable[tuple[np.ndarray, list]], later: bool) -> Spanning:
    """Link tasks' links and crowded buckets -> the clusters of the whole dataset that span
    splits, with their members in later splits if `later`, and every crowded bucket; the links
    are reduced whenever they have doubled, so memory follows the records linked."""
    joined: list = []
    crowded: list = []
    for links, full in found:
        joined = _compact([*joined, links]) if len(links) else joined
        crowded += full
    nodes, roots, closest = leaking(np.concatenate(joined) if joined else np.zeros(0, LINK))
    return Spanning(nodes, roots, closest,
                    _later_members(nodes, roots) if later else np.zeros(0, np.uint64), crowded)


def _later_members(nodes: np.ndarray, roots: np.ndarray) -> np.ndarray:
    """The ids among `nodes` in a later split than the earliest of their cluster (`roots`)."""
    splits = record_places(nodes)['split']
    _, cluster = np.unique(roots, return_inverse=True)
    earliest = np.full(int(cluster.max()) + 1 if len(cluster) else 0, len(SPLITS))
    np.minimum.at(earliest, cluster, splits)
    return nodes[splits != earliest[cluster]]


def _compact(parts: list) -> list:
    """`parts` of links, reduced to one when they hold twice as many links as their first."""
    if len(parts) > 1 and sum(map(len, parts)) > 2 * len(parts[0]) + 4096:
        return [reduce_links(np.concatenate(parts))]
    return parts


def cluster_partition(roots: np.ndarray, bits: int) -> np.ndarray:
    """The partition each cluster (its root id) is made in: the top `bits` bits of a mix of the
    root, so that clusters spread evenly whatever their ids."""
    mixed = roots * np.uint64(0x9E3779B97F4A7C15)
    return (mixed >> np.uint64(64 - bits)) if bits else np.zeros(len(roots), np.uint64)


@dataclasses.dataclass(frozen=True)
class ClusterPartition:
    """A task that makes clusters: those whose roots fall in `partition` of 2^`bits`."""
    partition: int
    bits: int


def cluster_partitions(spanning: Spanning) -> Iterator[ClusterPartition]:
    """Every partition of the clusters that span splits: as many as keep each at about
    GROUP_SIZE records."""
    if not len(spanning.nodes):
        return
    bits = max(0, -(-len(spanning.nodes) // GROUP_SIZE) - 1).bit_length()
    for partition in range(1 << bits):
        yield ClusterPartition(partition, bits)


def partition_clusters(task: ClusterPartition, spanning: Spanning, temp_dir: str,
                       chunk_fps: dict, key: bytes) -> tuple[Cluster, ...]:
    """The clusters of a partition, made from their records' ids (part_records.py: `chunk_fps`
    name the part files whose sidecars, sealed under `key`, keep the records)."""
    chosen = cluster_partition(spanning.roots, task.bits) == np.uint64(task.partition)
    members = PartRecords(temp_dir, chunk_fps, key).table(spanning.nodes[chosen])
    return tuple(clusters(members, spanning.nodes, spanning.roots, spanning.closest))


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

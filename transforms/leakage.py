"""Near-duplicate leakage across splits as Beam stages: pairing.py's clusters of multi-index
hashing, found in four steps in which nothing grows with the pairs and nothing per image passes
through the runner.

1. As each part is converted (write_shards.py), its records are filed into sorted runs in the
   run's temporary folder (pipeline/io/sorted_runs.py): under every band of their hash and of
   their mirror hash, keyed by the band's value (`file_part`). The runner carries the runs'
   descriptions only.
2. A link task takes a band and a range of its values (as many ranges as keep each at about
   GROUP_SIZE filings), reads that range of every run, links the near-duplicates of its buckets
   and reduces the links to a spanning forest and the closest pair across splits of each cluster
   (LinkGroup: at most two links a record), kept in the temporary folder for a rerun after a
   crash (linked_groups.py).
3. The forests are joined into the clusters of the whole dataset (JoinLinks, a combine that
   keeps them reduced: about 40 bytes per record that has a near-duplicate), and only the
   clusters that span splits are kept (pairing.leaking: their records' ids and roots, and each
   one's closest link; a side input of about 16 bytes per record in them).
4. The clusters are cut into partitions by their roots (about GROUP_SIZE records each), and
   each partition's clusters are made from its records' ids alone: what a cluster tells of a
   record (its source, label, place) is found by id in its part's sidecar (part_records.py).
   Each partition's clusters are written as a part of leakage.jsonl where they are made
   (findings.py).

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
from pipeline.base.splits import SPLITS
from pipeline.io import fileio, sorted_runs
from pipeline.io.sorted_runs import RunWriter
from pipeline.output import records
from pipeline.quality.pairing import (BAND_BITS, BANDS, FILING, LINK, MAX_BUCKET, ROW, Cluster,
                                      Table, band_values, clusters, crowded, filed, filings,
                                      leaking, link_band, record_ids, reduce_links, sha_digest)
from pipeline.quality.phash import FLAT
from transforms import linked_groups
from transforms.gathered import Gathered
from transforms.part_records import PartRecords
from transforms.spread import Spread

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
    """A bundle's filings: its runs and its flat images per split."""
    runs: list
    flat: dict


def _link_tasks(runs: list, plans: dict) -> Iterator[tuple[int, int, int]]:
    """(band, top bits of its values, bits) of every link task."""
    bits = group_bits(sum(plan.count for plan in plans.values()))
    for band in range(BANDS):
        for top in range(1 << bits):
            yield band, top, bits


class LinkGroup(beam.DoFn):
    """A link task -> the reduced links (pairing.reduce_links) of the near-duplicates in its
    buckets; a crowded bucket goes to the 'crowded' output as (band, value, images, a few
    sources).

    At most MAX_BUCKET + 1 members of a bucket are kept (the first by record id), so memory
    stays bounded by the task's size however degenerate its hashes. Each task's result is kept
    in `temp_dir` (linked_groups.py), and an earlier attempt's is reused when `resuming`."""

    def __init__(self, temp_dir: str, resuming: bool, key: bytes):
        self._temp_dir, self._resuming, self._key = temp_dir, resuming, key

    def setup(self) -> None:
        self._crowded = Metrics.counter(NAMESPACE, 'leakage_crowded_buckets')
        self._linked = Metrics.counter(NAMESPACE, 'link_groups_linked')
        self._reused = Metrics.counter(NAMESPACE, 'link_groups_reused')

    def process(self, task: tuple, runs: list, chunk_fps: dict) -> Iterator:
        band, top, bits = task
        shift = BAND_BITS - bits
        members, counts = _members(sorted_runs.read_rows(runs, band, top << shift,
                                                         (top + 1) << shift, FILING), band)
        where = linked_groups.path(self._temp_dir, task, members)
        saved = linked_groups.load(where, self._key) if self._resuming else None
        if saved is None:
            links, full = link_band(members, band, counts)
            records = PartRecords(self._temp_dir, chunk_fps, self._key)
            saved = reduce_links(links), [
                crowded(b, v, n, records.sources(members.rows['id'][places]))
                for b, v, n, places in full]
            linked_groups.save(where, *saved, self._key)
            faults.crash_point('links', counted=True)
            self._linked.inc()
        else:
            self._reused.inc()
        links, full = saved
        for bucket in full:
            self._crowded.inc()
            yield beam.pvalue.TaggedOutput('crowded', bucket)
        if len(links):
            yield links


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


class JoinLinks(beam.CombineFn):
    """Link tasks' links -> the clusters of the whole dataset that span splits (pairing.leaking);
    the links are reduced whenever they have doubled, so memory follows the records linked."""

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


def cluster_partition(roots: np.ndarray, bits: int) -> np.ndarray:
    """The partition each cluster (its root id) is made in: the top `bits` bits of a mix of the
    root, so that clusters spread evenly whatever their ids."""
    mixed = roots * np.uint64(0x9E3779B97F4A7C15)
    return (mixed >> np.uint64(64 - bits)) if bits else np.zeros(len(roots), np.uint64)


def _cluster_partitions(spanning: tuple) -> Iterator[tuple[int, int]]:
    """(partition, bits) of each partition of the clusters that span splits: as many as keep
    each at about GROUP_SIZE records."""
    nodes = spanning[0]
    if not len(nodes):
        return
    bits = max(0, -(-len(nodes) // GROUP_SIZE) - 1).bit_length()
    for partition in range(1 << bits):
        yield partition, bits


def _clusters(partition: tuple[int, int], spanning: tuple, temp_dir: str,
              chunk_fps: dict, key: bytes) -> Iterator[tuple[Cluster, ...]]:
    """The clusters of a partition, made from their records' ids (part_records.py), as one
    tuple (none for a partition without any)."""
    nodes, roots, closest = spanning
    chosen = cluster_partition(roots, partition[1]) == np.uint64(partition[0])
    members = PartRecords(temp_dir, chunk_fps, key).table(nodes[chosen])
    made = tuple(clusters(members, nodes, roots, closest))
    if made:
        yield made


class FindLeakage(beam.PTransform):
    """The runs the parts' records were filed into (file_part) -> a dict of PCollections:
    'clusters' (tuples of Clusters, each cluster that spans splits in one of them) and
    'crowded' ((band, value, images, sources)).

    `plans`: the shard plans as a dict side input; their example counts size the link tasks.
    `chunk_fps`: the chunks' fingerprints as a dict side input, which name the part files whose
    sidecars keep the records' sources. Each task's links are kept in `temp_dir`, and reused when
    `resuming` (LinkGroup); `key`: the run's resume key, which seals the sidecars."""

    def __init__(self, plans: beam.pvalue.AsDict, chunk_fps: beam.pvalue.AsDict, temp_dir: str,
                 key: bytes, resuming: bool = False):
        super().__init__()
        self._plans, self._chunk_fps, self._key = plans, chunk_fps, key
        self._temp_dir, self._resuming = temp_dir, resuming

    def expand(self, runs: beam.PCollection):
        groups = (runs
                  | 'Link Tasks' >> Gathered(_link_tasks, self._plans, each=True)
                  | 'Spread Link Tasks' >> Spread()
                  | 'Link Within Buckets' >> beam.ParDo(
                      LinkGroup(self._temp_dir, self._resuming, self._key),
                      beam.pvalue.AsList(runs), self._chunk_fps).with_outputs('crowded', main='links'))
        spanning = groups.links | 'Join Links' >> beam.CombineGlobally(JoinLinks()).without_defaults()
        found = (spanning
                 | 'Cluster Partitions' >> beam.FlatMap(_cluster_partitions)
                 | 'Spread Partitions' >> Spread()
                 | 'Make Clusters' >> beam.FlatMap(_clusters, beam.pvalue.AsSingleton(spanning),
                                                   self._temp_dir, self._chunk_fps, self._key))
        return {'clusters': found, 'crowded': groups.crowded}


def dropped_copies(found: tuple[Cluster, ...]) -> Iterator[tuple[tuple, tuple]]:
    """For each member of a cluster in a later split than its earliest, ((split, shard, chunk,
    place), (the reason it is left out, its source, label id, passed through))."""
    for cluster in found:
        first, images = cluster.closest.first, cluster.images
        reason = (f'near-duplicate of {first[0]} image {first[1]} (a cluster of {images} '
                  f'images across splits, closest distance {cluster.closest.distance})')
        for split, shard, chunk, place, label, passed, source in cluster.later:
            yield (split, shard, chunk, place), (reason, source, label, passed)


def dropped_id(copy: tuple[tuple, tuple]) -> int:
    """A dropped copy's record id (pairing.record_ids), as a signed 64-bit int: Beam's int coder
    holds no larger value (copies.py reads it back as unsigned)."""
    (split, shard, chunk, place), _ = copy
    rows = np.zeros(1, dtype=ROW)
    rows['split'], rows['shard'], rows['chunk'], rows['index'] = (SPLITS.index(split), shard,
                                                                   chunk, place)
    return int(record_ids(rows).view(np.int64)[0])


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

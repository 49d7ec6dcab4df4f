"""Which shard each example goes to, and in which order: the deterministic global shuffle.

Every example key is hashed (refs.key_hash). The top 16 bits of the hash pick one of 65,536
buckets; per split, the bucket counts and input bytes are combined (small, whatever the dataset
size), and `plan_shards` cuts the buckets into contiguous ranges of nearly equal example counts.
An example's shard is the range its bucket falls in; inside a shard, examples are ordered by
(hash, key). Hash order is uniform, so classes are mixed in every shard, and the layout depends
only on the set of keys: the same input gives the same shards on any runner and worker count.
Shards left empty by this cut (possible only for tiny splits) are dropped when the dataset is
committed, so no shard file is ever empty.

Each shard's bucket range is cut further into chunks of about CHUNK_EXAMPLES examples. Chunks
are the unit of work (converted in parallel, each into a part file, then concatenated in chunk
order), so all cores stay busy even when a split has fewer shards than there are workers.
"""
import bisect
import dataclasses
import logging
from typing import Iterable, Iterator

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from transforms.refs import ExampleRef

LOG = logging.getLogger('image_tfrecords')

BUCKET_BITS = 16
CHUNK_EXAMPLES = 128


def bucket_of(hash_value: int) -> int:
    return hash_value >> (64 - BUCKET_BITS)


SplitStats = tuple[int, int, dict]   # (examples, input bytes, {bucket: examples})


class CombineBuckets(beam.CombineFn):
    """Per split: (examples, input bytes, {bucket: examples})."""

    def create_accumulator(self) -> SplitStats:
        return 0, 0, {}

    def add_input(self, acc: SplitStats, ref: ExampleRef) -> SplitStats:
        count, size, buckets = acc
        bucket = bucket_of(ref.key_hash)
        buckets[bucket] = buckets.get(bucket, 0) + 1
        return count + 1, size + (ref.size or 0), buckets

    def merge_accumulators(self, accumulators: Iterable[SplitStats]) -> SplitStats:
        count, size, buckets = 0, 0, {}
        for c, s, b in accumulators:
            count, size = count + c, size + s
            for bucket, n in b.items():
                buckets[bucket] = buckets.get(bucket, 0) + n
        return count, size, buckets

    def extract_output(self, acc: SplitStats) -> SplitStats:
        return acc


class PlanShards(beam.PTransform):
    """Input refs -> (split, ShardPlan) for every split, from small per-split statistics."""

    def __init__(self, num_shards: int, target_shard_mb: float):
        super().__init__()
        self._num_shards, self._target_shard_mb = num_shards, target_shard_mb

    def expand(self, refs: beam.PCollection) -> beam.PCollection:
        return (refs
                | 'Key By Split' >> beam.Map(_by_split)
                | 'Combine Buckets' >> beam.CombinePerKey(CombineBuckets())
                | 'Cut Into Shards' >> beam.Map(_plan, self._num_shards, self._target_shard_mb))


def _by_split(ref: ExampleRef) -> tuple[str, ExampleRef]:
    return ref.split, ref


def _plan(split_stats: tuple[str, SplitStats], num_shards: int,
          target_shard_mb: float) -> tuple[str, 'ShardPlan']:
    split, stats = split_stats
    if num_shards > stats[0]:
        LOG.warning('%s: --num_shards %d is more than its %d inputs; writing at most one shard '
                    'per input', split, num_shards, stats[0])
    return split, plan_shards(stats, num_shards, target_shard_mb)


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    num_shards: int
    chunk_starts: tuple[int, ...]   # First bucket of each chunk, ascending.
    chunk_shards: tuple[int, ...]   # The shard each chunk belongs to.

    def chunk_of(self, ref: ExampleRef) -> tuple[int, int]:
        """(shard, chunk) of an example."""
        chunk = bisect.bisect_right(self.chunk_starts, bucket_of(ref.key_hash)) - 1
        return self.chunk_shards[chunk], chunk


class AssignChunks(beam.DoFn):
    """ExampleRef -> ((split, shard, chunk), [refs]): the refs of a bundle, grouped by chunk.

    Emitting one list per chunk and bundle instead of one element per ref makes the following
    GroupByKey handle an order of magnitude fewer elements. What is held here is one bundle's
    refs: the runner decides the bundle size (DirectRunner and Dataflow cap bundles at a
    bounded number of elements, and refs are a few hundred bytes each).
    """

    def start_bundle(self) -> None:
        self._groups: dict = {}

    def process(self, ref: ExampleRef, plans: dict) -> None:
        key = (ref.split, *plans[ref.split].chunk_of(ref))
        self._groups.setdefault(key, []).append(ref)

    def finish_bundle(self) -> Iterator:
        for key, refs in self._groups.items():
            yield GlobalWindows.windowed_value((key, refs))
        self._groups = {}


def shard_count(count: int, input_bytes: int, num_shards: int, target_shard_mb: float) -> int:
    """`num_shards` if given, else enough shards of about `target_shard_mb`; at most one per example."""
    wanted = num_shards or round(input_bytes / (target_shard_mb * (1 << 20)))
    return max(1, min(wanted, count))


def plan_shards(stats: SplitStats, num_shards: int, target_shard_mb: float) -> ShardPlan:
    """Cuts the buckets of one split into shards of nearly equal example counts, and each
    shard into chunks of about CHUNK_EXAMPLES."""
    count, size, buckets = stats
    shards = shard_count(count, size, num_shards, target_shard_mb)
    ordered = sorted(buckets)
    shard_of, per_shard, seen = {}, {}, 0
    for bucket in ordered:
        shard = shard_of[bucket] = seen * shards // count
        per_shard[shard] = per_shard.get(shard, 0) + buckets[bucket]
        seen += buckets[bucket]
    chunk_starts, chunk_shards, previous, seen_in_shard = [], [], None, 0
    for bucket in ordered:
        shard = shard_of[bucket]
        if previous is None or shard != previous[0]:
            seen_in_shard = 0
        chunks = -(-per_shard[shard] // CHUNK_EXAMPLES)
        key = (shard, seen_in_shard * chunks // per_shard[shard])
        if key != previous:
            chunk_starts.append(bucket if chunk_starts else 0)
            chunk_shards.append(shard)
            previous = key
        seen_in_shard += buckets[bucket]
    return ShardPlan(shards, tuple(chunk_starts), tuple(chunk_shards))

"""Which shard each example goes to, and in which order: the deterministic global shuffle.

Every example key is hashed (refs.key_hash). The top 16 bits of the hash pick one of 65,536
buckets; per split, the bucket counts and input bytes are combined (small, whatever the dataset
size), and `plan_shards` cuts the buckets into contiguous ranges of nearly equal example counts.
An example's shard is the range its bucket falls in; inside a shard, examples are ordered by
(hash, key). Hash order is uniform, so classes are mixed in every shard, and the layout depends
only on the set of keys: the same input gives the same shards on any runner and worker count.
Shards left empty by this cut (possible only for tiny splits) are dropped when the dataset is
committed, so no shard file is ever empty.
"""
import bisect
import dataclasses

import apache_beam as beam

from transforms.refs import ExampleRef

BUCKET_BITS = 16


def bucket_of(hash_value: int) -> int:
    return hash_value >> (64 - BUCKET_BITS)


class CombineBuckets(beam.CombineFn):
    """Per split: (examples, input bytes, {bucket: examples})."""

    def create_accumulator(self):
        return 0, 0, {}

    def add_input(self, acc, ref: ExampleRef):
        count, size, buckets = acc
        bucket = bucket_of(ref.key_hash)
        buckets[bucket] = buckets.get(bucket, 0) + 1
        return count + 1, size + (ref.size or 0), buckets

    def merge_accumulators(self, accumulators):
        count, size, buckets = 0, 0, {}
        for c, s, b in accumulators:
            count, size = count + c, size + s
            for bucket, n in b.items():
                buckets[bucket] = buckets.get(bucket, 0) + n
        return count, size, buckets

    def extract_output(self, acc):
        return acc


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    num_shards: int
    starts: tuple[int, ...]   # First bucket of each shard, ascending.

    def shard_of(self, ref: ExampleRef) -> int:
        return bisect.bisect_right(self.starts, bucket_of(ref.key_hash)) - 1


def shard_count(count: int, input_bytes: int, num_shards: int, target_shard_mb: float) -> int:
    """`num_shards` if given, else enough shards of about `target_shard_mb`; at most one per example."""
    wanted = num_shards or round(input_bytes / (target_shard_mb * (1 << 20)))
    return max(1, min(wanted, count))


def plan_shards(stats, num_shards: int, target_shard_mb: float) -> ShardPlan:
    """Cuts the buckets of one split into shards of nearly equal example counts."""
    count, size, buckets = stats
    shards = shard_count(count, size, num_shards, target_shard_mb)
    starts, seen = [0], 0
    for bucket in sorted(buckets):
        shard = seen * shards // count
        if shard >= len(starts):
            starts.extend([bucket] * (shard - len(starts) + 1))
        seen += buckets[bucket]
    return ShardPlan(shards, tuple(starts))

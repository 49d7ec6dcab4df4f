"""Which shard each example goes to, and in which order: the deterministic global shuffle.

Every example key is hashed (refs.key_hash); inside a split, examples are ordered by (hash,
key), and an example's rank in that order decides its shard: shard = rank * S // N for N
examples and S shards. Hash order is uniform, so classes are mixed in every shard; shards differ
in size by at most one example, for any N and any S up to N (at most MAX_SHARDS); and the
layout depends only on the set of keys, so the same input gives the same shards on any runner
and worker count.

Nobody sorts the whole split. The top `bits` of each hash pick a bucket, and per split only a
histogram of bucket counts is combined: `bucket_bits` sizes it to about 8 examples per bucket
(16 to 24 bits, so it stays small at any N). `plan_shards` cuts the buckets into chunks of about
CHUNK_EXAMPLES examples, the unit of work, and notes the rank of each chunk's first example.
A worker sorts one chunk's examples, which gives their exact ranks and so their shards; a chunk
that straddles a shard boundary writes one part file per shard, and each shard joins its parts
in chunk order (write_shards.py).
"""
import dataclasses
import logging
from typing import Iterable, Iterator

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindows

from pipeline.base.refs import ExampleRef
from pipeline.output.metadata import MAX_SHARDS

LOG = logging.getLogger('image_tfrecords')

CHUNK_EXAMPLES = 128
MIN_BUCKET_BITS, MAX_BUCKET_BITS = 16, 24
_DENSE_AT = 1 << 15   # A histogram with more filled buckets is kept as an array.


def bucket_bits(count: int) -> int:
    """Histogram resolution for a split of `count` examples: about 8 examples per bucket."""
    return min(MAX_BUCKET_BITS, max(MIN_BUCKET_BITS, (count // 8).bit_length()))


def bucket_of(hash_value: int, bits: int) -> int:
    return hash_value >> (64 - bits)


class Histogram:
    """Examples per bucket of one split: a dict while few buckets are filled, then an array."""

    def __init__(self, bits: int = 0):
        self.bits, self.sparse, self.dense = bits, {}, None

    def add(self, bucket: int, n: int = 1) -> None:
        if self.dense is not None:
            self.dense[bucket] += n
            return
        self.sparse[bucket] = self.sparse.get(bucket, 0) + n
        if len(self.sparse) > _DENSE_AT:
            self._densify()

    def merge(self, other: 'Histogram') -> None:
        self.bits = self.bits or other.bits
        if other.dense is not None:
            self._densify()
            self.dense += other.dense
        else:
            for bucket, n in other.sparse.items():
                self.add(bucket, n)

    def _densify(self) -> None:
        if self.dense is None:
            self.dense = np.zeros(1 << self.bits, dtype=np.int64)
            for bucket, n in self.sparse.items():
                self.dense[bucket] += n
            self.sparse = {}

    def filled(self) -> tuple[np.ndarray, np.ndarray]:
        """(filled buckets ascending, their counts)."""
        if self.dense is not None:
            buckets = np.flatnonzero(self.dense)
            return buckets, self.dense[buckets]
        buckets = np.array(sorted(self.sparse), dtype=np.int64)
        return buckets, np.array([self.sparse[b] for b in buckets.tolist()], dtype=np.int64)


class CombineBuckets(beam.CombineFn):
    """(bucket, bits) of each example of a split -> its Histogram."""

    def create_accumulator(self) -> Histogram:
        return Histogram()

    def add_input(self, histogram: Histogram, bucket_and_bits: tuple[int, int]) -> Histogram:
        bucket, histogram.bits = bucket_and_bits
        histogram.add(bucket)
        return histogram

    def merge_accumulators(self, accumulators: Iterable[Histogram]) -> Histogram:
        merged = Histogram()
        for histogram in accumulators:
            merged.merge(histogram)
        return merged

    def extract_output(self, histogram: Histogram) -> Histogram:
        return histogram


class PlanShards(beam.PTransform):
    """Input refs -> (split, ShardPlan) for every split, from small per-split statistics: the
    count and (estimated) bytes of its inputs, then a histogram sized by that count."""

    def __init__(self, num_shards: int, target_shard_mb: float):
        super().__init__()
        self._num_shards, self._target_shard_mb = num_shards, target_shard_mb

    def expand(self, refs: beam.PCollection) -> beam.PCollection:
        # Only (hash prefix, size) per input travels on: the histogram waits for the counts,
        # and what waits is buffered (in the launcher, on DirectRunner).
        hashed = refs | 'Hash Keys' >> beam.Map(_hashed)
        totals = hashed | 'Count Per Split' >> beam.CombinePerKey(_CountAndBytes())
        return (hashed
                | 'Bucket' >> beam.Map(_bucket, totals=beam.pvalue.AsDict(totals))
                | 'Combine Buckets' >> beam.CombinePerKey(CombineBuckets())
                | 'Cut Into Shards' >> beam.Map(_plan, beam.pvalue.AsDict(totals),
                                                self._num_shards, self._target_shard_mb))


def _hashed(ref: ExampleRef) -> tuple[str, tuple[int, int | None]]:
    """(split, (top MAX_BUCKET_BITS bits of the key hash, size)): all that planning needs."""
    return ref.split, (ref.key_hash >> (64 - MAX_BUCKET_BITS), ref.size)


class _CountAndBytes(beam.CombineFn):
    """Per split: (inputs, inputs of known size, their bytes)."""

    def create_accumulator(self) -> tuple[int, int, int]:
        return 0, 0, 0

    def add_input(self, acc: tuple[int, int, int], hash_size: tuple) -> tuple[int, int, int]:
        size = hash_size[1]
        return acc[0] + 1, acc[1] + (size is not None), acc[2] + (size or 0)

    def merge_accumulators(self, accumulators: Iterable[tuple]) -> tuple[int, int, int]:
        return tuple(sum(values) for values in zip(*accumulators))

    def extract_output(self, acc: tuple[int, int, int]) -> tuple[int, int, int]:
        return acc


def estimated_bytes(totals: tuple[int, int, int]) -> int:
    """A split's input bytes: the sizes known, scaled up to all inputs from the known share."""
    count, known, size = totals
    return size * count // known if known else 0


def _bucket(hashed: tuple[str, tuple], totals: dict) -> tuple[str, tuple[int, int]]:
    split, (top, _) = hashed
    bits = bucket_bits(totals[split][0])
    return split, (top >> (MAX_BUCKET_BITS - bits), bits)


def _plan(split_histogram: tuple[str, Histogram], totals: dict, num_shards: int,
          target_shard_mb: float) -> tuple[str, 'ShardPlan']:
    split, histogram = split_histogram
    count = totals[split][0]
    shards = shard_count(count, estimated_bytes(totals[split]), num_shards, target_shard_mb)
    if num_shards > shards:
        LOG.warning('%s: --num_shards %d is more than %s; writing %d shards', split, num_shards,
                    f'its {count} inputs' if shards == count else f'the most ({MAX_SHARDS})', shards)
    return split, plan_shards(histogram, count, shards, estimated_bytes(totals[split]))


def shard_count(count: int, input_bytes: int, num_shards: int, target_shard_mb: float) -> int:
    """`num_shards` if given, else enough shards of about `target_shard_mb`; at most one per
    example and MAX_SHARDS."""
    wanted = num_shards or round(input_bytes / (target_shard_mb * (1 << 20)))
    return max(1, min(wanted, count, MAX_SHARDS))


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """One split's plan: its shards, and its chunks as bucket ranges with their first ranks."""
    num_shards: int
    count: int
    bits: int
    chunk_starts: np.ndarray   # First bucket of each chunk, ascending.
    chunk_ranks: np.ndarray    # Rank of each chunk's first example; then `count`.
    input_bytes: int = 0       # Of all inputs, measured or estimated from a sample.

    @property
    def num_chunks(self) -> int:
        return len(self.chunk_starts)

    def chunk_of(self, ref: ExampleRef) -> int:
        bucket = bucket_of(ref.key_hash, self.bits)
        return int(np.searchsorted(self.chunk_starts, bucket, side='right')) - 1

    def shard_of_rank(self, rank: int) -> int:
        return rank * self.num_shards // self.count

    def first_rank(self, chunk: int) -> int:
        return int(self.chunk_ranks[chunk])

    def placement(self, chunk: int) -> tuple[int, int, int]:
        """What decides the shards of a chunk's examples (for its fingerprint)."""
        return self.first_rank(chunk), self.num_shards, self.count

    def shards_of_chunk(self, chunk: int) -> range:
        """The shards a chunk's examples fall in."""
        first, end = int(self.chunk_ranks[chunk]), int(self.chunk_ranks[chunk + 1])
        return range(self.shard_of_rank(first), self.shard_of_rank(end - 1) + 1)


def plan_shards(histogram: Histogram, count: int, num_shards: int,
                input_bytes: int = 0) -> ShardPlan:
    """Cuts a split's buckets into chunks of about CHUNK_EXAMPLES examples (whole buckets: a
    chunk starts at the first bucket whose first example's rank reaches a multiple of
    CHUNK_EXAMPLES)."""
    buckets, counts = histogram.filled()
    before = np.cumsum(counts) - counts            # Rank of each bucket's first example.
    starts = np.ones(len(buckets), dtype=bool)
    starts[1:] = before[1:] // CHUNK_EXAMPLES > before[:-1] // CHUNK_EXAMPLES
    chunk_starts = buckets[starts]
    if len(chunk_starts):
        chunk_starts[0] = 0
    ranks = np.append(before[starts], count)
    return ShardPlan(num_shards, count, histogram.bits, chunk_starts, ranks, input_bytes)


class AssignChunks(beam.DoFn):
    """ExampleRef -> ((split, chunk), [refs]): the refs of a bundle, grouped by chunk.

    Emitting one list per chunk and bundle instead of one element per ref makes the following
    GroupByKey handle an order of magnitude fewer elements. What is held here is one bundle's
    refs: the runner decides the bundle size (DirectRunner and Dataflow cap bundles at a
    bounded number of elements, and refs are a few hundred bytes each).
    """

    def start_bundle(self) -> None:
        self._groups: dict = {}

    def process(self, ref: ExampleRef, plans: dict) -> None:
        key = (ref.split, plans[ref.split].chunk_of(ref))
        self._groups.setdefault(key, []).append(ref)

    def finish_bundle(self) -> Iterator:
        for key, refs in self._groups.items():
            yield GlobalWindows.windowed_value((key, refs))
        self._groups = {}

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
in chunk order (write_shards.py). A chunk's examples are a range of key hashes, so a Task,
consecutive chunks of a split, reads its examples from the listing's sorted runs as one key
range (listing.py); the runner passes tasks, never examples.
"""
import dataclasses
import logging
import math
from fractions import Fraction
import numpy as np

from pipeline.base.refs import ExampleRef
from pipeline.output.metadata import MAX_SHARDS

LOG = logging.getLogger('image_tfrecords')

CHUNK_EXAMPLES = 128
MIN_BUCKET_BITS, MAX_BUCKET_BITS = 16, 24
TASK_CHUNKS = 32            # The most chunks a task converts in turn...
TASKS_PER_SPLIT = 32        # ... fewer where a split would have fewer tasks than this.


def bucket_bits(count: int) -> int:
    """Histogram resolution for a split of `count` examples: about 8 examples per bucket."""
    return min(MAX_BUCKET_BITS, max(MIN_BUCKET_BITS, (count // 8).bit_length()))


def bucket_of(hash_value: int, bits: int) -> int:
    return hash_value >> (64 - bits)


def shard_plans(listed: list, num_shards: int, target_shard_mb: float,
                sample: dict | None = None) -> dict[str, 'ShardPlan']:
    """A ShardPlan per split, from what every bundle of listing found (listing.Listed: per split
    the count, the sizes known and the top bits of each key hash, 4 bytes an input). With a
    `sample` (what a converted sample weighs: local_rate.py) the shards are sized by their
    estimated output (a line fitted to the sample: output_line), else by the input bytes."""
    found: dict[str, list] = {}
    for one in listed:
        for split, tops in one.tops.items():
            found.setdefault(split, []).append((one.sizes[split], tops))
    return {split: _plan(found[split], split, num_shards, target_shard_mb, sample)
            for split in sorted(found)}


def estimated_bytes(totals: tuple[int, int, int]) -> int:
    """A split's input bytes: the sizes known, scaled up to all inputs from the known share."""
    count, known, size = totals
    return size * count // known if known else 0


def output_line(weighed: list | None) -> tuple[Fraction, Fraction] | None:
    """(a, b): a record's bytes = a + b x its input's bytes, the least-squares line through the
    sampled inputs (`weighed`: [split, bytes in or None, bytes out] each, local_rate.py), in
    exact fractions, so that every machine plans the same shards; b = 0 (a is their mean) where
    a sampled input's size is unknown or all have the same. None without a sample."""
    if not weighed:
        return None
    n, outs = len(weighed), [w[2] for w in weighed]
    ins = [w[1] for w in weighed]
    spread = (n * sum(x * x for x in ins) - sum(ins) ** 2) if None not in ins else 0
    if not spread:
        return Fraction(sum(outs), n), Fraction(0)
    b = Fraction(n * sum(x * y for x, y in zip(ins, outs)) - sum(ins) * sum(outs), spread)
    return Fraction(sum(outs), n) - b * Fraction(sum(ins), n), b


def output_estimate(count: int, input_bytes: int, line: tuple[Fraction, Fraction] | None,
                    weighed: list | None = None) -> int:
    """A split's estimated output: `line` (output_line) applied to its inputs and their bytes;
    its input bytes without a line, the sample's mean per input where its input bytes are
    unknown."""
    if line is None:
        return input_bytes
    if not input_bytes:
        return count * sum(w[2] for w in weighed) // len(weighed)
    a, b = line
    return max(0, math.floor(a * count + b * input_bytes))


def _plan(found: list[tuple[list[int], np.ndarray]], split: str, num_shards: int,
          target_shard_mb: float, sample: dict | None) -> 'ShardPlan':
    totals = tuple(int(sum(sizes[i] for sizes, _ in found)) for i in range(3))
    count, input_bytes = totals[0], estimated_bytes(totals)
    weighed = (sample or {}).get('weighed')
    output_bytes = output_estimate(count, input_bytes, output_line(weighed), weighed)
    shards = shard_count(count, output_bytes, num_shards, target_shard_mb)
    if num_shards > shards:
        LOG.warning('%s: --num_shards %d is more than %s; writing %d shards', split, num_shards,
                    f'its {count} inputs' if shards == count else f'the most ({MAX_SHARDS})', shards)
    bits = bucket_bits(count)
    buckets, counts = np.unique(np.concatenate([tops for _, tops in found]) >> (MAX_BUCKET_BITS - bits),
                                return_counts=True)
    plan = plan_shards(buckets.astype(np.int64), counts.astype(np.int64), bits, count, shards,
                       input_bytes)
    return dataclasses.replace(plan, output_bytes=output_bytes, output_sampled=len(weighed or ()))


def shard_count(count: int, output_bytes: int, num_shards: int, target_shard_mb: float) -> int:
    """`num_shards` if given, else enough shards of about `target_shard_mb` for `output_bytes`;
    at most one per example and MAX_SHARDS."""
    wanted = num_shards or round(output_bytes / (target_shard_mb * (1 << 20)))
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
    output_bytes: int = 0      # Of its records, estimated (output_estimate).
    output_sampled: int = 0    # The converted inputs that estimate rests on (0: the input bytes).

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

    def key_range(self, first: int, end: int) -> tuple[int, int]:
        """The key hashes [lo, hi) of chunks first..end-1."""
        shift = 64 - self.bits
        lo = int(self.chunk_starts[first]) << shift
        return lo, (int(self.chunk_starts[end]) << shift if end < self.num_chunks else 1 << 64)

    def shards_of_chunk(self, chunk: int) -> range:
        """The shards a chunk's examples fall in."""
        first, end = int(self.chunk_ranks[chunk]), int(self.chunk_ranks[chunk + 1])
        return range(self.shard_of_rank(first), self.shard_of_rank(end - 1) + 1)


def plan_shards(buckets: np.ndarray, counts: np.ndarray, bits: int, count: int,
                num_shards: int, input_bytes: int = 0) -> ShardPlan:
    """Cuts a split's filled buckets (ascending, with their counts) into chunks of about
    CHUNK_EXAMPLES examples (whole buckets: a chunk starts at the first bucket whose first
    example's rank reaches a multiple of CHUNK_EXAMPLES)."""
    before = np.cumsum(counts) - counts            # Rank of each bucket's first example.
    starts = np.ones(len(buckets), dtype=bool)
    starts[1:] = before[1:] // CHUNK_EXAMPLES > before[:-1] // CHUNK_EXAMPLES
    chunk_starts = buckets[starts]
    if len(chunk_starts):
        chunk_starts[0] = 0
    ranks = np.append(before[starts], count)
    return ShardPlan(num_shards, count, bits, chunk_starts, ranks, input_bytes)


@dataclasses.dataclass(frozen=True)
class Task:
    """Chunks first..end-1 of a split: what one worker reads from the listing's runs (one key
    range) and converts in turn."""
    split: str
    first: int
    end: int


def tasks(split: str, plan: ShardPlan) -> list[Task]:
    """A split's chunks cut into tasks of up to TASK_CHUNKS chunks, at least TASKS_PER_SPLIT
    tasks where it has as many chunks."""
    per_task = max(1, min(TASK_CHUNKS, -(-plan.num_chunks // TASKS_PER_SPLIT)))
    return [Task(split, first, min(first + per_task, plan.num_chunks))
            for first in range(0, plan.num_chunks, per_task)]


def dealt_tasks(split_plans: list[tuple[str, ShardPlan]], workers: int) -> list[Task]:
    """Every split's tasks, in the order that deals them evenly over `workers`. Beam's local
    runner hands the elements of a grouped stage to its workers in turn, in the order they were
    made (worker k gets elements k, k + workers, ...), so the tasks are dealt in rounds, the
    largest first (by their inputs' estimated bytes), each round's largest to the worker least
    loaded so far; each worker ends with its smallest tasks, and none idles while another
    converts a large task dealt last. Another runner places tasks as it likes (Dataflow
    rebalances them); the order changes no byte of the output."""
    plans = dict(split_plans)
    made = [task for split in sorted(plans) for task in tasks(split, plans[split])]
    cost = {task: _task_bytes(task, plans[task.split]) for task in made}
    made.sort(key=cost.__getitem__, reverse=True)   # Stable: ties keep the splits' order.
    size = max(1, workers)
    hands: list[list[Task]] = [[] for _ in range(size)]
    loads = [0.0] * size
    for at in range(0, len(made), size):
        for task, hand in zip(made[at:at + size], sorted(range(size), key=loads.__getitem__)):
            hands[hand].append(task)
            loads[hand] += cost[task]
    hands.sort(key=len, reverse=True)   # A last round short of a task each: first in turn.
    return [hands[at % size][at // size] for at in range(len(made))]


def _task_bytes(task: Task, plan: ShardPlan) -> float:
    """A task's inputs' bytes, estimated: its examples at its split's mean input size."""
    examples = plan.first_rank(task.end) - plan.first_rank(task.first)
    return examples * (plan.input_bytes / plan.count if plan.input_bytes and plan.count else 1)

"""How the pipeline's planning stages grow with the number of examples, without image I/O.

    python -m benchmarks.scale [--sizes 100000 1000000 10000000]

The product's own stages (ListExamples spilling refs into sorted runs, PlanConversion: label ids
and shard plans, tasks reading their chunks' refs back) run on the local runner (2 worker
processes) over a synthetic partition type defined here, which yields example refs of ~110 KB
images without touching storage. Each size runs three pipelines, each one stage longer, as its
own process tree; a stage's time is the difference of consecutive pipelines, and peak RSS is
sampled for the launcher and the largest worker. The growth exponent k (time ~ N^k) is fitted
between consecutive sizes. Then the planner alone
(plan_shards on a synthetic histogram) at 10^8 and 10^9 examples, in this process.

    python -m benchmarks.scale --many_shards 70000

converts that many tiny images into as many shards, end to end, and checks the files.
"""
import argparse
import dataclasses
import glob
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions

from benchmarks.benchmark import measure
from pipeline.local_runner import LocalRunner
from pipeline.output import records
from pipeline.inputs.kinds import Partition
from transforms.listing import ListExamples
from pipeline.base.refs import ExampleRef
from pipeline.base.settings import ConversionSettings
from transforms.encode_chunks import task_chunks
from transforms.planning import PlanConversion
from transforms.sharding import bucket_bits, plan_shards, shard_count, tasks
from transforms.spread import Spread

STAGES = ('list', 'plan', 'read tasks')
PARTITIONS = 200


@dataclasses.dataclass(frozen=True)
class SyntheticPartition(Partition):
    """`count` example refs from index `start`, as a listing would find them (sizes known)."""
    start: int
    count: int
    sizes_known = True

    def examples(self):
        for i in range(self.start, self.start + self.count):
            yield ExampleRef('train', f'gs://bucket/raw/train/c{i % 1000}/{i}.jpg',
                             f'gs://bucket/raw/train/c{i % 1000}/{i}.jpg', f'{i}.jpg',
                             f'c{i % 1000}', 110_000)


def run_stages(n: int, stages: int) -> None:
    """One pipeline with the first `stages` stages (in a child process)."""
    from benchmarks.scale import SyntheticPartition as Synthetic   # Importable by name on workers.
    per = n // PARTITIONS
    partitions = [Synthetic(k * per, per) for k in range(PARTITIONS)]
    options = PipelineOptions(direct_running_mode='multi_processing', direct_num_workers=2)
    with tempfile.TemporaryDirectory() as runs, beam.Pipeline(runner=LocalRunner(),
                                                              options=options) as p:
        listed = p | 'List Examples' >> ListExamples(partitions, runs, measure_sizes=False)
        last = listed
        if stages >= 2:
            last = plan = listed | 'Plan Conversion' >> PlanConversion(
                ConversionSettings('scale', ('train',)), sample=False)
        if stages >= 3:
            last = (plan
                    | 'Tasks' >> beam.FlatMap(
                        lambda plan: tasks('train', plan.shard_plans['train']))
                    | 'Spread Tasks' >> Spread()
                    | 'Read Tasks' >> beam.FlatMap(lambda task, plan: [
                        len(refs) for _, refs in task_chunks(task, plan.runs,
                                                             plan.shard_plans['train'])],
                        beam.pvalue.AsSingleton(plan)))
        _ = last | 'Count' >> beam.combiners.Count.Globally()


def planner_alone(n: int) -> tuple[float, float, int]:
    """(seconds, peak MiB of this process, chunks) to plan n examples from their histogram."""
    bits = bucket_bits(n)
    counts = np.random.default_rng(0).poisson(n / (1 << bits), 1 << bits)
    buckets = np.flatnonzero(counts)
    count = int(counts.sum())
    started = time.perf_counter()
    plan = plan_shards(buckets, counts[buckets], bits, count,
                       shard_count(count, count * 110_000, 0, 128))
    seconds = time.perf_counter() - started
    return seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, plan.num_chunks


def many_shards(n: int) -> None:
    """Converts n tiny images into n shards and checks that every shard holds one record."""
    from pipeline.testing import imagemaker
    root = tempfile.mkdtemp()
    image = imagemaker.jpeg(16, 16)
    for i in range(n):
        folder = os.path.join(root, 'train', f'c{i % 10}')
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f'{i}.jpg'), 'wb') as stream:
            stream.write(image)
    out = os.path.join(root, 'out')
    started = time.perf_counter()
    subprocess.run([sys.executable, '-m', 'pipeline.run', f'--input_dir={root}',
                    f'--output_dir={out}', f'--num_shards={n}'], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    shards = glob.glob(os.path.join(out, f'dataset-train.tfrecord-*-of-{n:05d}'))
    per_shard = set()
    for path in shards:
        with open(path, 'rb') as stream:
            per_shard.add(sum(1 for _ in records.read_records(stream)))
    print(f'{n:,} images into --num_shards={n}: {len(shards):,} shard files named -of-{n:05d} '
          f'in {seconds:.0f} s; records per shard: {sorted(per_shard)}')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--sizes', type=int, nargs='+', default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument('--stages', type=int, nargs=2, metavar=('N', 'STAGES'))
    parser.add_argument('--many_shards', type=int, help='Only the end-to-end run of N shards.')
    args = parser.parse_args()
    if args.many_shards:
        many_shards(args.many_shards)
        return
    if args.stages:
        run_stages(*args.stages)
        return
    results = {}
    for n in args.sizes:
        for stages in range(1, len(STAGES) + 1):
            run = measure([sys.executable, '-m', 'benchmarks.scale', '--stages', str(n), str(stages)])
            results[(n, stages)] = run
            print(f'  {n} examples, {stages} stage(s): {run.seconds:.1f} s', flush=True)
    print('\n| examples | stage | seconds | launcher peak MiB | largest worker peak MiB |')
    print('| ---: | --- | ---: | ---: | ---: |')
    for n in args.sizes:
        for stages, name in enumerate(STAGES, 1):
            run, before = results[(n, stages)], results.get((n, stages - 1))
            seconds = run.seconds - (before.seconds if before else 0)
            print(f'| {n:,} | {name} | {seconds:.1f} | {run.rss_launcher / 2**20:.0f} | '
                  f'{run.rss_worker / 2**20:.0f} |')
    print('\nGrowth exponent k (seconds of all three stages ~ N^k; launcher memory ~ N^k):')
    for small, large in zip(args.sizes, args.sizes[1:]):
        a, b = results[(small, len(STAGES))], results[(large, len(STAGES))]
        k_time = math.log(b.seconds / a.seconds) / math.log(large / small)
        k_mem = math.log(b.rss_launcher / a.rss_launcher) / math.log(large / small)
        print(f'  {small:,} -> {large:,}: time k = {k_time:.2f}, launcher memory k = {k_mem:.2f}; '
              f'launcher {b.rss_launcher / large:.0f} bytes per example at {large:,}')
    print('\nThe planner alone, on a synthetic histogram (~110 KB images, 128 MB shards):')
    for n in (10**8, 10**9):
        seconds, peak, chunks = planner_alone(n)
        print(f'  {n:,} examples: {seconds:.2f} s, {chunks:,} chunks, peak RSS {peak:.0f} MiB')


if __name__ == '__main__':
    main()

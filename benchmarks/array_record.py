"""ArrayRecord: the writer options (random-access reads per second through Grain, size, write
speed) and the converter's write throughput against TFRecord, on the benchmark workload.

    python -m benchmarks.array_record [--n 20000] [--reads 20000]

1. The workload is converted once to TFRecord; its train records (real photos as JPEG, in
   tf.train.Example) are then written as ArrayRecord shards with each candidate option string,
   and read back through Grain's ArrayRecordDataSource: single records at seeded random indices
   (what a global shuffle does), one thread, then the same indices in batches of 64
   (`__getitems__`, which Grain spreads over threads), then every record in order; each for
   --reads reads or 20 s, whichever ends first. Files are re-read from the page cache: this
   measures the format's own cost per record, not the disk's.
2. The converter runs with --output_format=tfrecord, array_record and both, interleaved, at n/50
   and n images, fastest of --rounds, and prints steady-state images/s and the ratios to
   TFRecord (as benchmarks/benchmark.py computes them).
"""
import argparse
import logging
import os
import random
import sys
import tempfile
import time

from benchmarks.benchmark import fastest, measure, steady
from benchmarks.workload import linked_workload, make_workload
from pipeline.output import array_records, metadata, shard_formats

PY = sys.executable
CANDIDATES = ['group_size:1,uncompressed', 'group_size:1,zstd:3', 'group_size:16,uncompressed',
              'group_size:256,uncompressed', 'group_size:65536,uncompressed',
              'group_size:65536,zstd:3']
SHARDS = 8


def _write(serialized: list[bytes], folder: str, options: str) -> tuple[list[str], float]:
    os.makedirs(folder, exist_ok=True)
    paths, started = [], time.perf_counter()
    for shard in range(SHARDS):
        path = os.path.join(folder, f'data.array_record-{shard:05d}-of-{SHARDS:05d}')
        array_records.write_file(serialized[shard::SHARDS], path, options)
        paths.append(path)
    return paths, time.perf_counter() - started


def _reads_per_second(source, indices: list[int], batch: int, budget: float = 20.0) -> float:
    """Reads `indices` (`batch` at a time) until done or `budget` seconds have passed."""
    started, done = time.perf_counter(), 0
    while done < len(indices) and time.perf_counter() - started < budget:
        if batch == 1:
            source[indices[done]]
        else:
            source.__getitems__(indices[done:done + batch])
        done += batch
    return min(done, len(indices)) / (time.perf_counter() - started)


def options_table(serialized: list[bytes], workdir: str, reads: int) -> None:
    import grain
    logging.getLogger('absl').setLevel(logging.CRITICAL)   # Grain's "use group size 1" per file.
    total = sum(len(r) for r in serialized)
    print(f'\n{len(serialized)} records, {total / 1e6:.0f} MB of serialized Examples, {SHARDS} shards; '
          f'{reads} seeded random reads')
    print('| writer options | MB on disk | write MB/s | random reads/s | random, batches of 64 | '
          'in order reads/s |')
    print('| --- | ---: | ---: | ---: | ---: | ---: |')
    for options in CANDIDATES:
        paths, seconds = _write(serialized, os.path.join(workdir, options.replace(':', '_')), options)
        source = grain.sources.ArrayRecordDataSource(paths)
        rng = random.Random(0)
        indices = [rng.randrange(len(source)) for _ in range(reads)]
        random_rate = _reads_per_second(source, indices, 1)
        batched_rate = _reads_per_second(source, indices, 64)
        ordered_rate = _reads_per_second(source, list(range(len(source))), 1)
        size = sum(os.path.getsize(p) for p in paths)
        print(f'| `{options}` | {size / 1e6:.1f} | {total / 1e6 / seconds:.0f} | {random_rate:.0f} | '
              f'{batched_rate:.0f} | {ordered_rate:.0f} |', flush=True)


def write_throughput(full: str, small: str, n: int, n_small: int, workdir: str, rounds: int) -> None:
    out = os.path.join(workdir, 'out')
    formats = ['tfrecord', 'array_record', 'tfrecord,array_record']
    samples: dict[tuple, list] = {}
    for round_ in range(rounds):
        for size, workload in ((n_small, small), (n, full)):
            for file_format in formats:
                run = measure([PY, '-m', 'pipeline.run', f'--input_dir={workload}',
                               f'--output_dir={out}', '--overwrite', f'--output_format={file_format}'])
                samples.setdefault((file_format, size), []).append(run)
                print(f'  round {round_ + 1}: {file_format} at {size}: {run.seconds:.1f} s', flush=True)
    print(f'\n| --output_format | images/s (steady) | start-up s | wall s at {n} | ratio to tfrecord |')
    print('| --- | ---: | ---: | ---: | ---: |')
    base = None
    for file_format in formats:
        large = fastest(samples[(file_format, n)])
        rate, startup = steady(n_small, fastest(samples[(file_format, n_small)]), n, large)
        base = base or rate
        print(f'| {file_format} | {rate:.0f} | {startup:.1f} | {large.seconds:.1f} | {rate / base:.2f} |')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=20000, help='Images in the workload (default 20000).')
    parser.add_argument('--reads', type=int, default=20000, help='Random reads per option (default 20000).')
    parser.add_argument('--rounds', type=int, default=2, help='Runs of each conversion (default 2).')
    parser.add_argument('--workdir', default=os.path.join(tempfile.gettempdir(), 'image_tfrecords_bench'))
    args = parser.parse_args()
    n, n_small = args.n, max(100, args.n // 50)
    print(f'Workload: {n} images ({os.cpu_count()} cores)', flush=True)
    full = make_workload(os.path.join(args.workdir, f'images-{n}'), n)
    small = linked_workload(full, os.path.join(args.workdir, f'images-{n}-small'), every=n // n_small)
    records_dir = os.path.join(args.workdir, 'tfrecord-once')
    measure([PY, '-m', 'pipeline.run', f'--input_dir={full}', f'--output_dir={records_dir}',
             '--overwrite'])
    info = metadata.load_json(records_dir, metadata.DATASET_INFO)
    serialized = [r for p in metadata.shard_paths(records_dir, info, 'train')
                  for r in shard_formats.TFRECORD.read_records(p)]
    options_table(serialized, os.path.join(args.workdir, 'options'), args.reads)
    write_throughput(full, small, n, n_small, args.workdir, args.rounds)


if __name__ == '__main__':
    main()

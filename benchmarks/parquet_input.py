"""Hugging Face parquet files against class folders: conversion speed and memory on local disk.

    python -m benchmarks.parquet_input [--n 2000] [--rounds 2]

The workload of benchmarks/workload.py (n images, 10 classes), once as class folders and once as
the same images in parquet files written by `datasets` (`data/SPLIT-0000K-of-0000N.parquet`, at
most 1,000 rows a file and 100 a row group, a ClassLabel of the class names), each converted by
the command line with a worker process per core (a local run's default) and in one process,
interleaved, the fastest of --rounds; prints images/s for the whole command, the peak memory of
the launcher (which holds a local run's shuffles) and of the largest worker, and parquet /
folders.
"""
import argparse
import os
import sys
import tempfile

from benchmarks.benchmark import fastest, measure
from benchmarks.workload import list_images, make_workload

PY = sys.executable
ROWS_PER_FILE, ROWS_PER_GROUP = 1000, 100


def parquet_workload(folders: str, target: str) -> str:
    """The images of a class-folder workload as parquet files in the Hub's `data/` layout."""
    import datasets
    marker = os.path.join(target, '.complete')
    if os.path.exists(marker):
        return target
    images = list_images(folders)
    names = sorted({label for _, label, _ in images})
    features = datasets.Features({'image': datasets.Image(), 'label': datasets.ClassLabel(names=names)})
    os.makedirs(os.path.join(target, 'data'), exist_ok=True)
    for split in sorted({split for split, _, _ in images}):
        rows = [(label, path) for s, label, path in images if s == split]
        files = -(-len(rows) // ROWS_PER_FILE)
        for n in range(files):
            part = rows[n * ROWS_PER_FILE:(n + 1) * ROWS_PER_FILE]
            table = datasets.Dataset.from_dict(
                {'image': [{'bytes': open(path, 'rb').read(), 'path': os.path.basename(path)}
                           for _, path in part],
                 'label': [names.index(label) for label, _ in part]}, features=features)
            table.to_parquet(os.path.join(target, 'data', f'{split}-{n:05d}-of-{files:05d}.parquet'),
                             batch_size=ROWS_PER_GROUP)
    open(marker, 'w').close()
    return target


MODES = {'worker processes': [],   # The default local run: a worker process per core.
         'in one process': ['--direct_running_mode=in_memory', '--direct_num_workers=1']}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=2000)
    parser.add_argument('--rounds', type=int, default=2)
    args = parser.parse_args()
    n, workdir = args.n, tempfile.mkdtemp(prefix='parquet-benchmark-')
    source = make_workload(os.path.join(workdir, 'workload'), n)
    inputs = {'folders': source, 'parquet': parquet_workload(source, os.path.join(workdir, 'parquet'))}
    runs = {(kind, mode): [] for mode in MODES for kind in inputs}
    out = os.path.join(workdir, 'out')
    for _ in range(args.rounds):
        for kind, mode in runs:
            runs[(kind, mode)].append(measure([PY, '-m', 'pipeline.run', f'--input_dir={inputs[kind]}',
                                               f'--output_dir={out}', '--overwrite', *MODES[mode]]))
    print(f'Local disk, {n} images, {os.cpu_count()} cores, fastest of {args.rounds} interleaved '
          'rounds, whole command')
    print('| input | local run | images/s | peak MB launcher | peak MB worker |')
    print('| --- | --- | ---: | ---: | ---: |')
    for mode in MODES:
        for kind in inputs:
            run = fastest(runs[(kind, mode)])
            print(f'| {kind} | {mode} | {n / run.seconds:.0f} | {run.rss_launcher / 2**20:.0f} | '
                  f'{run.rss_worker / 2**20:.0f} |')
        ratio = fastest(runs[('folders', mode)]).seconds / fastest(runs[('parquet', mode)]).seconds
        print(f'parquet / folders, {mode}: {ratio:.2f}')


if __name__ == '__main__':
    main()

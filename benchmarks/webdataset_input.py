"""WebDataset shards against class folders: conversion speed of the same images on local disk.

    python -m benchmarks.webdataset_input [--n 2000] [--rounds 2] [--per_shard 256]

The workload of benchmarks/workload.py (n images, and every tenth of them), once as class
folders and once as WebDataset shards (`SPLIT-NNNNNN.tar` of `KEY.jpg` + `KEY.cls` samples, as
webdataset's writer lays them out, --per_shard samples each; ids in sorted class order), each
converted by the command line, interleaved, the fastest of --rounds; prints images/s in steady
state and for the whole command, and shards / folders (target >= 0.9).
"""
import argparse
import io
import os
import sys
import tarfile
import tempfile

from benchmarks.benchmark import fastest, measure, steady
from benchmarks.workload import linked_workload, list_images, make_workload

PY = sys.executable


def shard_workload(folders: str, target: str, per_shard: int) -> list[str]:
    """The images under `folders` as WebDataset shards in `target`; the --webdataset flags."""
    os.makedirs(target, exist_ok=True)
    by_split: dict[str, list] = {}
    for split, label, path in list_images(folders):
        by_split.setdefault(split, []).append((label, path))
    flags = []
    for split, images in sorted(by_split.items()):
        ids = {label: i for i, label in enumerate(sorted({label for label, _ in images}))}
        count = -(-len(images) // per_shard)
        for shard in range(count):
            with tarfile.open(os.path.join(target, f'{split}-{shard:06d}.tar'), 'w') as tar:
                for label, path in images[shard * per_shard:(shard + 1) * per_shard]:
                    key, extension = os.path.splitext(os.path.basename(path))
                    with open(os.path.realpath(path), 'rb') as stream:
                        _add(tar, f'{key}{extension.lower()}', stream.read())
                    _add(tar, f'{key}.cls', str(ids[label]).encode())
        flags.append(f'--webdataset={split}={target}/{split}-{{000000..{count - 1:06d}}}.tar')
    return flags


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=2000)
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--per_shard', type=int, default=256)
    args = parser.parse_args()
    n, small_n = args.n, args.n // 10
    workdir = tempfile.mkdtemp(prefix='webdataset-benchmark-')
    full = make_workload(os.path.join(workdir, 'folders'), n)
    small = linked_workload(full, os.path.join(workdir, 'folders_small'), every=10)
    inputs = {('folders', n): [f'--input_dir={full}'],
              ('folders', small_n): [f'--input_dir={small}'],
              ('shards', n): shard_workload(full, os.path.join(workdir, 'shards'), args.per_shard),
              ('shards', small_n): shard_workload(small, os.path.join(workdir, 'shards_small'),
                                                  args.per_shard)}
    out = os.path.join(workdir, 'out')
    runs = {key: [] for key in inputs}
    for _ in range(args.rounds):
        for key, flags in inputs.items():
            runs[key].append(measure([PY, '-m', 'pipeline.run', *flags, f'--output_dir={out}',
                                      '--overwrite']))
    print(f'Local disk, {n} images (and {small_n}), fastest of {args.rounds} interleaved rounds, '
          f'{os.cpu_count()} cores')
    print('| input | steady images/s | whole command images/s |')
    print('| --- | ---: | ---: |')
    rates = {}
    for kind in ('folders', 'shards'):
        large, little = fastest(runs[(kind, n)]), fastest(runs[(kind, small_n)])
        rate, _ = steady(small_n, little, n, large)
        rates[kind] = rate, n / large.seconds
        print(f'| {kind} | {rate:.0f} | {n / large.seconds:.0f} |')
    print(f'shards / folders: {rates["shards"][0] / rates["folders"][0]:.2f} steady, '
          f'{rates["shards"][1] / rates["folders"][1]:.2f} whole command (target >= 0.9)')


if __name__ == '__main__':
    main()

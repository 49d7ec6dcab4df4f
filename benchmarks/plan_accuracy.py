"""How close `--plan_only`'s time and memory for this machine come to the run it predicts.

    python -m benchmarks.plan_accuracy [--n 25600] [--rounds 1]
    python -m benchmarks.plan_accuracy --memory [--sizes 20000 200000] [--root DIR]

Time: on the benchmark workload (benchmarks/workload.py), per variant (default flags,
`--reencode`, `--leakage=off`): the plan's `seconds_here` (`--plan_only --plan_format=json`,
with the same flags and `--output_dir`), then the same command without `--plan_only`, timed as
a whole process from outside. Prints the estimate, the wall time and their ratio.

Memory (--memory): per size, a folder of ImageNet's shape (pipeline/testing/imagenet_shape.py,
made once under --root and reused): the plan's `memory_here`, then the default command (a local
run with a worker process per core) with every process of it sampled as
benchmarks/imagenet_local.py samples it. Prints, for the launcher, the largest worker and all
processes together (PSS), the estimate, the peak measured and their ratio.

Ratios are printed, never asserted.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks.workload import make_workload
from benchmarks import imagenet_local
from pipeline.testing import imagenet_shape

PY = sys.executable
VARIANTS = {'default': [], '--reencode': ['--reencode'], '--leakage=off': ['--leakage=off']}


MB = 1 << 20


def memory(sizes: list[int], root: str) -> None:
    """The plan's memory estimate against the run's peaks, per size."""
    print(f'{os.cpu_count()} cores')
    print('| inputs | launcher MB: plan / run | ratio | largest worker MB: plan / run | ratio | '
          'together MB: plan / run | ratio |')
    print('| ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
    for size in sizes:
        inputs = imagenet_shape.make(os.path.join(root, str(size)), size)
        output = os.path.join(root, f'out-{size}')
        shutil.rmtree(output, ignore_errors=True)
        planned = subprocess.run([PY, '-m', 'pipeline.run', f'--input_dir={inputs}',
                                  f'--output_dir={output}', '--plan_only', '--plan_format=json'],
                                 capture_output=True, text=True, check=True)
        estimate = json.loads(planned.stdout)['estimate']['memory_here']
        run = imagenet_local.measure(inputs, output)
        shutil.rmtree(output, ignore_errors=True)
        if run['code']:
            print(f'| {size:,} | the run failed: {run["error"]} |')
            continue
        cells = [f'{estimate[key] / MB:,.0f} / {run[measured] / MB:,.0f} | '
                 f'{estimate[key] / run[measured]:.2f}'
                 for key, measured in (('launcher_bytes', 'launcher'),
                                       ('largest_worker_bytes', 'worker'),
                                       ('together_bytes', 'together'))]
        print(f'| {size:,} | ' + ' | '.join(cells) + ' |', flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=25_600)
    parser.add_argument('--rounds', type=int, default=1)
    parser.add_argument('--workdir', default=os.path.join(tempfile.gettempdir(), 'image_tfrecords_bench'))
    parser.add_argument('--memory', action='store_true',
                        help='Compare the memory estimate instead, on inputs of ImageNet\'s shape.')
    parser.add_argument('--sizes', type=int, nargs='+', default=[20_000, 200_000])
    parser.add_argument('--root', default=os.path.join(tempfile.gettempdir(), 'imagenet-shape'))
    args = parser.parse_args()
    if args.memory:
        memory(args.sizes, args.root)
        return
    workload = make_workload(os.path.join(args.workdir, f'images-{args.n}'), args.n)
    out = os.path.join(args.workdir, 'plan-accuracy-out')
    print(f'{args.n} images, {os.cpu_count()} cores')
    print('| variant | plan: seconds here | run: wall s | estimate / run |')
    print('| --- | ---: | ---: | ---: |')
    for _ in range(args.rounds):
        for name, extra in VARIANTS.items():
            flags = [f'--input_dir={workload}', f'--output_dir={out}', *extra]
            shutil.rmtree(out, ignore_errors=True)
            planned = subprocess.run([PY, '-m', 'pipeline.run', *flags, '--plan_only',
                                      '--plan_format=json'], capture_output=True, text=True,
                                     check=True)
            estimate = json.loads(planned.stdout)['estimate']['seconds_here']
            started = time.monotonic()
            subprocess.run([PY, '-m', 'pipeline.run', *flags], capture_output=True, check=True)
            wall = time.monotonic() - started
            print(f'| {name} | {estimate:.1f} | {wall:.1f} | {estimate / wall:.2f} |')


if __name__ == '__main__':
    main()

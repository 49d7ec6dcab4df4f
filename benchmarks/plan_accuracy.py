"""How close `--plan_only`'s time for this machine comes to the run it predicts.

    python -m benchmarks.plan_accuracy [--n 25600] [--rounds 1]

On the benchmark workload (benchmarks/workload.py), per variant (default flags, `--reencode`,
`--leakage=off`): the plan's `seconds_here` (`--plan_only --plan_format=json`, with the same
flags and `--output_dir`), then the same command without `--plan_only`, timed as a whole process
from outside. Prints the estimate, the wall time and their ratio; ratios are printed, never
asserted (tests/test_plan.py holds the +-30% check on smaller inputs).
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

PY = sys.executable
VARIANTS = {'default': [], '--reencode': ['--reencode'], '--leakage=off': ['--leakage=off']}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=25_600)
    parser.add_argument('--rounds', type=int, default=1)
    parser.add_argument('--workdir', default=os.path.join(tempfile.gettempdir(), 'image_tfrecords_bench'))
    args = parser.parse_args()
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

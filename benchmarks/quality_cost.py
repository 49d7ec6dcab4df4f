"""What the data-quality checks add to a conversion: this version against the version before
them, on the same workload as benchmarks/benchmark.py, in the same run.

    python -m benchmarks.quality_cost [--n 20000] [--rounds 2] [--before COMMIT]

The version before (default: the parent of the commit that added transforms/phash.py) is checked
out into a temporary git worktree and run from there. Both convert the same generated workload
(benchmarks/workload.py) with the same flags, interleaved, each the fastest of --rounds rounds
(shared machines are noisy). The difference is the strict JPEG verdict, the perceptual hashes and
the leakage pairing together; the ratio is printed, never asserted.
"""
import argparse
import os
import platform
import subprocess
import sys
import tempfile

from benchmarks.benchmark import fastest, measure
from benchmarks.workload import make_workload

PY = sys.executable
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _before_checks() -> str:
    added = subprocess.run(['git', '-C', REPO, 'log', '--diff-filter=A', '--format=%H', '--',
                            'transforms/phash.py'], capture_output=True, text=True, check=True)
    return added.stdout.split()[-1] + '^'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=20_000)
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--before', default=None, help='Commit to compare with.')
    parser.add_argument('--workdir', default=os.path.join(tempfile.gettempdir(), 'image-tfrecords-bench'))
    args = parser.parse_args()
    workload = make_workload(os.path.join(args.workdir, f'images-{args.n}'), args.n)
    before = os.path.join(args.workdir, 'before-quality-checks')
    commit = args.before or _before_checks()
    if os.path.exists(before):
        subprocess.run(['git', '-C', REPO, 'worktree', 'remove', '--force', before], check=True)
    subprocess.run(['git', '-C', REPO, 'worktree', 'add', '--detach', '-q', before, commit],
                   check=True)
    try:
        out = os.path.join(args.workdir, 'quality-cost-out')
        flags = [f'--input_dir={workload}', f'--output_dir={out}', '--overwrite']
        commands = {'with the checks': ([PY, '-m', 'pipeline.run', *flags], REPO),
                    f'before them ({commit})': ([PY, '-m', 'pipeline.run', *flags], before)}
        runs: dict[str, list] = {name: [] for name in commands}
        for _ in range(args.rounds):
            for name, (command, root) in commands.items():
                os.chdir(root)   # python -m imports the package of its folder.
                runs[name].append(measure(command))
    finally:
        os.chdir(REPO)
        subprocess.run(['git', '-C', REPO, 'worktree', 'remove', '--force', before], check=True)
    best = {name: fastest(r).seconds for name, r in runs.items()}
    print(f'{args.n} images, {os.cpu_count()} cores, {platform.python_version()}, '
          f'fastest of {args.rounds}')
    for name, seconds in best.items():
        print(f'{name:<40}{seconds:>8.1f} s{args.n / seconds:>8.0f} images/s')
    with_checks, without = best.values()
    print(f'time added by the checks: {with_checks / without - 1:+.1%} '
          f'(ratio {with_checks / without:.3f})')


if __name__ == '__main__':
    main()

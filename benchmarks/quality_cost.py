"""What the data-quality checks add to a conversion, on the same workload as
benchmarks/benchmark.py, in the same run.

    python -m benchmarks.quality_cost [--n 20000] [--rounds 2] [--before COMMIT] [--distinct]

By default this version is compared with itself with parts of the checks taken out
(benchmarks/without_hashes): without the pairing, and without the perceptual hashes and the
pairing (every hash FLAT, the verdict decoded at 1/8 scale). All three are started the same
way, so the differences are what the hashes and the pairing cost and nothing else. Each runs at
n/50 and at n images, so that, as in benchmarks/benchmark.py, the steady-state rate (the slope
between the two) is told apart from fixed costs; printed: the whole command's wall time and the
CPU time of its process tree at n, the steady rate, and the ratios to the version without both.

With --before COMMIT the comparison is instead with that version (a temporary git worktree of
it), which also differs in everything else changed since. Runs are interleaved, each figure the
fastest of --rounds rounds (shared machines are noisy); ratios are printed, never asserted.

The workload's crops of 16 photos are about one near-duplicate pair per image, the pairing's
worst case; --distinct converts the workload's distinct variant instead (benchmarks/workload.py:
the same photos, no two images alike), what the checks cost a dataset with little leakage.
"""
import argparse
import dataclasses
import os
import platform
import resource
import subprocess
import sys
import tempfile

from benchmarks.benchmark import measure
from benchmarks.workload import linked_workload, make_workload

PY = sys.executable
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass
class Timed:
    seconds: float       # Wall time of the whole command.
    cpu_seconds: float   # User + system time of its process tree.


def timed(command: list[str], root: str, env: dict) -> Timed:
    """Runs `command` in `root` (python -m imports the package of its folder)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    os.chdir(root)
    try:
        seconds = measure(command, env).seconds
    finally:
        os.chdir(REPO)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return Timed(seconds, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)


def _variants(args: argparse.Namespace, flags: list[str]) -> dict[str, tuple]:
    """name -> (command, folder, environment); the one to compare with last."""
    command = [PY, '-m', 'pipeline.run', *flags]
    if args.before is None:
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, 'benchmarks', 'without_hashes'))
        return {'with hashes and pairing': (command, REPO, env),
                'hashes, no pairing': (command, REPO, dict(env, WITHOUT_PAIRING='1')),
                'neither (same code)': (command, REPO, dict(env, WITHOUT_HASHES='1'))}
    return {'this version': (command, REPO, dict(os.environ)),
            f'version {args.before}': (command, os.path.join(args.workdir, 'before'),
                                       dict(os.environ))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=20_000)
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--before', default=None,
                        help='Compare with this commit instead of this version without hashes.')
    parser.add_argument('--workdir', default=os.path.join(tempfile.gettempdir(), 'image-tfrecords-bench'))
    parser.add_argument('--distinct', action='store_true',
                        help='Convert images no two of which are alike (the workload\'s variant).')
    args = parser.parse_args()
    n, n_small = args.n, max(100, args.n // 50)
    name = f'images-{n}{"-distinct" if args.distinct else ""}'
    full = make_workload(os.path.join(args.workdir, name), n, distinct=args.distinct)
    small = linked_workload(full, os.path.join(args.workdir, f'{name}-small'), every=n // n_small)
    out = os.path.join(args.workdir, 'quality-cost-out')
    variants = {size: _variants(args, [f'--input_dir={workload}', f'--output_dir={out}',
                                       '--overwrite'])
                for size, workload in ((n_small, small), (n, full))}
    before = os.path.join(args.workdir, 'before')
    if args.before is not None:
        if os.path.exists(before):
            subprocess.run(['git', '-C', REPO, 'worktree', 'remove', '--force', before], check=True)
        subprocess.run(['git', '-C', REPO, 'worktree', 'add', '--detach', '-q', before,
                        args.before], check=True)
    runs: dict[tuple, list[Timed]] = {}
    try:
        for _ in range(args.rounds):
            for size, by_name in variants.items():
                for name, variant in by_name.items():
                    runs.setdefault((name, size), []).append(timed(*variant))
    finally:
        if args.before is not None:
            subprocess.run(['git', '-C', REPO, 'worktree', 'remove', '--force', before], check=True)
    names = list(variants[n])
    wall = {key: min(r.seconds for r in rs) for key, rs in runs.items()}
    cpu = {key: min(r.cpu_seconds for r in rs) for key, rs in runs.items()}
    rate = {name: (n - n_small) / max(1e-9, wall[(name, n)] - wall[(name, n_small)])
            for name in names}
    print(f'{n} images ({n_small} for the steady rate), {os.cpu_count()} cores, '
          f'{platform.python_version()}, fastest of {args.rounds}')
    base = names[-1]
    print('| variant | wall s | CPU s | steady images/s | ratio: wall, CPU, steady time |')
    print('| --- | ---: | ---: | ---: | ---: |')
    for name in names:
        print(f'| {name} | {wall[(name, n)]:.1f} | {cpu[(name, n)]:.1f} | {rate[name]:.0f} | '
              f'{wall[(name, n)] / wall[(base, n)]:.3f}, {cpu[(name, n)] / cpu[(base, n)]:.3f}, '
              f'{rate[base] / rate[name]:.3f} |')


if __name__ == '__main__':
    main()

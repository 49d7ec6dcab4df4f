"""What the leakage check costs where look-alikes crowd: many crops of a few photos.

    python -m benchmarks.leakage_scale [--n 3000] [--photos 6] [--rounds 1] [--before DIR]

Converts a workload of n crops of `photos` photos (benchmarks/workload.py: 80/10/10 splits,
groups of look-alikes that grow with n) with the default --leakage=report and with
--leakage=off, `--reencode` and 16 shards as in the issue's measurement; prints per variant
the wall time (fastest of --rounds), the peak memory of the largest process (ru_maxrss of the
command's process tree), the lines of leakage.jsonl against the images, and the ratio to the
run with --leakage=off. With --before DIR the default run of the version in DIR (e.g.
`git archive COMMIT | tar -x -C DIR`) is measured as well. Ratios are printed, never asserted.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

from benchmarks.quality_cost import REPO
from benchmarks.workload import make_workload

PY = sys.executable
# Runs a command and prints the peak resident memory (kB) of its process tree's largest process.
_PEAK = ('import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; '
         'print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); '
         'sys.exit(code)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=3000)
    parser.add_argument('--photos', type=int, default=6)
    parser.add_argument('--rounds', type=int, default=1)
    parser.add_argument('--before', default=None,
                        help='A folder holding another version, whose default run is measured too.')
    parser.add_argument('--workdir', default=os.path.join(tempfile.gettempdir(), 'image-tfrecords-bench'))
    args = parser.parse_args()
    root = make_workload(os.path.join(args.workdir, f'crops-{args.n}-of-{args.photos}'), args.n,
                         photos=args.photos)
    out = os.path.join(args.workdir, 'leakage-scale-out')
    flags = [f'--input_dir={root}', f'--output_dir={out}', '--overwrite', '--reencode',
             '--num_shards=16']
    variants = {'--leakage=report': (REPO, []), '--leakage=off': (REPO, ['--leakage=off'])}
    if args.before is not None:
        variants[f'{args.before}: --leakage=report'] = (os.path.abspath(args.before), [])
    results: dict[str, list] = {}
    for _ in range(args.rounds):
        for name, (folder, extra) in variants.items():
            results.setdefault(name, []).append(
                _measure([PY, '-m', 'pipeline.run', *flags, *extra], folder, out))
    best = {name: min(runs) for name, runs in results.items()}
    off = best['--leakage=off'][0]
    print(f'{args.n} crops of {args.photos} photos, {os.cpu_count()} cores, fastest of '
          f'{args.rounds}')
    print('| variant | wall s | peak MB | leakage.jsonl lines | lines / images | vs off |')
    print('| --- | ---: | ---: | ---: | ---: | ---: |')
    for name, (seconds, peak, lines) in best.items():
        print(f'| {name} | {seconds:.1f} | {peak:.0f} | {lines} | {lines / args.n:.3f} | '
              f'{seconds / off:.2f}x |')


def _measure(command: list[str], folder: str, out: str) -> tuple[float, float, int]:
    """(wall seconds, peak MB of the largest process, lines of leakage.jsonl) of one run."""
    env = dict(os.environ, PYTHONPATH=folder)
    wrapped = [PY, '-c', _PEAK, *command]
    started = time.monotonic()
    done = subprocess.run(wrapped, cwd=folder, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode:
        sys.exit(f'{" ".join(command)} failed: {done.stderr.strip().splitlines()[-1]}')
    peak_mb = int(done.stderr.strip().splitlines()[-1]) / 1024
    report = os.path.join(out, 'leakage.jsonl')
    lines = sum(1 for _ in open(report)) if os.path.exists(report) else 0
    return seconds, peak_mb, lines


if __name__ == '__main__':
    main()

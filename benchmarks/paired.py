"""The converter against the pool baseline as whole commands, paired, and against the floor of
the work it must do.

    python -m benchmarks.paired [--n 10000] [--workload distinct|copies] [--pairs 5]
                                [--variants default leakage_off reencode]

Each variant pairs one command line of ours with one of `benchmarks.baselines pool` (a
multiprocessing.Pool over all cores writing its own shards with tf.io.TFRecordWriter):

    default      ours as it comes            pool pass-through
    leakage_off  ours --leakage=off          pool pass-through
    reencode     ours --reencode             pool --reencode

Each command runs as its own process tree on the same workload, output folders emptied before
each run; per round and variant, one pair, its order alternating from round to round (ours
first in even rounds), then ours on every 50th image (n/50, at least 100: the start-up) and
the mandated floor of the variant's flags (benchmarks/mandated.py). A command's wall time runs
to the end of the process started; its CPU time is user + system of every process it started,
its workers' children included: the deltas of getrusage(RUSAGE_CHILDREN) around it, with this
process a child subreaper, so that a descendant orphaned before it ends is reaped here and
counted; a check sampled from /proc on one warm-up pair (not counted) shows that the figure
includes them.

Printed, from the medians over rounds: wall and CPU of each side and the ratios ours/pool
(lower is better for us; the range of the ratios pair by pair in parentheses), the pool's spread
over its runs (max/min - 1: the day's noise); and ours against the mandated floor. Ours's rate
there is its steady rate, (n - n/50) / (median wall at n - median wall at n/50): like the floor,
it leaves out what does not grow with the images (imports, starting the runner and workers,
checking the output, committing), and it keeps all that does (reading files, the checks'
pairing, the shards' joins). Workloads (benchmarks/workload.py): `distinct`, no two images alike
(default n 10,000); `copies`, crops of the workload's photos, all in train, each present 4 times
under other names, byte for byte (default n 25,600).
"""
import argparse
import contextlib
import ctypes
import dataclasses
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

from benchmarks.workload import copies_workload, linked_workload, list_images, make_workload

PY = sys.executable
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = {   # name -> (flags of ours, flags of the pool)
    'default': ([], []),
    'leakage_off': (['--leakage=off'], []),
    'reencode': (['--reencode'], ['--reencode']),
}
DEFAULT_N = {'distinct': 10_000, 'copies': 25_600}
TARGET = 0.85   # Ours's steady rate / the mandated floor.
_PR_SET_CHILD_SUBREAPER = 36


@dataclasses.dataclass(frozen=True)
class Timed:
    wall: float   # Seconds, to the end of the process started.
    cpu: float    # User + system seconds of every process of its tree.


def become_subreaper() -> bool:
    """Makes this process the one orphaned descendants are given to (Linux), so their CPU time
    reaches RUSAGE_CHILDREN once they are reaped here; False where that is not possible."""
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    return False


def _reap() -> None:
    """Waits for every descendant left behind by the command that just ended."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


@dataclasses.dataclass
class TreeSample:
    """CPU seconds of the processes of a command's tree, as last read from /proc."""
    started: float = 0.0   # The process started.
    others: dict = dataclasses.field(default_factory=dict)   # (pid, start time) -> seconds.

    def read(self, own: psutil.Process) -> None:
        with contextlib.suppress(psutil.Error):
            times = own.cpu_times()
            self.started = times.user + times.system
        for process in psutil.Process().children(recursive=True):
            if process.pid != own.pid:
                with contextlib.suppress(psutil.Error):
                    times = process.cpu_times()
                    self.others[(process.pid, process.create_time())] = times.user + times.system


def run(command: list[str], log: str, sample: TreeSample | None = None) -> Timed:
    """Runs `command` from the repository (stdout dropped, stderr to `log`); with `sample`, reads
    its tree's CPU times into it every 20 ms."""
    before = _cpu(resource.getrusage(resource.RUSAGE_CHILDREN))
    with open(log, 'wb') as errors:
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=errors)
        if sample is not None:
            own = psutil.Process(process.pid)
            while process.poll() is None:
                sample.read(own)
                time.sleep(0.02)
        code = process.wait()
        wall = time.perf_counter() - started
    _reap()
    cpu = _cpu(resource.getrusage(resource.RUSAGE_CHILDREN)) - before
    if code:
        with open(log, errors='replace') as text:
            tail = text.read()[-3000:]
        raise RuntimeError(f'{" ".join(command)} failed with exit code {code}:\n{tail}')
    return Timed(wall, cpu)


def check_cpu(name: str, command: list[str], log: str) -> None:
    """Runs `command` once with its tree sampled; prints that its CPU time as measured here
    includes the processes it started, or stops the benchmark when it does not. (A sample misses
    each process's last few ms, so the measured figure should be at least the sampled one.)"""
    sample = TreeSample()
    timed = run(command, log, sample)
    others = sum(sample.others.values())
    ok = bool(sample.others) and timed.cpu >= 0.95 * (sample.started + others)
    print(f'  CPU check, {name}: {timed.cpu:.2f} s by getrusage(RUSAGE_CHILDREN); sampled from '
          f'/proc every 20 ms: {sample.started:.2f} s in the process started and {others:.2f} s '
          f'in the {len(sample.others)} it started: {"included" if ok else "NOT INCLUDED"}',
          flush=True)
    if not ok:
        sys.exit('The CPU figures would leave out processes of the tree; not measuring.')


def _rate(text: str) -> float:
    return float(re.search(r'images_per_second=([\d.]+)', text)[1])


def mandated(workload: str, flags: list[str], log: str) -> float:
    """The mandated floor's images/s on `workload` for a command given `flags`."""
    with open(log, 'wb') as errors:
        done = subprocess.run([PY, '-m', 'benchmarks.mandated', workload, *flags], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=errors, text=True)
    if done.returncode:
        raise RuntimeError(f'benchmarks.mandated failed; see {log}')
    return _rate(done.stdout)


def _spread(values: list[float]) -> float:
    return max(values) / min(values) - 1


def _ratios(ours: list[float], pool: list[float]) -> str:
    pairs = [a / b for a, b in zip(ours, pool)]
    return (f'{statistics.median(ours) / statistics.median(pool):.2f} '
            f'({min(pairs):.2f}-{max(pairs):.2f})')


def _revision() -> str:
    done = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=REPO,
                          capture_output=True, text=True)
    return done.stdout.strip() or 'unknown'


@dataclasses.dataclass
class Sides:
    """The two commands of each variant, each writing to its own output folder."""
    workdir: str

    def command(self, side: str, variant: str, workload: str) -> list[str]:
        """The command of `side` ('ours' or 'pool') in `variant`, its output folder emptied."""
        output = os.path.join(self.workdir, f'paired-{side}')
        shutil.rmtree(output, ignore_errors=True)
        ours, pool = VARIANTS[variant]
        if side == 'ours':
            return [PY, '-m', 'pipeline.run', f'--input_dir={workload}', f'--output_dir={output}',
                    *ours]
        return [PY, '-m', 'benchmarks.baselines', 'pool', workload, output, *pool]


@dataclasses.dataclass
class Results:
    """What the rounds measured."""
    runs: dict = dataclasses.field(default_factory=dict)    # (variant, side) -> [Timed]
    floors: dict = dataclasses.field(default_factory=dict)  # variant -> [images/s]

    def walls(self, variant: str, side: str) -> list[float]:
        return [t.wall for t in self.runs[(variant, side)]]

    def cpus(self, variant: str, side: str) -> list[float]:
        return [t.cpu for t in self.runs[(variant, side)]]


def measure(variants: list[str], pairs: int, full: str, small: str, n_small: int,
            sides: Sides) -> Results:
    """`pairs` rounds; in each, per variant: the pair (ours first in even rounds), ours on the
    small workload, the mandated floor."""
    results, log = Results(), os.path.join(sides.workdir, 'paired-stderr.log')
    print('Warm-up pair (not counted):', flush=True)
    check_cpu(f'ours {variants[0]}', sides.command('ours', variants[0], full), log)
    check_cpu(f'pool {variants[0]}', sides.command('pool', variants[0], full), log)
    for round_ in range(pairs):
        for variant in variants:
            for side in ('ours', 'pool') if round_ % 2 == 0 else ('pool', 'ours'):
                timed = run(sides.command(side, variant, full), log)
                results.runs.setdefault((variant, side), []).append(timed)
                print(f'  round {round_ + 1}, {variant}, {side}: {timed.wall:.2f} s wall, '
                      f'{timed.cpu:.2f} s CPU', flush=True)
            timed = run(sides.command('ours', variant, small), log)
            results.runs.setdefault((variant, 'small'), []).append(timed)
            floor = mandated(full, VARIANTS[variant][0], log)
            results.floors.setdefault(variant, []).append(floor)
            print(f'  round {round_ + 1}, {variant}: ours at {n_small} {timed.wall:.2f} s, '
                  f'mandated floor {floor:.0f} images/s', flush=True)
    return results


def print_tables(results: Results, variants: list[str], n: int, n_small: int,
                 workload: str, pairs: int) -> None:
    """The two tables, in markdown."""
    median = statistics.median
    print(f'\nOurs against the pool, whole commands, {n} images ({workload}), medians of {pairs} '
          'pairs; ratios ours/pool, lower is better for us (pair by pair: min-max); the pool\'s '
          'spread over its runs (max/min - 1) is the day\'s noise:\n')
    print('| variant: ours / pool | ours wall s | pool wall s | wall ours/pool | ours CPU s | '
          'pool CPU s | CPU ours/pool | pool spread: wall, CPU |')
    print('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
    for variant in variants:
        ours, pool = VARIANTS[variant]
        walls, cpus = (results.walls(variant, 'ours'), results.walls(variant, 'pool')), (
            results.cpus(variant, 'ours'), results.cpus(variant, 'pool'))
        print(f'| {" ".join(ours) or "default"} / {" ".join(pool) or "pass-through"} | '
              f'{median(walls[0]):.2f} | {median(walls[1]):.2f} | {_ratios(*walls)} | '
              f'{median(cpus[0]):.2f} | {median(cpus[1]):.2f} | {_ratios(*cpus)} | '
              f'{_spread(walls[1]):.0%}, {_spread(cpus[1]):.0%} |')
    print(f'\nOurs against the mandated floor (benchmarks/mandated.py: all cores, images in '
          f'memory), medians; ours steady = ({n} - {n_small}) / (median wall at {n} - median '
          f'wall at {n_small}), start-up = wall at {n_small} - {n_small} / steady:\n')
    print('| mode | mandated images/s | ours steady images/s | ours start-up s | '
          f'ours whole-run images/s | ours steady / mandated (target >= {TARGET}) |')
    print('| --- | ---: | ---: | ---: | ---: | ---: |')
    for variant in variants:
        wall = median(results.walls(variant, 'ours'))
        wall_small = median(results.walls(variant, 'small'))
        steady = (n - n_small) / max(1e-9, wall - wall_small)
        floor = median(results.floors[variant])
        print(f'| {" ".join(VARIANTS[variant][0]) or "default"} | {floor:.0f} | {steady:.0f} | '
              f'{max(0.0, wall_small - n_small / steady):.2f} | {n / wall:.0f} | '
              f'{steady / floor:.2f} |')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=None,
                        help='Images (default 10000 distinct, 25600 copies).')
    parser.add_argument('--workload', choices=tuple(DEFAULT_N), default='distinct')
    parser.add_argument('--pairs', type=int, default=5, help='Rounds of pairs (default 5).')
    parser.add_argument('--variants', nargs='+', choices=tuple(VARIANTS), default=list(VARIANTS))
    parser.add_argument('--workdir',
                        default=os.path.join(tempfile.gettempdir(), 'image_tfrecords_bench'))
    args = parser.parse_args()
    n = args.n or DEFAULT_N[args.workload]
    if args.workload == 'copies':
        full = copies_workload(os.path.join(args.workdir, f'copies-{n}'), n)
    else:
        full = make_workload(os.path.join(args.workdir, f'images-{n}-distinct'), n, distinct=True)
    n = len(list_images(full))
    small = linked_workload(full, f'{full}-small', every=n // max(100, n // 50))
    n_small = len(list_images(small))
    print(f'{time.strftime("%Y-%m-%d %H:%M")}, {_revision()}: {n} images ({args.workload}), '
          f'{args.pairs} pairs, {os.cpu_count()} cores, '
          f'{platform.processor() or platform.machine()}, '
          f'{psutil.virtual_memory().total / 2**30:.0f} GiB, load {os.getloadavg()[0]:.1f}',
          flush=True)
    if not become_subreaper():
        print('  (not a child subreaper here: a descendant orphaned before it ends is not '
              'counted; the check below tells)')
    results = measure(args.variants, args.pairs, full, small, n_small, Sides(args.workdir))
    print_tables(results, args.variants, n, n_small, args.workload, args.pairs)


if __name__ == '__main__':
    main()

"""Speed and memory of the converter against the baselines a user would pick instead.

    python -m benchmarks.benchmark [--n 20000] [--workload crops|distinct]

Every variant runs as its own process tree, on the same generated workload (benchmarks/
workload.py: `crops`, overlapping crops of 16 photos, about one near-duplicate pair across
splits per image, the leakage check's worst case; `distinct`, the same photos cut so that no two
images are alike, the case of a dataset with little leakage), in the same run: at n/50 and at n
images, interleaved, so that the fixed start-up cost (imports, runner start) and the
steady-state throughput can be told apart:
steady = (n - n/50) / (t(n) - t(n/50)), start-up = t(n/50) - (n/50) / steady. Each measurement is
the fastest of --rounds interleaved rounds (shared machines are noisy; the fastest run is the one
least disturbed). Peak RSS is sampled for the launcher process, for the largest worker process
and for the sum over the tree. Prints a table, the ratios ours/baseline and our fraction of the
codec limits, among them two floors (all cores doing, from memory, only the codec work the
converter must do: with its checks, the strict decode at the scale the hashes read and the
hashes; without them, the strict 1/8-scale decode), a 1-core vs all-cores line and peak RSS at n
and 2n.
"""
import argparse
import dataclasses
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

import psutil

from benchmarks.workload import linked_workload, make_workload

PY = sys.executable


@dataclasses.dataclass
class Run:
    seconds: float
    rss_launcher: int  # The process started (for Beam: the launcher and runner), bytes.
    rss_worker: int    # Largest process it started, bytes.
    rss_sum: int       # Whole process tree, bytes.
    stdout: str

    @property
    def rss_max(self) -> int:
        return max(self.rss_launcher, self.rss_worker)


def _rss(process: psutil.Process) -> int:
    try:
        return process.memory_info().rss
    except psutil.Error:
        return 0


def measure(cmd: list[str], env: dict | None = None) -> Run:
    """Runs cmd (in `env`, default this one's), sampling the RSS of its process tree every 50 ms."""
    started = time.perf_counter()
    process = psutil.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           env=env)
    launcher = worker = total = 0
    while process.poll() is None:
        try:
            children = [_rss(p) for p in process.children(recursive=True)]
        except psutil.Error:
            children = []
        own = _rss(process)
        launcher, worker = max(launcher, own), max([worker] + children)
        total = max(total, own + sum(children))
        time.sleep(0.05)
    seconds = time.perf_counter() - started
    stdout = process.stdout.read()
    if process.returncode:
        raise RuntimeError(f'{cmd} failed with exit code {process.returncode}')
    return Run(seconds, launcher, worker, total, stdout)


def fastest(runs: list[Run]) -> Run:
    return min(runs, key=lambda r: r.seconds)


def variants(out: str) -> dict[str, callable]:
    """name -> function(workload folder) -> command."""
    ours = [PY, '-m', 'pipeline.run', f'--output_dir={out}', '--overwrite']
    base = [PY, '-m', 'benchmarks.baselines']
    return {
        'ours (pass-through)': lambda w: ours + [f'--input_dir={w}'],
        'ours --leakage=off': lambda w: ours + [f'--input_dir={w}', '--leakage=off'],
        'ours --reencode': lambda w: ours + [f'--input_dir={w}', '--reencode'],
        'naive Beam': lambda w: base + ['naive_beam', w, out],
        'pool (pass-through)': lambda w: base + ['pool', w, out],
        'pool (re-encode)': lambda w: base + ['pool', w, out, '--reencode'],
    }


def steady(n_small: int, small: Run, n: int, large: Run) -> tuple[float, float]:
    """(images/s in steady state, start-up seconds)."""
    rate = (n - n_small) / max(1e-9, large.seconds - small.seconds)
    return rate, max(0.0, small.seconds - n_small / rate)


def codec_rate(workload: str, *flags: str) -> float:
    run = measure([PY, '-m', 'benchmarks.baselines', 'codec', workload, *flags])
    return float(re.search(r'images_per_second=([\d.]+)', run.stdout)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=20000, help='Images in the workload (default 20000).')
    parser.add_argument('--rounds', type=int, default=2, help='Runs of each measurement (default 2).')
    parser.add_argument('--workload', choices=('crops', 'distinct'), default='crops',
                        help='crops: about one near-duplicate pair across splits per image (the '
                             'default); distinct: no two images alike (benchmarks/workload.py).')
    parser.add_argument('--workdir', default=os.path.join(tempfile.gettempdir(), 'image_tfrecords_bench'))
    args = parser.parse_args()
    n, n_small = args.n, max(100, args.n // 50)
    print(f'Workload: {n} images ({args.workload}) in {args.workdir} ({os.cpu_count()} cores, {platform.processor() or platform.machine()}, '
          f'{psutil.virtual_memory().total / 2**30:.0f} GiB)', flush=True)
    distinct = args.workload == 'distinct'
    name = f'images-{n}{"-distinct" if distinct else ""}'
    full = make_workload(os.path.join(args.workdir, name), n, distinct=distinct)
    small = linked_workload(full, os.path.join(args.workdir, f'{name}-small'), every=n // n_small)
    double = linked_workload(full, os.path.join(args.workdir, f'{name}-doubled'), copies=2)
    out = os.path.join(args.workdir, 'out')
    # One core: the whole process tree pinned to CPU 0, one worker process.
    commands = dict(variants(out), **{'ours, 1 core': lambda w: [
        'taskset', '-c', '0', PY, '-m', 'pipeline.run', f'--input_dir={w}', f'--output_dir={out}',
        '--overwrite', '--direct_num_workers=1', '--direct_running_mode=multi_processing']})
    samples: dict[tuple, list] = {}
    for round_ in range(args.rounds):
        for size, workload in ((n_small, small), (n, full)):
            for name, command in commands.items():
                run = measure(command(workload))
                samples.setdefault((name, size), []).append(run)
                print(f'  round {round_ + 1}: {name} at {size}: {run.seconds:.1f} s', flush=True)
    runs = {name: {size: fastest(samples[(name, size)]) for size in (n_small, n)}
            for name in variants(out)}
    one_core = {size: fastest(samples[('ours, 1 core', size)]) for size in (n_small, n)}
    at_double = fastest([measure([PY, '-m', 'pipeline.run', f'--input_dir={double}',
                                  f'--output_dir={out}', '--overwrite']) for _ in range(args.rounds)])
    decode = max(codec_rate(full) for _ in range(args.rounds))
    decode_encode = max(codec_rate(full, '--encode') for _ in range(args.rounds))
    floor = max(codec_rate(full, '--floor') for _ in range(args.rounds))
    hash_floor = max(codec_rate(full, '--hash_floor') for _ in range(args.rounds))

    rates, startups = {}, {}
    print(f'\n| variant | images/s (steady) | start-up s | wall s at {n} | peak RSS MiB: launcher / largest worker / sum |')
    print('| --- | ---: | ---: | ---: | ---: |')
    for name, by_size in runs.items():
        rate, startup = steady(n_small, by_size[n_small], n, by_size[n])
        rates[name], startups[name] = rate, startup
        big = by_size[n]
        print(f'| {name} | {rate:.0f} | {startup:.1f} | {big.seconds:.1f} | '
              f'{big.rss_launcher / 2**20:.0f} / {big.rss_worker / 2**20:.0f} / {big.rss_sum / 2**20:.0f} |')
    print(f'| codec limit: Pillow decode, all cores | {decode:.0f} | | | |')
    print(f'| codec limit: Pillow decode + encode, all cores | {decode_encode:.0f} | | | |')
    print(f'| codec floor with the checks: strict decode at hash scale + hashes, all cores | '
          f'{hash_floor:.0f} | | | |')
    print(f'| codec floor: strict 1/8-scale decode, all cores | {floor:.0f} | | | |')
    one, _ = steady(n_small, one_core[n_small], n, one_core[n])
    ours, ours_re = rates['ours (pass-through)'], rates['ours --reencode']
    off, pool = rates['ours --leakage=off'], rates['pool (pass-through)']
    print('\nRatios (steady state):')
    print(f'  pass-through / pool pass-through   {ours / pool:.2f}  (target >= 1.15)')
    print(f'  pass-through / floor with checks   {ours / hash_floor:.2f}  (target >= 0.8)')
    print(f'  pass-through / naive Beam          {ours / rates["naive Beam"]:.2f}  (target >= 4)')
    print(f'  --leakage=off / pool pass-through  {off / pool:.2f}  (target >= 1.5)')
    print(f'  --leakage=off / 1/8-scale floor    {off / floor:.2f}  (target >= 0.7)')
    print(f'  --reencode / pool re-encode        {ours_re / rates["pool (re-encode)"]:.2f}  (target >= 1.1)')
    print(f'  start-up: ours {startups["ours (pass-through)"]:.1f} s, pool '
          f'{startups["pool (pass-through)"]:.1f} s  (target: ours <= pool)')
    print(f'  pass-through / codec decode limit  {ours / decode:.2f}')
    print(f'  --reencode / codec decode+encode   {ours_re / decode_encode:.2f}')
    print(f'Scaling: {one:.0f} images/s on 1 core, {ours:.0f} on {os.cpu_count()}: {ours / one:.2f}x  (target >= 1.8 on 2)')
    base = runs['ours (pass-through)'][n]
    print(f'Peak RSS of the largest worker process: {base.rss_worker / 2**20:.0f} MiB at {n} images, '
          f'{at_double.rss_worker / 2**20:.0f} MiB at {2 * n}: {at_double.rss_worker / base.rss_worker:.2f}x '
          f'(target <= 1 GiB and within 10%)')
    print(f'Peak RSS of the launcher (DirectRunner keeps its shuffles in this process): '
          f'{base.rss_launcher / 2**20:.0f} MiB at {n}, {at_double.rss_launcher / 2**20:.0f} MiB at {2 * n}: '
          f'{at_double.rss_launcher / base.rss_launcher:.2f}x')


if __name__ == '__main__':
    main()

"""What a rerun after a crash costs, against an uninterrupted run, on the benchmark workload.

    python -m benchmarks.resume [--n 12000] [--at 0.6] [--photos N]

In one run, on the same workload (benchmarks/workload.py): an uninterrupted conversion; a
conversion killed (SIGKILL of its whole process tree) once a fraction `--at` of its chunks is
finished, and the same command rerun; a conversion killed once every chunk is finished, and
rerun (so every chunk is reused), which gives the cost of reusing a chunk; and a conversion of a
few images, for the fixed start-up cost. Each rerun's output is checked byte for byte against
the uninterrupted run. With --photos N the workload is crops of N photos (look-alikes: the
leakage check's crowded case).
"""
import argparse
import glob
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from benchmarks.workload import linked_workload, make_workload
from pipeline.output.layout import chunk_of_part

PY = sys.executable


def _command(workload: str, out: str) -> list[str]:
    return [PY, '-m', 'pipeline.run', f'--input_dir={workload}', f'--output_dir={out}']


def watched(cmd: list[str], out: str, kill_at: int | None = None) -> tuple[float, int, str]:
    """Runs cmd, counting the finished chunks in its temporary folder; kills its process tree
    once `kill_at` chunks are finished. Returns (seconds, most chunks seen finished, stdout)."""
    started = time.perf_counter()
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               start_new_session=True)
    seen = 0
    while process.poll() is None:
        parts = glob.glob(f'{out}/.tmp-*/parts/*.json')
        seen = max(seen, len({chunk_of_part(p) for p in parts}))
        if kill_at is not None and seen >= kill_at:
            os.killpg(process.pid, signal.SIGKILL)
            break
        time.sleep(0.005)
    stdout = process.communicate()[0]
    if kill_at is None and process.returncode:
        raise RuntimeError(f'{cmd} failed with exit code {process.returncode}')
    return time.perf_counter() - started, seen, stdout


def digest(folder: str) -> str:
    h = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), 'rb') as stream:
            h.update(name.encode() + stream.read())
    return h.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=12000, help='Images (default 12000).')
    parser.add_argument('--at', type=float, default=0.6, help='Fraction of chunks done at the kill.')
    parser.add_argument('--photos', type=int, default=0, help='Crops of this many photos.')
    parser.add_argument('--workdir', default=os.path.join(tempfile.gettempdir(), 'image_tfrecords_bench'))
    args = parser.parse_args()
    name = f'images-{args.n}' + (f'-of-{args.photos}' if args.photos else '')
    workload = make_workload(os.path.join(args.workdir, name), args.n, photos=args.photos)
    tiny = linked_workload(workload, os.path.join(args.workdir, f'{name}-tiny'),
                           every=args.n // 100)
    out = os.path.join(args.workdir, 'resume-out')

    def fresh() -> str:
        shutil.rmtree(out, ignore_errors=True)
        return out

    startup, _, _ = watched(_command(tiny, fresh()), out)
    full, total, _ = watched(_command(workload, fresh()), out)
    reference = digest(out)
    rows = []
    for fraction in (args.at, 1.0):
        before, _, _ = watched(_command(workload, fresh()), out, max(1, round(total * fraction)))
        rerun, _, stdout = watched(_command(workload, out), out)
        reused = int(stdout.split('reused ')[1].split(' of ')[0]) if 'reused ' in stdout else 0
        assert digest(out) == reference, 'the rerun differs from the uninterrupted run'
        rows.append((fraction, before, rerun, reused))
    print(f'{args.n} images, {total} chunks; uninterrupted run {full:.1f} s; a run of ~100 '
          f'images (start-up) {startup:.1f} s')
    print('| killed at | killed after s | rerun s | rerun / uninterrupted | chunks reused |')
    print('| ---: | ---: | ---: | ---: | ---: |')
    for fraction, before, rerun, reused in rows:
        print(f'| {fraction:.0%} | {before:.1f} | {rerun:.1f} | {rerun / full:.2f} | {reused} of {total} |')
    all_reused = rows[-1]
    print(f'Reusing a chunk costs about {(all_reused[2] - startup) / max(1, all_reused[3]) * 1000:.1f} ms '
          f'(rerun with every chunk done, less start-up, per chunk); converting one about '
          f'{(full - startup) / total * 1000:.1f} ms. Every rerun ended byte-identical.')


if __name__ == '__main__':
    main()

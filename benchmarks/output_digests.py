"""The sha256 of every file a conversion writes, to show that a change keeps the output bytes:

    python -m benchmarks.output_digests [--n 1500] > digests.txt

Converts one generated workload (benchmarks/workload.py) with the default flags and again with
--reencode, each into its own output folder, and prints `MODE RELATIVE_PATH SHA256` for every
file there, sorted. Run it on two checkouts (PYTHONPATH=CHECKOUT) and compare the lists.
"""
import argparse
import hashlib
import os
import subprocess
import sys
import tempfile

from benchmarks.workload import make_workload

MODES = {'default': [], 'reencode': ['--reencode']}


def digests(folder: str) -> list[tuple[str, str]]:
    """(path relative to folder, sha256 hex) of every file below folder, sorted."""
    out = []
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, 'rb') as f:
                out.append((os.path.relpath(path, folder), hashlib.sha256(f.read()).hexdigest()))
    return sorted(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=1500)
    parser.add_argument('--workdir', default=os.path.join(tempfile.gettempdir(), 'image_tfrecords_bench'))
    args = parser.parse_args()
    workload = make_workload(os.path.join(args.workdir, f'images-{args.n}'), args.n)
    with tempfile.TemporaryDirectory() as scratch:
        for mode, flags in MODES.items():
            out = os.path.join(scratch, mode)
            subprocess.run([sys.executable, '-m', 'pipeline.run', f'--input_dir={workload}',
                            f'--output_dir={out}', '--direct_num_workers=2', *flags], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for path, digest in digests(out):
                print(mode, path, digest)


if __name__ == '__main__':
    main()

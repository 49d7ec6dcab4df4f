"""Conversion throughput to local disk vs to a Cloud Storage API server (the emulator the tests
use, on 127.0.0.1), from the same images on local disk:

    python -m benchmarks.storage [--n 2000]

The emulator is a single-process Python server, so this measures the converter's Cloud Storage
path end to end (uploads, compose, moves), not Google's service.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

from benchmarks.workload import make_workload
from pipeline.testing import gcs_servers


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, '-m', 'pipeline.run', *argv], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=2000)
    parser.add_argument('--workdir', default=os.path.join(tempfile.gettempdir(), 'image_tfrecords_bench'))
    args = parser.parse_args()
    workload = make_workload(os.path.join(args.workdir, f'images-{args.n}'), args.n)
    ports = gcs_servers.free_port(), gcs_servers.free_port()
    gcs_servers.hermetic_environment(*ports)
    server = gcs_servers.LocalGcs(*ports)
    try:
        local = timed([f'--input_dir={workload}', f'--output_dir={args.workdir}/storage-out', '--overwrite'])
        remote = timed([f'--input_dir={workload}', f'--output_dir=gs://{gcs_servers.BUCKET}/out', '--overwrite'])
    finally:
        server.stop()
    print(f'{args.n} images: local disk {local:.1f} s ({args.n / local:.0f} images/s), '
          f'GCS emulator {remote:.1f} s ({args.n / remote:.0f} images/s): {local / remote:.2f}x')


if __name__ == '__main__':
    main()

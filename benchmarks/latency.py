"""Conversion speed when every Cloud Storage round trip costs what it costs from a worker.

    python -m benchmarks.latency [--n 3000] [--latencies 0,20,50,100] [--workers 1,2]

Uploads the benchmark workload (benchmarks/workload.py) to the Cloud Storage emulator
(pipeline/testing/gcs_servers.py), then converts it gs:// -> gs:// through a proxy that delays every read
request (object reads, metadata gets, lists) by the given latency, and separately one that
delays every write request (uploads, composes, copies, deletes), with 1 and 2 DirectRunner
worker processes (one work item each, as a Dataflow worker runs one per vCPU). Each run is made
at n/4 and n images, so that the fixed start-up and the steady rate can be told apart (as in
benchmark.py). Prints, per run, the wall time at n, the steady images/s, the CPU time the
converter's processes spent per image (the emulator and the proxy, pure Python servers on the
same machine, are not counted), the most object reads the proxy held at once, and the ratio of
the wall time to the run without latency with as many workers.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import psutil

from benchmarks.workload import list_images, make_workload
from pipeline.testing import gcs_servers


def upload_workload(root: str, prefix: str, every: int = 1) -> tuple[str, int]:
    """Uploads every `every`-th image of the workload under gs://BUCKET/prefix (folder layout);
    returns (URI, images)."""
    from google.cloud import storage
    bucket = storage.Client().bucket(gcs_servers.BUCKET)
    images = list_images(root)[::every]

    def put(item):
        split, label, path = item
        bucket.blob(f'{prefix}/{split}/{label}/{os.path.basename(path)}').upload_from_filename(path)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, images))
    return f'gs://{gcs_servers.BUCKET}/{prefix}', len(images)


def convert(emulator_port: int, source: str, output: str, workers: int, read_latency: float,
            write_latency: float, extra: list[str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the converter's processes, max object reads in flight) of
    one conversion through a delaying proxy."""
    proxy = gcs_servers.FlakyProxy(emulator_port, every=0, read_latency=read_latency,
                                   write_latency=write_latency)
    env = dict(os.environ, STORAGE_EMULATOR_HOST=f'http://127.0.0.1:{proxy.port}')
    cpu = {}   # pid -> CPU seconds, last seen
    started = time.perf_counter()
    try:
        with tempfile.TemporaryFile('w+') as log:
            process = psutil.Popen([sys.executable, '-m', 'pipeline.run', f'--input_dir={source}',
                                    f'--output_dir={output}', '--overwrite',
                                    f'--direct_num_workers={workers}',
                                    '--direct_running_mode=multi_processing', *extra],
                                   env=env, stdout=subprocess.DEVNULL, stderr=log)
            while process.poll() is None:
                for member in [process, *process.children(recursive=True)]:
                    try:
                        times = member.cpu_times()
                        cpu[member.pid] = times.user + times.system
                    except psutil.Error:
                        pass
                time.sleep(0.05)
            if process.returncode:
                log.seek(0)
                raise RuntimeError(f'conversion into {output} failed:\n{log.read()[-3000:]}')
        return time.perf_counter() - started, sum(cpu.values()), proxy.max_reads_in_flight
    finally:
        proxy.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=3000, help='Images (default 3000).')
    parser.add_argument('--latencies', default='0,20,50,100', help='Milliseconds per round trip.')
    parser.add_argument('--workers', default='1,2', help='Worker process counts.')
    parser.add_argument('--workdir',
                        default=os.path.join(tempfile.gettempdir(), 'image_tfrecords_bench'))
    parser.add_argument('flags', nargs='*', help='More converter flags, after --.')
    args = parser.parse_args()
    latencies = [int(x) for x in args.latencies.split(',')]
    workers = [int(x) for x in args.workers.split(',')]
    root = make_workload(os.path.join(args.workdir, f'images-{args.n}'), args.n)
    ports = gcs_servers.free_port(), gcs_servers.free_port()
    gcs_servers.hermetic_environment(*ports)
    server = gcs_servers.LocalGcs(*ports)
    try:
        source, n = upload_workload(root, 'raw')
        small, n_small = upload_workload(root, 'small', every=4)
        print(f'{n} images gs:// -> gs:// on the emulator, {os.cpu_count()} cores, flags: '
              f'{" ".join(args.flags) or "defaults"}', flush=True)
        print('| delayed | latency ms | workers | wall s | images/s (steady) | start-up s | '
              'converter CPU ms per image | max reads in flight | wall / no latency |')
        print('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |', flush=True)
        base = {}
        runs = [('reads', ms) for ms in latencies] + [('writes', ms) for ms in latencies if ms]
        for direction, ms in runs:
            for count in workers:
                delay = ms / 1000
                reads, writes = (delay, 0.0) if direction == 'reads' else (0.0, delay)
                out = f'gs://{gcs_servers.BUCKET}/out-{direction}-{ms}-{count}'
                seconds_small, cpu_small, _ = convert(ports[0], small, out + '-small', count, reads,
                                                      writes, args.flags)
                seconds, cpu, in_flight = convert(ports[0], source, out, count, reads, writes,
                                                  args.flags)
                rate = (n - n_small) / (seconds - seconds_small)
                base.setdefault(count, seconds)
                print(f'| {direction} | {ms} | {count} | {seconds:.1f} | {rate:.0f} | '
                      f'{max(0.0, seconds_small - n_small / rate):.1f} | '
                      f'{(cpu - cpu_small) / (n - n_small) * 1000:.2f} | {in_flight} | '
                      f'{seconds / base[count]:.2f} |', flush=True)
    finally:
        server.stop()


if __name__ == '__main__':
    main()

"""The commit of many shards to Cloud Storage when every request costs a round trip.

    python -m benchmarks.commit_latency [--shards 10000] [--latency 0.05]

Stages `--shards` small shard files in a run's temporary folder on the Cloud Storage emulator
(pipeline/testing/gcs_servers.py) with the commit journal a run writes (commit_journal.py), then
times the commit carrying it out (the moves into place, the marker, the cleanup) through a proxy
that delays every request by `--latency` seconds. Prints the time, the operations made, the time
they take one after another at that latency, and the ratio of the two.
"""
import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from pipeline.output import layout, metadata, shard_formats, temp_folder
from pipeline.testing import gcs_servers

RUN_ID = '0123456789abcdef'
COMMIT = '''
import sys, time
from pipeline.output import commit_journal
out = sys.argv[1]
started = time.monotonic()
commit_journal.roll_forward(out, commit_journal.read_journal(out))
print(time.monotonic() - started)
'''


def stage(out: str, shards: int) -> None:
    """A run's temporary folder holding `shards` shard files, its marker and its journal."""
    from google.cloud import storage
    from pipeline.output import commit_journal
    bucket = storage.Client().bucket(gcs_servers.BUCKET)
    temp = layout.temp_dir(out, RUN_ID)
    tfrecord = shard_formats.parse('tfrecord')[0]
    moves = [(f'shards/train-{i:05d}-{i:016x}.tfrecord',
              metadata.shard_name('dataset', 'train', i, shards, tfrecord))
             for i in range(shards)]
    prefix = temp[len(f'gs://{gcs_servers.BUCKET}/'):]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda m: bucket.blob(f'{prefix}/{m[0]}').upload_from_string(b'x'), moves))
    temp_folder.write_marker(temp, RUN_ID, layout.RUNNING)
    commit_journal.write_journal(out, commit_journal.Journal(RUN_ID, 'install', (), tuple(moves)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--shards', type=int, default=10_000)
    parser.add_argument('--latency', type=float, default=0.05)
    args = parser.parse_args()
    ports = gcs_servers.free_port(), gcs_servers.free_port()
    gcs_servers.hermetic_environment(*ports)
    server = gcs_servers.LocalGcs(*ports)
    try:
        out = f'gs://{gcs_servers.BUCKET}/commit-{args.shards}'
        stage(out, args.shards)
        proxy = gcs_servers.FlakyProxy(ports[0], every=0, read_latency=args.latency,
                                       write_latency=args.latency)
        env = dict(os.environ, STORAGE_EMULATOR_HOST=f'http://127.0.0.1:{proxy.port}')
        started = time.monotonic()
        done = subprocess.run([sys.executable, '-c', COMMIT, out], env=env,
                              capture_output=True, text=True)
        if done.returncode:
            sys.exit(done.stderr)
        wall, inside = time.monotonic() - started, float(done.stdout.split()[-1])
        proxy.stop()
        operations = sum(proxy.operations.values())
        one_by_one = operations * args.latency
        print(f'commit of {args.shards:,} shards through {args.latency * 1000:.0f} ms per request '
              f'(emulator, {os.cpu_count()} cores)')
        print('| commit s | process s | operations | one after another s | ratio |')
        print('| ---: | ---: | ---: | ---: | ---: |')
        print(f'| {inside:.1f} | {wall:.1f} | {operations:,} ({dict(proxy.operations)}) | '
              f'{one_by_one:.0f} | 1/{one_by_one / inside:.0f} |')
    finally:
        server.stop()


if __name__ == '__main__':
    main()

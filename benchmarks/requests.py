"""Cloud Storage operations per 1,000 images, for each input kind, counted on the emulator.

    python -m benchmarks.requests [--n 1000]

Uploads n small images to the emulator (pipeline/testing/gcs_servers.py), then converts them gs:// to
gs:// through a proxy that counts every operation it forwards (a batch request counts as the
operations in it): from a folder layout, a CSV, and a config class yielding gs:// paths, each
with automatic sharding and with --num_shards. Prints reads (object reads, metadata gets,
lists) and writes (uploads, composes, copies, deletes) per 1,000 images.
"""
import argparse
import os
import subprocess
import sys
import tempfile

from pipeline.testing import gcs_servers, imagemaker

CONFIG = '''
from pipeline.config import ImageClassificationConfig


class BucketConfig(ImageClassificationConfig):
    num_labels, supported_modes = 10, ['train']

    def __init__(self, n, **kwargs):
        super().__init__(**kwargs)
        self.n = n

    def example_generator(self, mode):
        for i in range(self.n):
            yield {'image_path': f'gs://%s/raw/train/c{i %% 10}/{i}.jpg', 'label': f'c{i %% 10}'}
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=1000)
    args = parser.parse_args()
    n, bucket = args.n, gcs_servers.BUCKET
    ports = gcs_servers.free_port(), gcs_servers.free_port()
    gcs_servers.hermetic_environment(*ports)
    server = gcs_servers.LocalGcs(*ports)
    workdir = tempfile.mkdtemp()
    with open(os.path.join(workdir, 'bucket_config.py'), 'w') as stream:
        stream.write(CONFIG % bucket)
    try:
        images = {f'train/c{i % 10}/{i}.jpg': imagemaker.jpeg(32, 24, seed=i) for i in range(n)}
        source = gcs_servers.upload(images, 'raw')
        gcs_servers.upload({'train.csv': ''.join(f'{source}/{k},{k.split("/")[1]}\n'
                                                 for k in images).encode()}, 'csv')
        inputs = {'folder': [f'--input_dir={source}'],
                  'CSV': [f'--csv_train=gs://{bucket}/csv/train.csv'],
                  'config': ['--config=bucket_config:BucketConfig', f'--config_arg=n={n}']}
        print(f'Cloud Storage operations per 1,000 images ({n} images, gs:// to gs://, emulator)')
        print('| input | sharding | reads | (object reads / metadata gets / lists) | writes | '
              '(uploads / composes / copies / deletes) |')
        print('| --- | --- | ---: | --- | ---: | --- |')
        for kind, flags in inputs.items():
            for sharding in ([], ['--num_shards=2']):
                proxy = gcs_servers.FlakyProxy(ports[0], every=0)
                env = dict(os.environ, STORAGE_EMULATOR_HOST=f'http://127.0.0.1:{proxy.port}',
                           PYTHONPATH=workdir)
                subprocess.run([sys.executable, '-m', 'pipeline.run', *flags, *sharding,
                                f'--output_dir=gs://{bucket}/out-{kind}-{len(sharding)}'],
                               env=env, check=True, capture_output=True)
                proxy.stop()
                per = {k: v * 1000 / n for k, v in proxy.operations.items()}
                reads, writes = ([per.get(k, 0) for k in kinds]
                                 for kinds in (gcs_servers.READS, gcs_servers.WRITES))
                print(f'| {kind} | {"--num_shards=2" if sharding else "automatic"} | '
                      f'{sum(reads):.0f} | {" / ".join(f"{r:.0f}" for r in reads)} | '
                      f'{sum(writes):.0f} | {" / ".join(f"{w:.0f}" for w in writes)} |')
    finally:
        server.stop()


if __name__ == '__main__':
    main()

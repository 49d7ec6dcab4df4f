"""What a user would write instead, each run as its own process by benchmark.py.

    python -m benchmarks.baselines naive_beam INPUT OUTPUT
    python -m benchmarks.baselines pool INPUT OUTPUT [--reencode]
    python -m benchmarks.baselines codec INPUT [--encode | --floor | --hash_floor]
"""
import argparse
import io
import math
import multiprocessing
import os
import sys
import time

import numpy as np
import simplejpeg
import threadpoolctl
from PIL import Image

from benchmarks.workload import list_images

QUALITY = 95  # The converter's default, so all variants store comparable bytes.


def _labelled(root: str) -> list[tuple[str, str, int]]:
    images = list_images(root)
    classes = sorted({label for _, label, _ in images})
    return [(split, path, classes.index(label)) for split, label, path in images]


def _reencode(data: bytes) -> tuple[bytes, int, int]:
    image = Image.open(io.BytesIO(data)).convert('RGB')
    out = io.BytesIO()
    image.save(out, 'JPEG', quality=QUALITY)
    return out.getvalue(), image.height, image.width


def _example(encoded: bytes, height: int, width: int, label: int, path: str) -> bytes:
    import tensorflow as tf

    def b(v): return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))
    def i(v): return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
    return tf.train.Example(features=tf.train.Features(feature={
        'image/encoded': b(encoded), 'image/format': b(b'JPEG'), 'image/height': i(height),
        'image/width': i(width), 'image/channels': i(3), 'image/colorspace': b(b'RGB'),
        'image/class/label': i(label), 'image/filename': b(os.path.basename(path).encode()),
    })).SerializeToString()


def _naive_record(item) -> bytes:
    _, path, label = item
    with open(path, 'rb') as stream:
        encoded, height, width = _reencode(stream.read())
    return _example(encoded, height, width, label, path)


def naive_beam(root: str, output: str, shards: int) -> None:
    """Create(paths) | Reshuffle() | Map(read + decode + re-encode + Example) | WriteToTFRecord."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    items = _labelled(root)
    options = PipelineOptions(direct_num_workers=0, direct_running_mode='multi_processing')
    with beam.Pipeline(options=options) as p:
        for split in sorted({s for s, _, _ in items}):
            (p
             | f'Create {split}' >> beam.Create([i for i in items if i[0] == split])
             | f'Reshuffle {split}' >> beam.Reshuffle()
             | f'Encode {split}' >> beam.Map(_naive_record)
             | f'Write {split}' >> beam.io.WriteToTFRecord(os.path.join(output, split), num_shards=shards))


def _pool_shard(task) -> int:
    path, items, reencode = task
    import tensorflow as tf
    with tf.io.TFRecordWriter(path) as writer:
        for _, source, label in items:
            with open(source, 'rb') as stream:
                data = stream.read()
            image = Image.open(io.BytesIO(data))
            if not reencode and image.format == 'JPEG' and image.mode == 'RGB':
                image.load()  # Full decode, to validate.
                encoded, height, width = data, image.height, image.width
            else:
                encoded, height, width = _reencode(data)
            writer.write(_example(encoded, height, width, label, source))
    return len(items)


def pool(root: str, output: str, reencode: bool) -> None:
    """multiprocessing.Pool over all cores, each process writing whole shards (tfrecord_lib)."""
    items = _labelled(root)
    os.makedirs(output, exist_ok=True)
    tasks = []
    for split in sorted({s for s, _, _ in items}):
        members = [i for i in items if i[0] == split]
        size = sum(os.path.getsize(p) for _, p, _ in members)
        shards = max(2 * os.cpu_count(), math.ceil(size / (128 << 20)))
        tasks += [(os.path.join(output, f'{split}-{k:05d}-of-{shards:05d}'), members[k::shards], reencode)
                  for k in range(shards)]
    with multiprocessing.Pool() as workers:
        workers.map(_pool_shard, tasks, chunksize=1)


def _decode(data: bytes) -> None:
    Image.open(io.BytesIO(data)).load()


def _decode_encode(data: bytes) -> None:
    _reencode(data)


def _validate(data: bytes) -> None:
    """The least a converter must do to accept an image: a strict 1/8-scale decode of a JPEG
    (the one transforms/images.py makes of JPEGs it keeps as they are); Pillow decodes what
    libjpeg-turbo cannot decode to RGB (PNG, CMYK)."""
    try:
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
        simplejpeg.decode_jpeg(data, colorspace='RGB', fastdct=True, fastupsample=True,
                               min_height=max(1, height // 8), min_width=max(1, width // 8))
    except ValueError:
        _decode(data)


def _check_and_hash(data: bytes) -> None:
    """The codec work the converter must do with its checks on: the strict decode at the scale
    the hashes read (pipeline/quality/jpeg_check.py) and the perceptual hashes; Pillow decodes
    what libjpeg-turbo cannot."""
    from pipeline.quality.jpeg_check import check_jpeg
    from pipeline.quality.phash import perceptual_hashes
    try:
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
        verdict = check_jpeg(data, width, height)
    except ValueError:
        verdict = None
    if verdict is not None:
        perceptual_hashes(verdict.pixels)
    else:
        perceptual_hashes(np.asarray(Image.open(io.BytesIO(data)).convert('RGB')))


def _validate_share(paths: list[str], results: multiprocessing.Queue, work) -> None:
    """Reads its files into memory, then does `work` on each: puts (images, seconds working).
    One BLAS thread, as in a converter's worker (the hashes' matrix products)."""
    threadpoolctl.threadpool_limits(1, user_api='blas')
    blobs = []
    for path in paths:
        with open(path, 'rb') as stream:
            blobs.append(stream.read())
    work(blobs[0])
    started = time.perf_counter()
    for data in blobs:
        work(data)
    results.put((len(blobs), time.perf_counter() - started))


def floor(root: str, work=_validate) -> None:
    """A codec floor: one process per core, each doing `work` (by default the strict 1/8-scale
    decode) on its share of the files from memory (nothing crosses processes while timed); the
    sum of their rates."""
    paths = [path for _, _, path in list_images(root)]
    cores, results = os.cpu_count(), multiprocessing.Queue()
    workers = [multiprocessing.Process(target=_validate_share,
                                       args=(paths[i::cores], results, work))
               for i in range(cores)]
    for worker in workers:
        worker.start()
    shares = [results.get() for _ in workers]
    for worker in workers:
        worker.join()
    print(f'images_per_second={sum(n / seconds for n, seconds in shares):.1f}')


def codec(root: str, encode: bool) -> None:
    """All cores doing nothing but Pillow decode (and encode) of the files, from memory."""
    blobs = []
    for _, _, path in list_images(root):
        with open(path, 'rb') as stream:
            blobs.append(stream.read())
    with multiprocessing.Pool() as workers:
        workers.map(_decode, blobs[:os.cpu_count()])  # Warm up the processes.
        started = time.perf_counter()
        workers.map(_decode_encode if encode else _decode, blobs, chunksize=64)
        seconds = time.perf_counter() - started
    print(f'images_per_second={len(blobs) / seconds:.1f}')


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('mode', choices=['naive_beam', 'pool', 'codec'])
    parser.add_argument('input')
    parser.add_argument('output', nargs='?')
    parser.add_argument('--reencode', action='store_true')
    parser.add_argument('--encode', action='store_true')
    parser.add_argument('--floor', action='store_true')
    parser.add_argument('--hash_floor', action='store_true')
    parser.add_argument('--shards', type=int, default=8)
    args = parser.parse_args()
    if args.mode == 'naive_beam':
        naive_beam(args.input, args.output, args.shards)
    elif args.mode == 'pool':
        pool(args.input, args.output, args.reencode)
    elif args.floor:
        floor(args.input)
    elif args.hash_floor:
        floor(args.input, _check_and_hash)
    else:
        codec(args.input, args.encode)


if __name__ == '__main__':
    sys.exit(main())

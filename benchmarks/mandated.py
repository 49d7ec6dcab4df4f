"""The mandated-work floor: all cores doing, per image, what the converter must do and nothing else.

    python -m benchmarks.mandated INPUT [CONVERTER FLAGS ...]   # e.g. --leakage=off, --reencode

One process per core, each on its share of INPUT's images (every cores-th of the sorted list),
read into memory before timing. From a common start, each does per image what a converter's
worker does with an image once it holds its bytes, by calling the converter's own code:

- `EncodeChunks._record` (transforms/encode_chunks.py, set up as a worker sets it up), the
  record of one image: `convert_image` (transforms/images.py, once for all the exact copies of
  a JPEG kept as it is that the process meets, transforms/kept_copies.py: the JPEG header; the
  strict libjpeg-turbo verdict, decoded at the scale the perceptual hashes read, 1/8 with
  --leakage=off; the perceptual hashes of the image and of its mirror image, none with
  --leakage=off; the full decode and JPEG encode of what is not stored as it is: grey, CMYK,
  PNG, and every image with --reencode); the SHA-256 of the stored bytes (`image/key/sha256`);
  the `tf.train.Example` with the features a run writes (`records.encode_example`);
- `records.frame_record`: TFRecord framing, length and data each with a masked CRC32C;
- `records.content_mark`: the record's SHA-256 (its shard's `shard_content`);
- the framed record written to a file (`fileio.writing`), as a part file is.

Left out, as not per-image work or not mandated: reading the files, Beam, listing and planning,
the sort into shards, filing digests for the count of exact copies and the leakage check, the
pairing, sidecars, joins and commit. The settings are those the command line resolves from the
same flags (pipeline/launch.py), so a mode is the floor of the command given those flags.
Prints images_per_second: all images / (the last process's end - the common start).
"""
import argparse
import multiprocessing
import os
import queue
import tempfile
import time
from typing import Sequence

from benchmarks.workload import list_images
from pipeline import launch
from pipeline.base.choices import LeakageAction
from pipeline.base.refs import ExampleRef
from pipeline.base.settings import ConversionSettings
from pipeline.io import fileio
from pipeline.output import records
from transforms.encode_chunks import EncodeChunks
from transforms.labels import LabelMap

if not callable(getattr(EncodeChunks, '_record', None)):
    raise ImportError('transforms/encode_chunks.py no longer has EncodeChunks._record, the record '
                      'of one image that this floor calls; point benchmarks/mandated.py at what '
                      'replaced it')


def settings_of(flags: Sequence[str]) -> ConversionSettings:
    """The settings a run given these converter flags converts images with."""
    converter = launch.resolve(list(flags)).converter
    return ConversionSettings('mandated', ('train', 'validation', 'test'),
                              image=converter.image_options(),
                              leakage=LeakageAction(converter.leakage))


def _convert_share(share: list[tuple[str, str, str]], label_map: LabelMap, flags: Sequence[str],
                   out_path: str, start: multiprocessing.Barrier,
                   results: multiprocessing.Queue) -> None:
    """Reads its share into memory, waits for the others, converts it: puts (images, start,
    end), or the error that stopped it."""
    try:
        encoder = EncodeChunks(settings_of(flags))
        encoder.setup()   # Its converter; BLAS on one thread.
        refs = []
        for split, label, path in share:
            with open(path, 'rb') as stream:
                data = stream.read()
            refs.append(ExampleRef(split, path, path, os.path.basename(path), label, len(data),
                                   data=data))
        encoder._record(refs[0], None, label_map)   # Codecs and caches warm, as in a run.
        start.wait()
        started = time.perf_counter()
        with fileio.writing(out_path) as out:
            for ref in refs:
                record, _, _ = encoder._record(ref, None, label_map)
                out.write(records.frame_record(record))
                records.content_mark(record)
        results.put((len(refs), started, time.perf_counter()))
        encoder.teardown()
    except BaseException as exc:
        start.abort()
        results.put(f'{type(exc).__name__}: {exc}')


def mandated_rate(root: str, flags: Sequence[str] = ()) -> float:
    """Images per second of all cores doing the mandated work on the images under `root`."""
    images = list_images(root)
    names = sorted({label for _, label, _ in images})
    label_map = LabelMap(tuple(names), tuple((name, i) for i, name in enumerate(names)))
    cores = os.cpu_count()
    start, results = multiprocessing.Barrier(cores), multiprocessing.Queue()
    with tempfile.TemporaryDirectory(prefix='mandated-') as folder:
        workers = [multiprocessing.Process(
            target=_convert_share, args=(images[i::cores], label_map, flags,
                                         os.path.join(folder, f'part-{i}'), start, results))
            for i in range(cores)]
        for worker in workers:
            worker.start()
        shares = []
        while len(shares) < len(workers):
            try:
                shares.append(results.get(timeout=1))
            except queue.Empty:
                if any(w.exitcode not in (None, 0) for w in workers) and results.empty():
                    raise RuntimeError('a process of the mandated work died') from None
        for worker in workers:
            worker.join()
    failed = [share for share in shares if isinstance(share, str)]
    if failed:
        raise RuntimeError(f'the mandated work failed: {failed[0]}')
    return (sum(n for n, _, _ in shares)
            / (max(end for _, _, end in shares) - min(begun for _, begun, _ in shares)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('input', help='A workload folder: INPUT/<split>/<class>/<image>.')
    args, flags = parser.parse_known_args()
    print(f'images_per_second={mandated_rate(args.input, flags):.1f}')


if __name__ == '__main__':
    main()

"""What reading back the temporary folder as data costs, in one process, against baselines
measured in the same run:

- a listed input's ref encoded and decoded (pipeline/inputs/ref_codec.py, what listing spills
  and tasks read back) against the pickle listing spilled before, for refs of ImageNet's shape
  (a class folder's JPEG), of an archive member and of a config's in-memory image;
- a finished part checked before a rerun reuses it (its records read back as TFRecord and their
  SHA-256s compared with its sidecar's, transforms/resume.py) against converting its images
  (KeptCopies, what a chunk's conversion does to each image).

    python -m benchmarks.untrusted_work [--refs 100000] [--images 200] [--side 500]
"""
import argparse
import os
import pickle
import tempfile
import time

from pipeline.base.refs import ExampleRef
from pipeline.base.settings import ImageOptions
from pipeline.inputs import ref_codec
from pipeline.inputs.archive_base import Archive, Member
from pipeline.output import records
from pipeline.testing import imagemaker
from transforms import resume
from transforms.kept_copies import KeptCopies
from transforms.shard_results import ShardResult

_ARCHIVE = Archive('/data/train/n01440764.tar', '/data/train/n01440764.tar', 150_000_000,
                   1.7e9, 0, 150_000_000)
REFS = {
    'folder': ExampleRef('train', 'n01440764/n01440764_10026.JPEG',
                         '/data/imagenet/train/n01440764/n01440764_10026.JPEG',
                         'n01440764_10026.JPEG', 'n01440764', 13697, mtime=1700000000.123),
    'member': ExampleRef('train', 'n01440764.tar/n01440764_10026.JPEG',
                         '/data/train/n01440764.tar/n01440764_10026.JPEG',
                         'n01440764_10026.JPEG', 'n01440764', 13697, mtime=1.7e9,
                         member=Member(_ARCHIVE, 'n01440764_10026.JPEG', 1536, 13697)),
    'in memory': ExampleRef('train', 'a.jpg#00ff', '', 'a.jpg', 'cat', 20_000,
                            b'\xff' * 20_000, (('caption', 'a cat'),)),
}


def _per_call(function, value, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        function(value)
    return (time.perf_counter() - started) / n


def ref_costs(n: int) -> None:
    for name, ref in REFS.items():
        pickled = pickle.dumps(ref, pickle.HIGHEST_PROTOCOL)
        encoded = ref_codec.encode(ref)
        before = (_per_call(lambda r: pickle.dumps(r, pickle.HIGHEST_PROTOCOL), ref, n)
                  + _per_call(pickle.loads, pickled, n))
        now = _per_call(ref_codec.encode, ref, n) + _per_call(ref_codec.decode, encoded, n)
        print(f'ref ({name}): encode+decode {now * 1e6:.2f} us, pickle {before * 1e6:.2f} us: '
              f'{now / before:.2f}x; {len(encoded)} bytes, pickle {len(pickled)}')


def part_check_cost(images: int, side: int) -> None:
    converter = KeptCopies(ImageOptions(), hashed=True)
    inputs = [imagemaker.jpeg(side, side * 3 // 4, seed=i) for i in range(images)]
    started = time.perf_counter()
    converted = [records.encode_example({'image/encoded': converter.convert(data)[0].encoded})
                 for data in inputs]
    converting = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, 'part.tfrecord')
        framed = b''.join(records.frame_record(r) for r in converted)
        with open(path, 'wb') as out:
            out.write(framed)
        result = ShardResult('train', 0, path, 0, records=len(converted), bytes=len(framed),
                             marks=''.join(records.content_mark(r) for r in converted))
        started = time.perf_counter()
        assert resume._changed_part(path, result) is not None   # No entry files: named.
        checking = time.perf_counter() - started
    print(f'part of {images} images of {side} px ({len(framed) / 1e6:.1f} MB): checked in '
          f'{checking * 1e3:.1f} ms, converted in {converting * 1e3:.0f} ms: '
          f'{checking / converting:.3f} of converting it')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--refs', type=int, default=100_000)
    parser.add_argument('--images', type=int, default=200)
    parser.add_argument('--side', type=int, default=500)
    args = parser.parse_args()
    ref_costs(args.refs)
    part_check_cost(args.images, args.side)


if __name__ == '__main__':
    main()

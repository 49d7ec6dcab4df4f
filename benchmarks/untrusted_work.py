"""What reading back the temporary folder as data costs, in one process, against baselines
measured in the same run:

- a listed input's ref encoded and decoded (pipeline/inputs/ref_codec.py, what listing spills
  and tasks read back) against the pickle listing spilled before, for refs of ImageNet's shape
  (a class folder's JPEG), of an archive member and of a config's in-memory image;
- a finished part checked before a rerun reuses it (its records read back as TFRecord and their
  SHA-256s compared with its sidecar's, transforms/resume.py) against converting its images
  (KeptCopies, what a chunk's conversion does to each image);
- sorted runs written and read back with their blocks' digests (pipeline/io/sorted_runs.py)
  against the same without them (their time less the digests'), for listed refs (read back
  decoded, as a task does) and for filed rows (16 bytes, what the count of exact copies
  files), and their descriptions' bytes per record with and without the digests (what the
  runner carries, pickled).

    python -m benchmarks.untrusted_work [--refs 100000] [--images 200] [--side 500]
                                        [--records 200000]
"""
import argparse
import dataclasses
import os
import pickle
import tempfile
import time

import numpy as np

from pipeline.base.refs import ExampleRef
from pipeline.base.settings import ImageOptions
from pipeline.inputs import ref_codec
from pipeline.inputs.archive_base import Archive, Member
from pipeline.io import sorted_runs
from pipeline.output import records
from pipeline.testing import imagemaker
from transforms import copies, listing, resume
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


def _bytes_of(path: str) -> bytes:
    with open(path, 'rb') as stream:
        return stream.read()


def _digests_alone(runs: list) -> float:
    """Seconds to digest every block of `runs` once (what writing, and reading, adds)."""
    files = {run.path: memoryview(_bytes_of(run.path)) for run in runs}
    started = time.perf_counter()
    for run in runs:
        data = files[run.path]
        for section in run.sections.values():
            for block in range(len(section.offsets)):
                sorted_runs._digest(run.key, data[int(section.offsets[block]):
                                                  section.block_end(block)])
    return time.perf_counter() - started


def _description_bytes(runs: list) -> tuple[int, int]:
    """Pickled bytes of the runs' descriptions, with their digests and without."""
    bare = [dataclasses.replace(run, key=b'', sections={
        name: dataclasses.replace(section, digests=b'') for name, section in run.sections.items()})
        for run in runs]
    return (len(pickle.dumps(runs, pickle.HIGHEST_PROTOCOL)),
            len(pickle.dumps(bare, pickle.HIGHEST_PROTOCOL)))


def run_costs(n: int) -> None:
    refs = [dataclasses.replace(REFS['folder'], key=f'n01440764/{i}.JPEG') for i in range(n)]
    refs = [(ref.key_hash, ref_codec.encode(ref)) for ref in refs]
    rng = np.random.default_rng(0)
    rows = np.zeros(n, dtype=copies.COPY)
    rows['sha'], rows['id'] = rng.integers(0, 1 << 63, n), np.arange(n)
    with tempfile.TemporaryDirectory() as folder:
        for name, add, read in [
                ('listed refs', lambda w: [w.add('train', *ref) for ref in refs],
                 lambda runs: sum(1 for _ in listing.refs_of(runs, 'train', 0, 1 << 64))),
                ('filed rows', lambda w: w.add_rows('copies', rows['sha'], rows),
                 lambda runs: len(sorted_runs.read_rows(runs, 'copies', 0, 1 << 64,
                                                        copies.COPY)))]:
            writer = sorted_runs.RunWriter(os.path.join(folder, name.replace(' ', '-')))
            started = time.perf_counter()
            add(writer)
            runs = writer.close()
            writing = time.perf_counter() - started
            started = time.perf_counter()
            assert read(runs) == n
            reading = time.perf_counter() - started
            digesting = _digests_alone(runs)
            now, bare = _description_bytes(runs)
            print(f'runs of {n} {name}: written in {writing:.2f} s, read in {reading:.2f} s; '
                  f'without digests {writing - digesting:.2f} s and {reading - digesting:.2f} s: '
                  f'{writing / (writing - digesting):.3f}x and '
                  f'{reading / (reading - digesting):.3f}x; description {now / n:.3f} bytes '
                  f'per record, {bare / n:.3f} without digests')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--refs', type=int, default=100_000)
    parser.add_argument('--images', type=int, default=200)
    parser.add_argument('--side', type=int, default=500)
    parser.add_argument('--records', type=int, default=200_000)
    args = parser.parse_args()
    ref_costs(args.refs)
    part_check_cost(args.images, args.side)
    run_costs(args.records)


if __name__ == '__main__':
    main()

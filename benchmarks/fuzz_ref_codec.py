"""Fuzzes the bytes of a listed input's ref as listing spills it (pipeline/inputs/ref_codec.py),
which anyone who can write the output folder can change while a run is on: every payload
decodes into an ExampleRef of exactly the types it may hold (its member an archive Member of a
known kind, its group a RowGroupRead, its extras plain values), which encodes to a payload that
decodes to the same again, or is one SpillError; nothing else is raised and nothing is made.

    python -m benchmarks.fuzz_ref_codec --seconds 300 [--seed 1]
"""
import pickle
import random

from benchmarks import fuzzing
from pipeline.base.refs import ExampleRef
from pipeline.inputs import ref_codec
from pipeline.inputs.archive_base import Archive, Member
from pipeline.inputs.gzip_pass import StreamedMember
from pipeline.inputs.parquet_image_paths import ImageRoot
from pipeline.inputs.parquet_row_groups import RowGroupRead
from pipeline.inputs.zip_index import ZipMember

_ARCHIVE = Archive('/data/train/cat.zip', '/data/train/cat.zip', 10_000, 1.7e9, 0, 10_000)
SEEDS = [ref_codec.encode(ref) for ref in (
    ExampleRef('train', 'cat/1.jpg', '/data/train/cat/1.jpg', '1.jpg', 'cat', 1234, mtime=1.7e9),
    ExampleRef('test', 'a#00ff', '', 'a.png', 7, 5, b'\x89PNG\r',
               (('caption', 'a cat'), ('ids', (1, 2, 3)), ('raw', b'\0\1'), ('w', 0.5))),
    ExampleRef('train', 'cat.zip/x.jpg', '/data/train/cat.zip/x.jpg', 'x.jpg', 'cat', 9,
               member=ZipMember(_ARCHIVE, 'x.jpg', 30, 9, method=8, stored_size=7, crc=1,
                                name_length=5, end=80)),
    ExampleRef('train', 'b/@512', '', 'b', None, problem='damaged tar', ignored=True,
               member=StreamedMember(_ARCHIVE, 'in.tar/@512', 512, 0, error='cut', index=4,
                                     cut=True, within=(1,))),
    ExampleRef('train', 'k', '/d/t.tar/k', 'k', 'dog', 3, member=Member(_ARCHIVE, 'k', 1536, 3)),
    ExampleRef('train', 'p.parquet:row 0', '/d/p.parquet:row 0', 'p', 'cat', 10,
               group=RowGroupRead('/d/p.parquet', 99, None, 0, 1, 0, 'image.bytes', None,
                                  1 << 20, ImageRoot('/d', True))),
)]
TOKENS = [b'null', b'[', b']', b',', b'"', b'{}', b'-1', b'1e999', b'true', b'"\\ud800"',
          b'[[[[', b'NaN', b'\xff', b'\0\0\0\0', b'\xff\xff\xff\xff', b'9' * 30, b',0' * 1000,
          pickle.dumps(ExampleRef('train', 'k', '', 'k', None))]


def make(rng: random.Random) -> bytes:
    return fuzzing.mutated(rng, rng.choice(SEEDS), TOKENS)


def check(data: bytes) -> None:
    try:
        ref = ref_codec.decode(data)
    except ref_codec.SpillError:
        return
    assert type(ref) is ExampleRef
    assert ref.member is None or type(ref.member) in (Member, ZipMember, StreamedMember)
    assert ref.member is None or type(ref.member.archive) is Archive
    assert ref.group is None or type(ref.group) is RowGroupRead
    assert all(type(name) is str and type(value) in (str, bytes, int, float, tuple)
               for name, value in ref.extras)
    again = ref_codec.encode(ref)   # Compared as bytes: a float may be NaN.
    assert ref_codec.encode(ref_codec.decode(again)) == again


def fuzz(seconds: float, seed: int) -> int:
    return fuzzing.run(make, check, seconds, seed)


if __name__ == '__main__':
    fuzzing.main(fuzz, 'a spilled ref')

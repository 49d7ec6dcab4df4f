"""Fuzzes WebDataset shards (pipeline/inputs/webdataset_shards.py): member names, .cls, .json
and .txt labels, how members group into samples, and the tar's own bytes. Every ref a shard
lists is ignored, a reported input (a problem) or a sample with an image member and a label
that labels.txt can hold (an id below MAX_LABEL_ID, or a one-line name); listing never raises.

    python -m benchmarks.fuzz_webdataset --seconds 300 [--seed 1]
"""
import io
import random
import tarfile
import tempfile
import unicodedata

from benchmarks import fuzzing
from pipeline.inputs.archives import Archive
from pipeline.inputs.webdataset_shards import Shard
from pipeline.base.settings import MAX_LABEL_ID

NAMES = [b'n01_7', b'a/b/n02.seg', b'.hidden', b'__meta__', b'x.y/z', b'caf\xe9', b'k/']
EXTENSIONS = [b'.jpg', b'.png', b'.cls', b'.json', b'.txt', b'.JPEG', b'.seg.png', b'', b'.']
LABELS = {b'.cls': [b'7', b' 0012 ', b'1000000'], b'.txt': [b'cat', b'dog\n'],
          b'.json': [b'{"label": 3}', b'{"label": "cat"}', b'{"label": [1]}', b'[]']}
TOKENS = [b'/', b'.', b'\n', b'\0', b'9', b'[', b'{', b'"', b'\\', b'\xff', b'__', b'{"a":',
          b'-1', b'\x1b', b'\xe2\x80\xa8']


def make(rng: random.Random) -> bytes:
    """A shard of a few samples, its names and labels mutated, sometimes its bytes too; now
    and then a name of many folders or a sample of many members."""
    if rng.random() < 0.005:
        return _tar([(b'k.%d.x' % i, b'') for i in range(rng.choice((100, 20_000)))])
    members = []
    for _ in range(rng.randint(1, 6)):
        key = fuzzing.mutated(rng, rng.choice(NAMES), TOKENS, steps=1) if rng.random() < 0.3 \
            else rng.choice(NAMES)
        if rng.random() < 0.02:
            key = b'a/' * rng.choice((10, 1000, 200_000)) + key
        for extension in rng.sample(EXTENSIONS, rng.randint(1, 3)):
            data = rng.choice(LABELS.get(extension, [b'\xff\xd8\xff image']))
            if rng.random() < 0.4:
                data = fuzzing.mutated(rng, data, TOKENS)
            members.append((key + extension, data))
    rng.shuffle(members) if rng.random() < 0.2 else None
    shard = _tar(members)
    return fuzzing.mutated(rng, shard, TOKENS, steps=2) if rng.random() < 0.2 else shard


def _tar(members: list[tuple[bytes, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode='w', format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name.decode('utf-8', 'surrogateescape'))
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def check(shard: bytes) -> None:
    with tempfile.NamedTemporaryFile(suffix='.tar') as file:
        file.write(shard)
        file.flush()
        archive = Archive.of_file(file.name, len(shard), 0.0)
        for ref in Shard('train', archive).examples():
            if ref.ignored or ref.problem is not None:
                assert ref.problem is None or isinstance(ref.problem, str)
                continue
            assert ref.member is not None and ref.source, ref
            if isinstance(ref.label, int):
                assert 0 <= ref.label < MAX_LABEL_ID, ref.label
            else:
                assert isinstance(ref.label, str) and ref.label.strip() == ref.label != '', ref
                assert not any(unicodedata.category(c) in ('Cc', 'Zl', 'Zp') for c in ref.label)


def fuzz(seconds: float, seed: int) -> int:
    return fuzzing.run(make, check, seconds, seed)


if __name__ == '__main__':
    fuzzing.main(fuzz, 'WebDataset shards')

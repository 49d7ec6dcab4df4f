"""Damaged JPEGs (bytes overwritten in the scan, zeroed halves, truncations) are found with
strict libjpeg-turbo and skipped, kept or re-encoded as --damaged_images says; bytes after the
end of the image are harmless. Through the command line, as a user runs it."""
import io
import json
import os
import random

import numpy as np
import pytest
import simplejpeg
from PIL import Image

from pipeline.output import records
from pipeline.tools.verify import verify
from pipeline.testing import imagemaker
from tests.helpers import cli, pixels, read_split, write_tree

pytestmark = pytest.mark.slow


def _jpeg(seed: int) -> bytes:
    return imagemaker.encode(Image.fromarray(imagemaker.photo(192, 144, seed)), 'JPEG',
                             quality=90)


def _overwritten(data: bytes, rng: random.Random) -> bytes:
    scan = data.rindex(b'\xff\xda') + 20
    at = rng.randrange(scan, len(data) - 10)
    return data[:at] + rng.randbytes(8) + data[at + 8:]


DAMAGE = {
    'overwritten': _overwritten,
    'zeroed': lambda data, rng: data[:len(data) // 2] + bytes(len(data) - len(data) // 2),
    'truncated': lambda data, rng: data[:int(len(data) * rng.uniform(0.3, 0.9))],
    'trailing': lambda data, rng: data + rng.randbytes(rng.randrange(1, 500)),
}


def _strict_libjpeg_rejects(data: bytes) -> bool:
    try:
        simplejpeg.decode_jpeg(data, colorspace='RGB', strict=True)
        return False
    except ValueError:
        return True


@pytest.fixture(scope='module')
def planted(tmp_path_factory):
    """A folder dataset: 30 clean photos and 8 planted files of each kind of damage."""
    rng = random.Random(7)
    files = {f'train/c{i % 3}/clean{i}.jpg': _jpeg(i) for i in range(30)}
    files.update({f'test/c{i % 3}/clean{i}.jpg': _jpeg(100 + i) for i in range(6)})
    for kind, damage in DAMAGE.items():
        for i in range(8):
            files[f'train/c{i % 3}/{kind}{i}.jpg'] = damage(_jpeg(1000 + 10 * i + len(kind)), rng)
    root = write_tree(tmp_path_factory.mktemp('in'), files)
    rejected = {path for path, data in files.items() if _strict_libjpeg_rejects(data)}
    return root, files, rejected


def _convert(root: str, out: str, *flags: str):
    return cli(f'--input_dir={root}', f'--output_dir={out}', '--num_shards=2', *flags)


def _lines(path: str) -> list[dict]:
    return [json.loads(line) for line in open(path)]


def test_every_file_strict_libjpeg_rejects_is_skipped_with_its_reason(planted, tmp_path):
    root, files, rejected = planted
    kinds = {k: sum(1 for p in rejected if os.path.basename(p).startswith(k)) for k in DAMAGE}
    assert kinds['zeroed'] == kinds['truncated'] == 8 and kinds['trailing'] == 0
    assert kinds['overwritten'] >= 5   # A few overwritten bytes can happen to decode cleanly.

    refused = _convert(root, f'{tmp_path}/strict')   # Default --max_error_ratio 0.01.
    assert refused.returncode == 2
    assert f'{len(rejected)} of {len(files) - 6} inputs of split \'train\'' in refused.stderr

    result = _convert(root, f'{tmp_path}/out', '--max_error_ratio=0.5')
    assert result.returncode == 0, result.stderr
    out = f'{tmp_path}/out'
    errors = {os.path.relpath(e['source'], root): e['reason']
              for e in _lines(f'{out}/errors-train.jsonl')}
    assert set(errors) == rejected
    for path, reason in errors.items():
        assert reason.startswith('damaged JPEG: ') and ('Corrupt JPEG data' in reason
                                                        or 'Premature end' in reason
                                                        or 'Huffman' in reason), reason
    damaged = _lines(f'{out}/damaged-train.jsonl')
    assert {os.path.relpath(e['source'], root) for e in damaged} == rejected
    assert {e['action'] for e in damaged} == {'skip'}
    summary = json.load(open(f'{out}/summary.json'))
    assert summary['splits']['train']['damaged'] == summary['splits']['train']['skipped'] == len(rejected)
    assert summary['splits']['test']['damaged'] == 0
    table = result.stdout.splitlines()
    assert f'damaged JPEGs (strict libjpeg-turbo): {len(rejected)}, skipped (train {len(rejected)}; '\
           'see damaged-SPLIT.jsonl)' in table
    stored = {os.path.relpath(r[records.SOURCE], root): r for r in read_split(out, 'train')}
    for i in range(8):   # Harmless trailing bytes: stored as they are.
        assert stored[f'train/c{i % 3}/trailing{i}.jpg'][records.ENCODED] == \
            files[f'train/c{i % 3}/trailing{i}.jpg']
    assert verify(out, processes=1) == []


def test_keep_stores_damaged_files_as_they_are_and_lists_them(planted, tmp_path, capsys):
    root, files, rejected = planted
    out = f'{tmp_path}/out'
    result = _convert(root, out, '--damaged_images=keep')
    assert result.returncode == 0, result.stderr
    stored = {os.path.relpath(r[records.SOURCE], root): r[records.ENCODED]
              for r in read_split(out, 'train')}
    assert len(stored) == len(files) - 6
    assert all(stored[path] == files[path] for path in rejected)
    damaged = _lines(f'{out}/damaged-train.jsonl')
    assert {os.path.relpath(e['source'], root): e['action'] for e in damaged} == {
        path: 'keep' for path in rejected}
    assert _lines(f'{out}/errors-train.jsonl') == []
    assert verify(out, processes=1) == []   # A finding verify counts, as summary.json does.
    assert (f'damaged JPEGs kept (--damaged_images=keep): {len(rejected)} (train '
            f'{len(rejected)}); see damaged-SPLIT.jsonl') in capsys.readouterr().out


@pytest.mark.parametrize('flags', [['--damaged_images=reencode'],
                                   ['--reencode', '--damaged_images=keep']])
def test_reencode_stores_what_pillow_decodes_and_verify_finds_it_sound(planted, tmp_path, flags):
    """--reencode keeps no bytes as they are: with it, keep re-encodes a damaged JPEG too (it
    said keep and stored it re-encoded, and verify then missed the damaged records)."""
    root, files, rejected = planted
    out = f'{tmp_path}/out'
    result = _convert(root, out, *flags)
    assert result.returncode == 0, result.stderr
    stored = {os.path.relpath(r[records.SOURCE], root): r for r in read_split(out, 'train')}
    for path in rejected:   # Pillow's decode; libjpeg-turbo's lenient one where Pillow gives up.
        assert stored[path][records.ENCODED] != files[path]
        try:
            expected = np.asarray(Image.open(io.BytesIO(files[path])).convert('RGB'))
        except OSError:
            expected = simplejpeg.decode_jpeg(files[path], colorspace='RGB', strict=False)
        assert np.abs(pixels(stored[path]).astype(int) - expected.astype(int)).mean() < 2, path
    assert {e['action'] for e in _lines(f'{out}/damaged-train.jsonl')} == {'reencode'}
    assert verify(out, processes=1) == []


def test_without_the_hashes_each_jpeg_gets_the_same_verdict_and_reason(planted, tmp_path,
                                                                      capsys):
    """--leakage=off judges a JPEG from a 1/8-scale decode rather than the one the hashes read:
    the same files are found damaged, for libjpeg's same reasons, and verify (which judges at
    1/8 scale) counts each of them."""
    root, files, rejected = planted
    found = {}
    for name, flags in (('default', ()), ('off', ('--leakage=off',))):
        out = f'{tmp_path}/{name}'
        result = _convert(root, out, '--damaged_images=keep', *flags)
        assert result.returncode == 0, result.stderr
        found[name] = sorted((os.path.relpath(e['source'], root), e['reason'])
                             for e in _lines(f'{out}/damaged-train.jsonl'))
        assert verify(out, processes=1) == []
        assert (f'damaged JPEGs kept (--damaged_images=keep): {len(rejected)} (train '
                f'{len(rejected)}); see damaged-SPLIT.jsonl') in capsys.readouterr().out
    assert {path for path, _ in found['off']} == rejected
    assert found['off'] == found['default']

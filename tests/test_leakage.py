"""Near-duplicates across splits: copies of training images planted in the test split (resized
and re-encoded at quality 60-90, brightened or darkened by 20%, greyscale, mirrored, enlarged
three times as a PNG, exact) among distinct photo-like images are found, listed in
leakage.jsonl, counted, and reported, dropped or refused as --leakage says. Through the command
line, as a user runs it."""
import glob
import io
import json
import os
import random
import re
import subprocess
import sys

import pytest
from PIL import Image, ImageEnhance

from pipeline.output import records
from pipeline.errors import DatasetError
from pipeline.base.splits import SPLITS
from pipeline.tools.verify import verify
from pipeline.testing import imagemaker
from tests.helpers import IN_PROCESS, cli, convert, read_split, run_cli, write_tree
from transforms import leakage

pytestmark = pytest.mark.slow

COPIES = {
    'resized': lambda im, rng: _jpeg(im.resize((int(im.width * rng.uniform(0.4, 0.9)),
                                                int(im.height * rng.uniform(0.4, 0.9))),
                                               Image.Resampling.BICUBIC), rng.randint(60, 90)),
    'brighter': lambda im, rng: _jpeg(ImageEnhance.Brightness(im).enhance(1.2), 85),
    'darker': lambda im, rng: _jpeg(ImageEnhance.Brightness(im).enhance(0.8), 85),
    'greyscale': lambda im, rng: _jpeg(im.convert('L'), 85),
    'mirrored': lambda im, rng: _jpeg(im.transpose(Image.Transpose.FLIP_LEFT_RIGHT), 85),
    'enlarged': lambda im, rng: imagemaker.encode(
        im.resize((im.width * 3, im.height * 3), Image.Resampling.BICUBIC), 'PNG'),
    'exact': None,
}
PER_KIND = 20


def _jpeg(image: Image.Image, quality: int = 90) -> bytes:
    out = io.BytesIO()
    image.save(out, 'JPEG', quality=quality)
    return out.getvalue()


@pytest.fixture(scope='module')
def planted(tmp_path_factory):
    """400 distinct photos (200 train, 100 validation, 100 test), 20 copies of train photos of
    each kind in test, and two blank images in train and validation."""
    rng = random.Random(3)
    size = lambda: (rng.randint(160, 320), rng.randint(120, 240))   # noqa: E731
    photos = [Image.fromarray(imagemaker.photo(*size(), seed=i)) for i in range(400)]
    files = {f'train/c{i % 4}/p{i}.jpg': _jpeg(photos[i]) for i in range(200)}
    files.update({f'validation/c{i % 4}/p{i}.jpg': _jpeg(photos[i]) for i in range(200, 300)})
    files.update({f'test/c{i % 4}/p{i}.jpg': _jpeg(photos[i]) for i in range(300, 400)})
    expected = {}
    for k, (kind, copy) in enumerate(COPIES.items()):
        for n in range(PER_KIND):
            i = k * PER_KIND + n
            name = f'test/c{i % 4}/{kind}{n}.{"png" if kind == "enlarged" else "jpg"}'
            files[name] = copy(photos[i], rng) if copy else files[f'train/c{i % 4}/p{i}.jpg']
            expected[name] = (f'train/c{i % 4}/p{i}.jpg', kind)
    for split in ('train', 'validation'):
        files[f'{split}/c0/blank.png'] = imagemaker.encode(Image.new('RGB', (64, 48), 'white'), 'PNG')
    return write_tree(tmp_path_factory.mktemp('in'), files), files, expected


def _convert(root: str, out: str, *flags: str, kill_at: str | None = None):
    return run_cli(f'--input_dir={root}', f'--output_dir={out}', '--num_shards=2', *IN_PROCESS,
                   *flags, kill_at=kill_at)


def _clusters(root: str, out: str) -> list[dict]:
    """The lines of leakage.jsonl, sources relative to `root`."""
    found = [json.loads(line) for line in open(f'{out}/leakage.jsonl')]
    for cluster in found:
        cluster['members'] = {split: [os.path.relpath(s, root) for s in sources]
                              for split, sources in cluster['members'].items()}
        for side in ('source_a', 'source_b'):
            cluster['closest'][side] = os.path.relpath(cluster['closest'][side], root)
    return found


def _found(found: list[dict], expected: dict) -> dict:
    """Planted copy -> the cluster that holds it with its original."""
    return {copy: c for c in found for copy in c['members'].get('test', ())
            if copy in expected and expected[copy][0] in c['members'].get('train', ())}


@pytest.mark.parametrize('flags', [[], ['--reencode']], ids=['kept', 'reencoded'])
def test_planted_copies_are_found_and_distinct_images_are_not_clustered(planted, tmp_path, flags):
    """Re-encoded, a JPEG's hashes come from its one full decode, not from the verdict's."""
    root, files, expected = planted
    out = f'{tmp_path}/out'
    result = _convert(root, out, *flags)
    assert result.returncode == 0, result.stderr
    found = _clusters(root, out)
    held = _found(found, expected)
    for kind in COPIES:   # Recall >= 0.95 for every kind of copy.
        planted_kind = [name for name, (_, k) in expected.items() if k == kind]
        hits = [n for n in planted_kind if n in held]
        assert len(hits) >= 0.95 * PER_KIND, (kind, sorted(set(planted_kind) - set(hits)))
    false = [c for c in found if c['images'] != 2 or set(c['members']) != {'train', 'test'}
             or c['members']['test'][0] not in expected]
    assert len(false) <= 0.001 * 400, false   # None among the 400 distinct photos.
    assert all(held[n]['closest']['mirrored'] for n in held if 'mirrored' in n)
    assert {n for n in held if held[n]['closest']['exact']} == {n for n in expected if 'exact' in n}
    assert all(c['closest']['distance'] == 0 for c in found if c['closest']['exact'])
    summary = json.load(open(f'{out}/summary.json'))
    leakage = summary['leakage']
    n = len(found)
    assert (leakage['clusters'], leakage['images'], leakage['largest']) == (n, 2 * n, 2)
    assert leakage['between'] == {'train/test': n} and leakage['by_split'] == {'train': n, 'test': n}
    assert leakage['exact'] == PER_KIND and leakage['flat_images'] == {'train': 1, 'validation': 1}
    assert (f'leakage: {n} cluster(s) of near-duplicates span splits within 8 of 64 bits '
            f'({2 * n} images: train {n}, test {n}; the largest 2; closest pair exact in '
            f'{PER_KIND}, mirrored in {leakage["mirrored"]}): train/test {n}; see leakage.jsonl'
            ) in result.stdout.splitlines()
    assert 'leakage: 2 flat image(s) (blank or constant) were not compared' in result.stdout
    stored = read_split(out, 'train', {records.PHASH: _int64(), records.PHASH_MIRRORED: _int64()})
    hashes = [r[records.PHASH] for r in stored]
    assert hashes.count(0) == 1 and len(set(hashes)) == len(hashes)   # Only the blank is flat.
    assert verify(out, processes=1) == []   # Recomputes the same clusters from the records.


def _int64():
    import tensorflow as tf
    return tf.io.FixedLenFeature([], tf.int64)


def test_drop_leaves_the_test_members_out_and_accounts_for_them(planted, tmp_path):
    root, files, expected = planted
    out = f'{tmp_path}/out'
    result = _convert(root, out, '--leakage=drop')
    assert result.returncode == 0, result.stderr
    dropped = {s for c in _clusters(root, out) for s in c['members']['test']}
    test = {os.path.relpath(r[records.SOURCE], root) for r in read_split(out, 'test')}
    inputs = {name for name in files if name.startswith('test/')}
    assert test == inputs - dropped and dropped <= inputs
    summary = json.load(open(f'{out}/summary.json'))['splits']['test']
    assert summary['dropped_copies'] == len(dropped) and summary['skipped'] == 0
    assert summary['records'] + summary['dropped_copies'] == summary['inputs'] == len(inputs)
    assert f'; {len(dropped)} later-split copies dropped; see leakage.jsonl' in result.stdout
    assert len(read_split(out, 'train')) == 201
    assert verify(out, processes=1) == []   # As leakage.jsonl and dropped_copies say.


def test_fail_commits_nothing(planted, tmp_path):
    root, _, _ = planted
    out = f'{tmp_path}/out'
    result = _convert(root, out, '--leakage=fail')
    assert result.returncode == 2
    assert 'cluster(s) of near-duplicate images span splits; the largest has 2 images' in result.stderr
    assert '--leakage=fail: nothing was committed' in result.stderr
    assert not os.path.exists(f'{out}/dataset_info.json')


def _runs(found: list[dict]) -> int:
    """How many sorted runs the clusters make, in the order the file lists them."""
    keys = [sorted(c['members'].items(), key=lambda m: SPLITS.index(m[0])) for c in found]
    return 1 + sum(later < earlier for earlier, later in zip(keys, keys[1:]))


def test_clusters_made_in_many_partitions_are_the_same_clusters(planted, tmp_path, monkeypatch):
    """Past ~32,768 images the clusters are made in partitions, each written as a part of
    leakage.jsonl (forced here with small shuffle groups): the file lists the clusters the
    records give, sorted within each part, with their counts, and --leakage=fail names the
    largest of them all."""
    root, _, expected = planted
    monkeypatch.setattr(leakage, 'GROUP_SIZE', 16)
    out = f'{tmp_path}/out'
    summary = convert(f'--input_dir={root}', f'--output_dir={out}', '--num_shards=2')
    found = _clusters(root, out)
    assert _runs(found) > 1 and len(_found(found, expected)) >= 0.95 * len(expected)
    assert summary['leakage']['clusters'] == len(found)
    assert summary['leakage']['exact'] == sum(c['closest']['exact'] for c in found) == PER_KIND
    assert verify(out, processes=1) == []   # No problem with leakage.jsonl: the same clusters.
    with pytest.raises(DatasetError) as failed:
        convert(f'--input_dir={root}', f'--output_dir={tmp_path}/refused', '--num_shards=2',
                '--leakage=fail')
    assert (f'{len(found)} cluster(s) of near-duplicate images span splits; the largest has 2 '
            'images (train 1, test 1), e.g. ') in str(failed.value)


def test_a_rerun_after_a_kill_reuses_the_groups_already_linked(planted, tmp_path):
    """A run killed once it has linked two of the leakage check's shuffle groups reuses them
    when rerun, and writes the leakage.jsonl of an uninterrupted run."""
    root, _, _ = planted
    out, whole = f'{tmp_path}/out', f'{tmp_path}/whole'
    killed = _convert(root, out, kill_at='links:2')
    assert killed.returncode == -9, killed.stderr
    summary = convert(f'--input_dir={root}', f'--output_dir={out}', '--num_shards=2')
    assert summary['chunks']['link_groups_reused'] == 2
    convert(f'--input_dir={root}', f'--output_dir={whole}', '--num_shards=2')
    assert open(f'{out}/leakage.jsonl', 'rb').read() == open(f'{whole}/leakage.jsonl', 'rb').read()


def test_crops_of_two_photos_are_two_lines_and_drop_leaves_every_test_crop_out(tmp_path):
    """48 crops of two photos over train and test (hundreds of near pairs, were each listed)
    among distinct photos: a line per photo's cluster, with every crop; --leakage=drop leaves
    every test crop out, and verify finds no cluster across splits in what is left."""
    rng = random.Random(7)
    files = {f'{split}/c2/p{i}.jpg': _jpeg(Image.fromarray(imagemaker.photo(160, 120, seed=i)))
             for i, split in enumerate(['train'] * 6 + ['test'] * 3)}
    crops = {}
    for p in range(2):
        photo = Image.fromarray(imagemaker.photo(400, 300, seed=100 + p))
        for i in range(24):
            w, h = int(400 * rng.uniform(0.9, 1)), int(300 * rng.uniform(0.9, 1))
            x, y = rng.randint(0, 400 - w), rng.randint(0, 300 - h)
            name = f'{"test" if i % 4 == 0 else "train"}/c{p}/crop{i}.jpg'
            files[name] = _jpeg(photo.crop((x, y, x + w, y + h)).resize((160, 120)))
            crops.setdefault(p, set()).add(name)
    root, out = write_tree(tmp_path / 'in', files), f'{tmp_path}/out'
    result = _convert(root, out, '--leakage=drop')
    assert result.returncode == 0, result.stderr
    found = sorted(_clusters(root, out), key=lambda c: c['members']['train'][0])
    assert [set(s for sources in c['members'].values() for s in sources) for c in found] == [
        crops[0], crops[1]]
    assert [c['images'] for c in found] == [24, 24]
    test = {os.path.relpath(r[records.SOURCE], root) for r in read_split(out, 'test')}
    assert test == {f'test/c2/p{i}.jpg' for i in range(6, 9)}
    summary = json.load(open(f'{out}/summary.json'))
    assert summary['splits']['test']['dropped_copies'] == 12
    assert summary['leakage']['largest'] == 24
    table = result.stdout.splitlines()   # inputs = records + skipped + dropped, on screen too.
    assert table[0].split()[:5] == ['split', 'inputs', 'records', 'skipped', 'dropped']
    assert next(line for line in table if line.startswith('test ')).split()[1:5] == [
        '15', '3', '0', '12']
    assert verify(out, processes=1) == []


def test_off_computes_no_hashes_and_writes_no_leakage_report(tmp_path):
    """--leakage=off: records without hash features, which verify and the tf.data reader accept,
    no leakage.jsonl (though a resized copy crosses splits), summary and end-of-run lines that
    say so; damaged JPEGs are still found and skipped."""
    rng = random.Random(5)
    photos = [Image.fromarray(imagemaker.photo(192, 144, seed=i)) for i in range(8)]
    files = {f'train/c{i % 2}/p{i}.jpg': _jpeg(photos[i]) for i in range(5)}
    files.update({f'test/c{i % 2}/p{i}.jpg': _jpeg(photos[i]) for i in range(5, 8)})
    files['test/c0/copy.jpg'] = COPIES['resized'](photos[0], rng)
    whole = _jpeg(photos[0])
    files['train/c1/damaged.jpg'] = whole[:len(whole) // 2] + bytes(len(whole) - len(whole) // 2)
    root, out = write_tree(tmp_path / 'in', files), f'{tmp_path}/out'
    result = _convert(root, out, '--leakage=off', '--max_error_ratio=0.5')
    assert result.returncode == 0, result.stderr
    assert not os.path.exists(f'{out}/leakage.jsonl')
    summary = json.load(open(f'{out}/summary.json'))
    assert summary['leakage'] == {'action': 'off'} and summary['splits']['train']['damaged'] == 1
    assert ('leakage: not checked (--leakage=off: no perceptual hashes, no leakage.jsonl)'
            in result.stdout.splitlines())
    assert 'damaged JPEGs (strict libjpeg-turbo): 1, skipped' in result.stdout
    stored = [records.decode_example(data) for split in ('train', 'test')
              for path in sorted(glob.glob(f'{out}/*-{split}.tfrecord-*'))
              for data in records.read_records(open(path, 'rb'))]
    assert len(stored) == 9 and not any(set(records.HASH_FEATURES) & set(r) for r in stored)
    features = json.load(open(f'{out}/features.json'))['featuresDict']['features']
    assert records.PHASH not in features and records.ENCODED in features
    from pipeline.readers import tf_data   # Imports TensorFlow: only where a test reads with it.
    assert len(list(tf_data.dataset(out, 'test'))) == 4
    checked = subprocess.run([sys.executable, '-m', 'pipeline.tools.verify', out,
                              '--processes=1'], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    assert 'leakage: not checked by the conversion (--leakage=off)' in checked.stdout


@pytest.mark.parametrize('flags', [(), ('--leakage=off',)])
def test_exact_copies_within_a_split_are_counted_named_and_verified(tmp_path, capsys, flags):
    """Byte-identical images under other names in one split are a finding: counted per split in
    summary.json and at the end of the run, with an example, and verify agrees (exit 0)."""
    image = imagemaker.jpeg(48, 40, seed=7)
    root = write_tree(tmp_path / 'in', {
        **{f'train/c{i % 2}/{i}.jpg': imagemaker.jpeg(48, 40, seed=100 + i) for i in range(6)},
        'train/c0/twin.jpg': image, 'train/c1/twin-again.jpg': image, 'train/c1/first.jpg': image,
        'test/c0/other.jpg': image, 'test/c1/1.jpg': imagemaker.jpeg(48, 40, seed=200)})
    out = f'{tmp_path}/out'
    result = cli(f'--input_dir={root}', f'--output_dir={out}', *flags)
    assert result.returncode == 0, result.stderr
    summary = json.load(open(f'{out}/summary.json'))
    assert {s: summary['splits'][s]['exact_copies'] for s in ('train', 'test')} == {
        'train': 2, 'test': 0}   # Three records of one image in train; its test copy is not.
    (copy, original), *_ = summary['copy_examples']['train']
    assert {os.path.basename(copy), os.path.basename(original)} <= {
        'twin.jpg', 'twin-again.jpg', 'first.jpg'}
    assert [line for line in result.stdout.splitlines() if line.startswith('exact copies')] == [
        f'exact copies within a split: 2 (train 2): byte-identical images under other names, '
        f'each stored as a record; e.g. {copy} is {original}']
    capsys.readouterr()
    assert verify(out, processes=1) == []   # The same count, from the records.
    assert 'exact copies within a split: 2 record(s)' in capsys.readouterr().out


def test_drop_of_a_file_listed_in_two_splits_verifies(planted, tmp_path):
    """The same file in train's and test's CSV: test's record is left out, train's kept, and
    verify tells the two apart by split (it matched sources alone, and exit 1)."""
    root = planted[0]
    train = [f'{root}/train/c{i % 4}/p{i}.jpg,c{i % 4}' for i in range(12)]
    test = [f'{root}/train/c1/p1.jpg,c1', f'{root}/train/c2/p14.jpg,c2',
            f'{root}/train/c3/p15.jpg,c3']
    for name, lines in (('train', train), ('test', test)):
        (tmp_path / f'{name}.csv').write_text('\n'.join(lines) + '\n')
    out = f'{tmp_path}/out'
    result = cli(f'--csv_train={tmp_path}/train.csv', f'--csv_test={tmp_path}/test.csv',
                 f'--output_dir={out}', '--leakage=drop', '--num_shards=3', *IN_PROCESS)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines() + result.stderr.splitlines()
    assert any(re.fullmatch(r'test shard [123]/3: every input dropped as a later-split copy '
                            r'\(1; see leakage.jsonl\); no shard is written for it', line)
               for line in lines), lines
    assert ('test: no records for class(es) c1 (no input of theirs was listed, or all were '
            'skipped or dropped as later-split copies; see errors-test.jsonl and leakage.jsonl)'
            ) in lines
    sources = {split: [r[records.SOURCE] for r in read_split(out, split)]
               for split in ('train', 'test')}
    assert f'{root}/train/c1/p1.jpg' in sources['train']
    assert sorted(sources['test']) == [f'{root}/train/c2/p14.jpg', f'{root}/train/c3/p15.jpg']
    assert verify(out, processes=1) == []

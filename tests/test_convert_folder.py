"""End to end on DirectRunner: folder layout in, TFRecords read back with TensorFlow and TFDS."""
import hashlib
import json
import os

import numpy as np
import pytest

from pipeline.inputs import folder_layout
from pipeline.output import records
from pipeline.testing import imagemaker
from tests.helpers import (
    cli, convert, output_files, pixels, read_files, read_split, shard_paths, write_tree)

pytestmark = pytest.mark.slow   # Each converts, or reads the dataset converted once per module.


@pytest.fixture(scope='module')
def mixed(tmp_path_factory):
    """A dataset with every image kind, two large sizes, and a few broken files."""
    root = tmp_path_factory.mktemp('mixed')
    from PIL import Image
    gray = Image.fromarray(imagemaker.gradient(80, 60)[..., 0])
    files = {
        'train/cat/big.jpg': imagemaker.jpeg(640, 300, seed=1),
        'train/cat/tall.png': imagemaker.png(200, 500, seed=2),
        'train/cat/gray.jpg': imagemaker.encode(gray, 'JPEG', quality=95),
        'train/dog/cmyk.jpg': imagemaker.encode(Image.fromarray(imagemaker.gradient(64, 64)).convert('CMYK'), 'JPEG'),
        'train/dog/rotated.jpg': imagemaker.exif_rotated_jpeg(300, 200, 6),
        'train/dog/alpha.png': imagemaker.encode(Image.new('RGBA', (30, 20), (0, 0, 0, 0)), 'PNG'),
        'train/dog/truncated.jpg': imagemaker.jpeg(400, 300)[:3000],
        'train/dog/empty.jpg': b'',
        'train/bird/notes.txt': b'not an image',
        'train/bird/ok.jpg': imagemaker.jpeg(100, 100, seed=3),
        'train/bird/.DS_Store': b'hidden files are ignored',
        'test/cat/a.jpg': imagemaker.jpeg(120, 90, seed=4),
        'test/dog/b.jpg': imagemaker.jpeg(90, 120, seed=5),
        'test/bird/c.jpg': imagemaker.jpeg(50, 50, seed=6),
    }
    root = write_tree(root, files)
    out = str(tmp_path_factory.mktemp('out') / 'ds')
    summary = convert(f'--input_dir={root}', f'--output_dir={out}', '--max_error_ratio=0.5',
                      '--dataset_name=mixed')
    return root, files, out, summary


def test_records_labels_and_sizes(mixed):
    root, files, out, summary = mixed
    train = {os.path.basename(r[records.SOURCE]): r for r in read_split(out, 'train')}
    assert sorted(train) == ['alpha.png', 'big.jpg', 'cmyk.jpg', 'gray.jpg', 'ok.jpg', 'rotated.jpg', 'tall.png']
    # Label ids are the sorted class names: bird=0, cat=1, dog=2.
    assert {n: (r[records.LABEL], r[records.TEXT]) for n, r in train.items()}['cmyk.jpg'] == (2, 'dog')
    assert train['ok.jpg'][records.LABEL] == 0 and train['big.jpg'][records.LABEL] == 1
    sizes = {n: (r[records.HEIGHT], r[records.WIDTH]) for n, r in train.items()}
    assert sizes['big.jpg'] == (300, 640) and sizes['tall.png'] == (500, 200)
    assert sizes['rotated.jpg'] == (300, 200)
    for name, record in train.items():
        image = pixels(record)
        assert image.shape == (record[records.HEIGHT], record[records.WIDTH], 3), name
        assert record[records.CHANNELS] == 3 and record[records.FORMAT] == 'JPEG'
        assert record[records.COLORSPACE] == 'RGB' and record[records.FILENAME] == name
        assert record[records.SHA256] == hashlib.sha256(record[records.ENCODED]).hexdigest()


def test_rgb_jpegs_are_stored_unchanged_and_others_match_their_pixels(mixed):
    root, files, out, _ = mixed
    train = {os.path.basename(r[records.SOURCE]): r for r in read_split(out, 'train')}
    assert train['big.jpg'][records.ENCODED] == files['train/cat/big.jpg']
    expected = imagemaker.decode(files['train/cat/tall.png']).astype(int)
    assert np.abs(pixels(train['tall.png']).astype(int) - expected).mean() < 3
    assert (pixels(train['alpha.png']) > 240).all()  # transparent -> white


def test_error_report_lists_every_skipped_file(mixed):
    root, files, out, summary = mixed
    lines = [json.loads(line) for line in open(os.path.join(out, 'errors-train.jsonl'))]
    reasons = {os.path.basename(e['source']): e['reason'] for e in lines}
    assert set(reasons) == {'truncated.jpg', 'empty.jpg', 'notes.txt'}
    assert 'Premature end of JPEG file' in reasons['truncated.jpg']   # Damaged: skipped.
    assert reasons['empty.jpg'] == 'empty file' and 'not an image' in reasons['notes.txt']
    damaged = [json.loads(line) for line in open(os.path.join(out, 'damaged-train.jsonl'))]
    assert [(os.path.basename(e['source']), e['action']) for e in damaged] == [
        ('truncated.jpg', 'skip')]
    assert summary['splits']['train']['damaged'] == 1
    train = summary['splits']['train']
    inputs = len([k for k in files if k.startswith('train/') and '.DS_Store' not in k])
    assert train['records'] + train['skipped'] == inputs == 10
    assert open(os.path.join(out, 'errors-test.jsonl')).read() == ''


def test_tfds_loads_decoded_images_and_class_names(mixed):
    import tensorflow_datasets as tfds
    _, _, out, summary = mixed
    builder = tfds.builder_from_directory(out)
    assert builder.info.splits['train'].num_examples == summary['splits']['train']['records'] == 7
    assert builder.info.splits['test'].num_examples == 3
    label = builder.info.features['image/class/label']
    assert label.names == ['bird', 'cat', 'dog']
    for example in tfds.as_numpy(builder.as_dataset(split='test')):
        assert example['image/encoded'].shape == (example['image/height'],
                                                  example['image/width'], 3)
        assert label.int2str(example['image/class/label']) == example['image/class/text'].decode()
    pairs = tfds.as_numpy(builder.as_dataset(split='test', as_supervised=True))
    records = tfds.as_numpy(builder.as_dataset(split='test'))
    for (image, label_id), example in zip(pairs, records, strict=True):
        assert (image == example['image/encoded']).all() and image.shape[2] == 3
        assert label_id == example['image/class/label']
    assert open(os.path.join(out, 'labels.txt')).read() == 'bird\ncat\ndog\n'


def test_shards_mix_classes_and_are_deterministic_across_worker_counts(tmp_path):
    files = {f'train/c{c}/img{i}.jpg': imagemaker.jpeg(40, 30, seed=c * 100 + i)
             for c in range(4) for i in range(12)}
    root = write_tree(tmp_path / 'in', files)
    one, two = str(tmp_path / 'one'), str(tmp_path / 'two')
    convert(f'--input_dir={root}', f'--output_dir={one}', '--num_shards=3')
    convert(f'--input_dir={root}', f'--output_dir={two}', '--num_shards=3',
            runner_flags=['--direct_running_mode=multi_processing', '--direct_num_workers=2'])
    assert output_files(one) == output_files(two)
    assert len(shard_paths(one, 'train')) == 3
    labels = [r[records.LABEL] for r in read_split(one, 'train')]
    assert len(labels) == 48
    assert labels != sorted(labels)
    for path in shard_paths(one, 'train'):
        shard_labels = [r[records.LABEL] for r in read_files([path])]
        assert len(set(shard_labels)) >= 3 and 12 <= len(shard_labels) <= 20



def test_names_not_in_utf8_are_reported_not_fatal(tmp_path):
    """A file, or a class folder, named in another encoding (Latin-1 'café') is one skipped
    input, reported under its name with the stray byte escaped; the rest converts."""
    root = tmp_path / 'in'
    files = {f'{split}/cat/{i}.jpg': imagemaker.jpeg(64, 48, seed=i + 10 * n)
             for n, split in enumerate(('train', 'test')) for i in range(4)}
    write_tree(root, files)
    for name in (b'train/cat/caf\xe9.jpg', b'test/r\xe9d/x.jpg'):
        path = os.fsencode(root) + b'/' + name
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'wb') as stream:
            stream.write(imagemaker.jpeg(64, 48, seed=99))
    out = tmp_path / 'out'
    result = cli(f'--input_dir={root}', f'--output_dir={out}', '--max_error_ratio=0.25')
    assert result.returncode == 0, result.stderr
    summary = json.load(open(out / 'summary.json'))['splits']
    assert [(summary[s]['records'], summary[s]['skipped']) for s in ('train', 'test')] == [
        (4, 1), (4, 1)]
    for split, shown in (('train', f'{root}/train/cat/caf\\xe9.jpg'),
                         ('test', f'{root}/test/r\\xe9d/x.jpg')):
        (error,) = [json.loads(line) for line in open(out / f'errors-{split}.jsonl')]
        assert error['source'] == shown
        assert error['reason'].startswith('its path is not valid UTF-8')
    assert open(out / 'labels.txt').read() == 'cat\n'


def test_a_val_folder_is_the_validation_split_and_folders_left_out_are_named(tmp_path):
    files = {f'{folder}/c{i % 2}/{i}.jpg': imagemaker.jpeg(40, 30, seed=i + 10 * n)
             for n, folder in enumerate(('train', 'val', 'testing', 'notes')) for i in range(4)}
    result = cli(f'--input_dir={write_tree(tmp_path / "in", files)}',
                 f'--output_dir={tmp_path}/out')
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        f'{tmp_path}/in: left out notes/, testing/: not a split folder (train, validation or '
        'val, test); rename a folder to convert it')
    validation = read_split(f'{tmp_path}/out', 'validation')
    assert sorted(r['image/filename'] for r in validation) == ['0.jpg', '1.jpg', '2.jpg', '3.jpg']
    assert not shard_paths(f'{tmp_path}/out', 'test')
    both = write_tree(tmp_path / 'both', {'val/c0/1.jpg': imagemaker.jpeg(seed=1),
                                          'validation/c0/2.jpg': imagemaker.jpeg(seed=2)})
    twice = cli(f'--input_dir={both}', f'--output_dir={tmp_path}/out2')
    assert twice.returncode == 2 and twice.stderr.splitlines() == [
        f'error: {both}/val and {both}/validation both stand for split validation; keep one']


def test_a_shard_whose_every_input_is_skipped_is_not_said_written(tmp_path):
    inputs = write_tree(tmp_path / 'in', {'train/a/1.jpg': b'junk', 'train/a/2.jpg': b'junk2'})
    result = cli(f'--input_dir={inputs}', f'--output_dir={tmp_path}/out', '--leakage=off')
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert 'train shard 1/1: every input skipped (2); no shard is written for it' in lines
    assert not [line for line in lines if ' written: ' in line]


def test_a_folder_is_one_dataset_however_its_path_is_spelled(tmp_path):
    """A rerun naming the input folder by its absolute path, with a trailing slash or through a
    link finds the dataset its relative path made: nothing to do, and no file touched."""
    write_tree(tmp_path / 'in', {f'train/c{i % 2}/{i}.jpg': imagemaker.jpeg(30, 20, seed=i)
                                 for i in range(4)})
    os.symlink(tmp_path / 'in', tmp_path / 'link')
    out = f'{tmp_path}/out'
    made = cli('--input_dir=in', f'--output_dir={out}', '--leakage=off', cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    before = output_files(out)
    for spelled in (f'{tmp_path}/in', 'in/', 'link'):
        again = cli(f'--input_dir={spelled}', f'--output_dir={out}', '--leakage=off', cwd=tmp_path)
        assert again.returncode == 0, (spelled, again.stderr)
        assert again.stderr.strip().endswith('and its input is unchanged; nothing to do'), spelled
        assert output_files(out) == before, spelled


def test_class_folders_past_the_bound_are_listed_by_name_and_make_the_same_dataset(
        tmp_path, monkeypatch):
    """Past MAX_CLASS_PARTITIONS class folders in a split (a million empty ones, say), the real
    ones are listed many to a partition: the dataset is the one a partition each makes."""
    files = {f'train/c{i % 5}/{i}.jpg': imagemaker.jpeg(24, 20, seed=i) for i in range(10)}
    root = write_tree(tmp_path / 'in', files)
    os.makedirs(f'{root}/train/empty')
    each, grouped = f'{tmp_path}/each', f'{tmp_path}/grouped'
    convert(f'--input_dir={root}', f'--output_dir={each}', '--leakage=off')
    monkeypatch.setattr(folder_layout, 'MAX_CLASS_PARTITIONS', 2)
    convert(f'--input_dir={root}', f'--output_dir={grouped}', '--leakage=off')
    assert output_files(each) == output_files(grouped)

"""verify covers every byte of a dataset: each single edit of any file of it is a problem that
names the file (exit 1), and a damaged record is one line with what follows from it summed."""
import json
import os
import random
import re

import pytest
from PIL import Image

from pipeline.output import metadata, records
from pipeline.testing import imagemaker
from pipeline.testing.datasets import convert, copy_of, read_shard, run_verify, write_tree

pytestmark = pytest.mark.slow


def _photo(seed: int, quality: int = 90) -> bytes:
    return imagemaker.encode(Image.fromarray(imagemaker.photo(48 + seed % 5, 36, seed=seed)),
                             'JPEG', quality=quality)


@pytest.fixture(scope='module')
def dataset(tmp_path_factory) -> str:
    """Two splits in both formats with DALI indexes: copies within train, two clusters of
    near-duplicates across the splits, a damaged JPEG skipped."""
    files = {f'train/c{i % 2}/{i}.jpg': _photo(i) for i in range(10)}
    files.update({'train/c0/copy.jpg': files['train/c0/0.jpg'],
                  'test/c0/near.jpg': _photo(4, quality=40),
                  'test/c1/near2.jpg': _photo(7, quality=50), 'test/c1/t.jpg': _photo(20)})
    whole = _photo(50)
    files['train/c0/broken.jpg'] = whole[:len(whole) // 2] + bytes(len(whole) - len(whole) // 2)
    folder = tmp_path_factory.mktemp('every-byte')
    out = str(folder / 'ds')
    convert(f'--input_dir={write_tree(folder / "in", files)}', f'--output_dir={out}',
            '--num_shards=2', '--dali_index', '--max_error_ratio=0.5',
            '--output_format=tfrecord,array_record')
    result = run_verify(out)
    assert result.returncode == 0 and result.stderr == '', result.stderr
    return out


def _edit_summary(edit):
    """An edit of summary.json's document, written back as the converter writes it: the one
    change is the only difference in its text."""
    def tamper(out: str) -> str:
        path = os.path.join(out, metadata.SUMMARY)
        with open(path) as stream:
            document = json.load(stream)
        edit(document)
        with open(path, 'wb') as stream:
            stream.write(metadata.dumps(document))
        return metadata.SUMMARY
    return tamper


def _set(*keys_and_value):
    *keys, value = keys_and_value

    def edit(document):
        for key in keys[:-1]:
            document = document[key]
        document[keys[-1]] = value(document[keys[-1]]) if callable(value) else value
    return _edit_summary(edit)


def _swap_leakage_lines(out: str) -> str:
    path = os.path.join(out, metadata.LEAKAGE)
    with open(path, 'rb') as stream:
        lines = stream.readlines()
    assert len(lines) == 2
    with open(path, 'wb') as stream:
        stream.writelines(lines[::-1])
    return metadata.LEAKAGE


def _flip(path: str, position: int) -> None:
    with open(path, 'r+b') as stream:
        stream.seek(position)
        byte = stream.read(1)[0]
        stream.seek(position)
        stream.write(bytes([byte ^ 1]))


def _flip_near_the_end_of_an_array_record_shard(out: str) -> str:
    name = 'dataset-train.array_record-00000-of-00002'
    path = os.path.join(out, name)
    _flip(path, os.path.getsize(path) - 20)
    return name


EDITS = {
    'digests-removed': _edit_summary(lambda d: d.pop('digests')),
    'run-id': _set('run_id', '0123456789abcdef'),
    'damaged-images': _set('damaged_images', 'fail'),
    'listing': _set('splits', 'train', 'listing', '0000000000000000'),
    'copy-examples': _set('copy_examples', {}),
    'ignored': _set('splits', 'test', 'ignored', 1),
    'passed-through': _set('splits', 'train', 'passed_through', lambda n: n - 1),
    'unknown-key': _set('note', 'added'),
    'leakage-lines-swapped': _swap_leakage_lines,
    'array-record-footer': _flip_near_the_end_of_an_array_record_shard,
}


@pytest.mark.parametrize('tamper', EDITS.values(), ids=EDITS.keys())
def test_each_single_edit_is_a_problem_naming_the_file(dataset, tmp_path, tamper):
    out = copy_of(dataset, tmp_path)
    name = tamper(out)
    result = run_verify(out)
    assert result.returncode == 1, result.stdout
    assert any(name in line for line in result.stderr.splitlines()), result.stderr


def test_a_bit_flipped_in_a_tfrecord_record_is_one_line_with_what_follows(dataset, tmp_path):
    """The record of a member of a leakage cluster: reading stops there, so the shard's count,
    the split's counts and the leakage file disagree; the line says so, and no other line."""
    out = copy_of(dataset, tmp_path)
    info = metadata.load_json(out, metadata.DATASET_INFO)
    for index, path in enumerate(metadata.shard_paths(out, info, 'train')):
        found = read_shard(path)
        number = next((n for n, data in enumerate(found) if _source(data).endswith('/4.jpg')),
                      None)
        if number is not None:
            break
    start = sum(len(data) + 16 for data in found[:number])
    _flip(path, start + 12 + len(found[number]) // 2)   # Inside the record's data.
    result = run_verify(out)
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert re.fullmatch(rf'train shard {index} \({os.path.basename(path)}\) record {number}: '
                        r'data checksum mismatch \(and so: \d+ counts and the leakage file '
                        r'disagree\)', line), line


def _source(data: bytes) -> str:
    return records.decode_example(data)[records.SOURCE][0].decode()


def test_a_file_the_dataset_does_not_list_is_a_warning(dataset, tmp_path):
    out = copy_of(dataset, tmp_path)
    with open(os.path.join(out, 'notes.txt'), 'w') as stream:
        stream.write('mine')
    result = run_verify(out)
    assert result.returncode == 0
    assert result.stderr.splitlines() == [
        'warning: notes.txt: a file, not part of this dataset (dataset_info.json does not list '
        'it); verify did not read it']


def test_a_file_of_the_dataset_as_a_link_or_an_extra_folder_or_link_is_named(dataset, tmp_path):
    """A dataset's files are regular files of its folder: one replaced by a link to the same
    bytes elsewhere is a problem; a folder named as a shard the dataset does not list is one
    too; another folder or link is a warning, as an unlisted file is."""
    shard, index = 'dataset-train.tfrecord-00000-of-00002', 'dataset-train.tfrecord-00007-of-00009.idx'
    for name in (shard, 'summary.json', 'features.json'):
        out = copy_of(dataset, tmp_path / name)
        elsewhere = tmp_path / name / 'elsewhere'
        os.rename(os.path.join(out, name), elsewhere)
        os.symlink(elsewhere, os.path.join(out, name))
        result = run_verify(out)
        assert result.returncode == 1
        assert f'{name}: a symbolic link to {elsewhere}, not a file of the folder; replace it ' \
               'with the file itself' in result.stderr
    out = copy_of(dataset, tmp_path / 'extra')
    os.mkdir(os.path.join(out, 'dataset-train.tfrecord-00002-of-00002'))
    os.mkdir(os.path.join(out, index))
    os.mkdir(os.path.join(out, 'sub'))
    os.symlink(tmp_path, os.path.join(out, 'extra'))
    result = run_verify(out)
    assert result.returncode == 1
    assert ('dataset-train.tfrecord-00002-of-00002: not part of this dataset (a shard from '
            'another run or dataset); remove it') in result.stderr
    assert index in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith('warning:')] == [
        'warning: extra: a symbolic link, not part of this dataset (dataset_info.json does not '
        'list it); verify did not read it',
        'warning: sub: a folder, not part of this dataset (dataset_info.json does not list it); '
        'verify did not read it']


def test_a_byte_changed_anywhere_in_any_file_is_found(dataset, tmp_path):
    """Every file of the dataset, a byte changed at three seeded places each (an empty one
    given a byte): verify exits 1 and names the file (an index by its shard's name), or,
    where the change leaves no dataset_info.json it can read, exits 2 naming that file."""
    rng = random.Random(0)
    out = copy_of(dataset, tmp_path)
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name)
        with open(path, 'rb') as stream:
            original = stream.read()
        for position in sorted(rng.sample(range(len(original)), min(3, len(original)))) or [0]:
            changed = bytearray(original or b'\0')   # An empty file gets a byte.
            changed[position] ^= 1 << rng.randrange(8)
            with open(path, 'wb') as stream:
                stream.write(changed)
            result = run_verify(out)
            assert result.returncode in (1, 2), (name, position)
            shard = name.removesuffix('.idx')
            assert re.search(rf'(^|[ /(]){re.escape(shard)}[:) ]', result.stderr, re.M), (
                name, position, result.stderr)
        with open(path, 'wb') as stream:
            stream.write(original)

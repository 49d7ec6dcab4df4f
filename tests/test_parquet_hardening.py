"""Parquet files that claim more than they hold, or hold what `datasets` never writes: each is
read, a reported row, or refused in one line naming the file and what to fix; no count a file
claims becomes memory or time before it is bounded (memory sampled in every process)."""
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.output import records
from pipeline.testing import imagemaker
from tests.helpers import IN_PROCESS, cli, shard_paths
from tests.process_memory import GIB, run_sampled

IMAGE = {'_type': 'Image'}


def _write(root, features: dict | bytes, image: pa.Array, labels: list,
           name='train-00000-of-00001') -> str:
    """A parquet file under root/data whose schema carries `features` as datasets stores them
    (bytes: the metadata itself)."""
    os.makedirs(f'{root}/data', exist_ok=True)
    path = f'{root}/data/{name}.parquet'
    metadata = {b'huggingface': features if isinstance(features, bytes) else
                json.dumps({'info': {'features': features}}).encode()}
    table = pa.table({'image': image, 'label': pa.array(labels, pa.int64())})
    pq.write_table(table.replace_schema_metadata(metadata), path)
    return path


def _images(count: int, path_type=pa.string(), paths=None) -> pa.Array:
    """Image structs {bytes, path} (path of `path_type`; None: no path field) of JPEGs."""
    fields = [('bytes', pa.binary())] + ([('path', path_type)] if path_type else [])
    rows = [{'bytes': imagemaker.jpeg(24, 16, seed=i),
             **({'path': paths[i] if paths else f'img{i}.jpg'} if path_type else {})}
            for i in range(count)]
    return pa.array(rows, pa.struct(fields))


def _records(out: str, split: str = 'train') -> list[dict]:
    """The records of a split as {name: [values]}, read without TensorFlow."""
    found = []
    for path in shard_paths(out, split):
        with open(path, 'rb') as stream:
            found += [records.decode_example(data) for data in records.read_records(stream)]
    return found


def _refused(tmp_path, features: dict | bytes, *flags) -> list[str]:
    _write(tmp_path / 'in', features, _images(1), [0])
    result = cli(f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/out', *flags)
    assert result.returncode == 2 and not os.path.exists(tmp_path / 'out'), result.stderr
    return result.stderr.splitlines()


@pytest.mark.slow
@pytest.mark.parametrize('label,wrong', [
    ({'_type': 'ClassLabel', 'num_classes': '5'}, "gives num_classes '5', not a whole number"),
    ({'_type': 'ClassLabel', 'names': 'ab'}, 'does not list its class names as text'),
    (5, None),
])
def test_label_metadata_of_the_wrong_type_is_refused_in_one_line(tmp_path, label, wrong):
    """A TypeError (num_classes "5") or AttributeError (the feature 5) ended the run unnamed."""
    path = f'{tmp_path}/in/data/train-00000-of-00001.parquet'
    lines = _refused(tmp_path, {'image': IMAGE, 'label': label}, '--label_column=label')
    if wrong is None:
        assert lines == [f'error: {path}: the feature of column label in its huggingface schema '
                         'metadata is 5, not an object; write the file again with datasets, or '
                         'name the columns with --image_column and --label_column']
    else:
        assert lines == [f'error: {path}: the ClassLabel of column label {wrong}; write the file '
                         'again with datasets']


@pytest.mark.slow
def test_metadata_nested_thirty_thousand_deep_is_refused_in_one_line(tmp_path):
    """The decoder's RecursionError ended the run."""
    lines = _refused(tmp_path, b'{"info": {"features": {"image": {"_type": "Image"}, "label": '
                     b'{"_type": "ClassLabel", "x": ' + b'[' * 30000 + b']' * 30000 + b'}}}}')
    assert lines == [f'error: {tmp_path}/in/data/train-00000-of-00001.parquet: its huggingface '
                     'schema metadata is not what the datasets library writes (is JSON nested '
                     'more than 64 deep); rewrite the file with datasets, or name the columns '
                     'with --image_column and --label_column']


@pytest.mark.slow
def test_a_classlabel_that_claims_twenty_million_classes_is_refused_before_any_is_made(tmp_path):
    _write(tmp_path / 'in', {'image': IMAGE, 'label': {'_type': 'ClassLabel', 'names': [],
                                                      'num_classes': 20_000_000}}, _images(1), [0])
    result = run_sampled(f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/out')
    assert result.returncode == 2 and result.stderr.splitlines() == [
        f'error: {tmp_path}/in/data/train-00000-of-00001.parquet: the ClassLabel of column label '
        'gives num_classes 20,000,000, not one of 0..1,000,000; write the file again with datasets']
    assert result.largest < GIB // 2, result.peaks   # Its names were made: 1.3 GB for these.


@pytest.mark.slow
def test_a_million_class_names_are_checked_for_twins_in_linear_time(tmp_path):
    """names.count(name) per name: 100,000 names took past 240 s."""
    names = [f'class {i}' for i in range(1_000_000)]
    names[-1] = 'class 7'
    _write(tmp_path / 'in', {'image': IMAGE, 'label': {'_type': 'ClassLabel', 'names': names}},
           _images(1), [0])
    result = cli(f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/out')
    assert result.returncode == 2 and result.stderr.splitlines() == [
        f"error: {tmp_path}/in/data/train-00000-of-00001.parquet: the ClassLabel of column label "
        "names 'class 7' more than once; labels.txt needs a name per id: give each its own in the "
        "file's features"]


@pytest.mark.slow
def test_image_structs_whose_path_is_a_number_a_struct_or_missing_convert(tmp_path):
    """Such a path ended the run in a TypeError, or the listing in an ArrowInvalid."""
    features = {'image': IMAGE, 'label': {'_type': 'ClassLabel', 'names': ['a', 'b']}}
    for n, kind in enumerate([pa.int64(), pa.struct([('x', pa.string())]), None]):
        paths = [7, 8] if kind == pa.int64() else [{'x': 'a'}, None] if kind else None
        _write(tmp_path / 'in', features, _images(2, kind, paths), [0, 1],
               name=f'train-0000{n}-of-00003')
    result = cli(f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/out', *IN_PROCESS)
    assert result.returncode == 0, result.stderr
    names = sorted(r[records.FILENAME][0] for r in _records(f'{tmp_path}/out'))
    assert names == [b'train-0000%d-of-00003.parquet:row %d' % (n, row)
                     for n in range(3) for row in range(2)]

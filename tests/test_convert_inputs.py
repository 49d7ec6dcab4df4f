"""CSV and config inputs, the classic data_converter API, labels and extra features."""
import io
import json
import os

import pytest

from pipeline.config import ImageClassificationBuilder, ImageClassificationConfig
from pipeline.output import records
from pipeline.errors import DatasetError
from pipeline.testing import imagemaker
from tests import helpers
from tests.helpers import write_tree

# Conversions run without the check for copies across splits (--leakage=off): what is tested is
# how inputs, labels and extra features are read, and the check's Beam stages take half of a
# small conversion's time.
NO_LEAKAGE_CHECK = '--leakage=off'


def convert(*argv, **kwargs) -> dict:
    """helpers.convert with NO_LEAKAGE_CHECK."""
    return helpers.convert(*argv, NO_LEAKAGE_CHECK, **kwargs)


def read_split(out: str, split: str, extra_spec: dict | None = None) -> list[dict]:
    """helpers.read_split of a dataset converted with NO_LEAKAGE_CHECK (records without hashes)."""
    return helpers.read_split(out, split, extra_spec, hashed=False)


@pytest.mark.slow
def test_csv_with_header_labels_file_and_relative_paths(tmp_path):
    root = write_tree(tmp_path / 'imgs', {f'{n}.jpg': imagemaker.jpeg(50, 40, seed=i)
                                          for i, n in enumerate('abcde')})
    (tmp_path / 'train.csv').write_text(
        'uri,label\n'
        f'imgs/a.jpg,zebra\n{root}/b.jpg,ant\n"imgs/c.jpg",zebra\n\nimgs/d.jpg,\nno-comma-line\n')
    (tmp_path / 'test.csv').write_text(f'{root}/e.jpg,ant\n')
    (tmp_path / 'labels.txt').write_text('zebra\nant\nunused\n')
    out = str(tmp_path / 'out')
    summary = convert(f'--csv_train={tmp_path}/train.csv', f'--csv_test={tmp_path}/test.csv',
                      f'--labels_file={tmp_path}/labels.txt', f'--output_dir={out}',
                      '--max_error_ratio=0.5')
    train = {os.path.basename(r[records.SOURCE]): r[records.LABEL] for r in read_split(out, 'train')}
    assert train == {'a.jpg': 0, 'b.jpg': 1, 'c.jpg': 0}
    assert [r[records.LABEL] for r in read_split(out, 'test')] == [1]
    assert summary['splits']['train']['skipped'] == 2
    reasons = [json.loads(line)['reason'] for line in open(os.path.join(out, 'errors-train.jsonl'))]
    assert sorted(reasons) == [f'{tmp_path}/train.csv line 6: no label',
                               f'{tmp_path}/train.csv line 7: 1 fields, expected 2 (uri,label)']
    assert open(os.path.join(out, 'labels.txt')).read() == 'zebra\nant\nunused\n'


def test_csv_chunks_split_records_exactly_once_with_line_numbers(tmp_path, monkeypatch):
    """Chunks of a few bytes cut a CSV with a BOM, quoted newlines and CRLF only between records."""
    from pipeline.inputs import csv_files
    monkeypatch.setattr(csv_files, 'CSV_CHUNK_BYTES', 7)
    rows = ''.join(f'"/x/multi\nline{i}.jpg",l{i % 3}\r\n' if i % 4 == 0 else f'/x/img{i}.jpg,l{i % 3}\n'
                   for i in range(40))
    (tmp_path / 'a.csv').write_bytes(('\ufeffuri,label\n' + rows).encode())
    chunks = csv_files.CsvFile('train', str(tmp_path / 'a.csv')).split_further()
    refs = [ref for chunk in chunks for ref in chunk.examples()]
    assert len(chunks) > 20
    assert [r.key for r in refs] == [f'/x/multi\nline{i}.jpg' if i % 4 == 0 else f'/x/img{i}.jpg'
                                     for i in range(40)]
    assert [r.label for r in refs] == [f'l{i % 3}' for i in range(40)]
    assert all(r.problem is None for r in refs)


class OldStyleConfig(ImageClassificationConfig):
    """Written as for tensorflow/tpu tools/data_converter: GFile objects and text labels."""

    def __init__(self, root, **kwargs):
        super().__init__(name='Simple', description='old style', **kwargs)
        self.root = root

    @property
    def num_labels(self):
        return 2

    @property
    def supported_modes(self):
        return ['train', 'validation']

    def example_generator(self, mode):
        import tensorflow as tf
        for name in sorted(os.listdir(os.path.join(self.root, mode))):
            yield {'image_fobj': tf.io.gfile.GFile(os.path.join(self.root, mode, name), 'rb'),
                   'label': name.split('_')[0]}


@pytest.mark.slow
def test_old_style_config_through_builder(tmp_path):
    root = write_tree(tmp_path / 'in', {
        'train/cat_1.jpg': imagemaker.jpeg(30, 30, seed=1), 'train/dog_1.png': imagemaker.png(),
        'validation/cat_2.jpg': imagemaker.jpeg(30, 30, seed=2)})
    builder = ImageClassificationBuilder(config=OldStyleConfig(root), data_dir=str(tmp_path / 'data'))
    summary = builder.download_and_prepare(
        pipeline_options=None, direct_running_mode='in_memory', direct_num_workers=1,
        leakage='off')
    assert builder.data_dir == f'{tmp_path}/data/image_classification_builder/Simple/1.0.0'
    assert os.path.exists(os.path.join(
        builder.data_dir, 'image_classification_builder-train.tfrecord-00000-of-00001'))
    assert summary['splits']['train']['records'] == 2
    labels = sorted((r[records.TEXT], r[records.LABEL]) for r in read_split(builder.data_dir, 'train'))
    assert labels == [('cat', 0), ('dog', 1)]


class MemoryConfig(ImageClassificationConfig):
    """In-memory images, a text_label_map, integer partitions and extra features."""

    def __init__(self, labels=('a', 'b'), extra=True, **kwargs):
        super().__init__(**kwargs)
        self.labels, self.extra = labels, extra

    num_labels = 3
    supported_modes = ('train',)
    text_label_map = {'a': 2, 'b': 0, 'c': 1}

    def partitions(self, mode):
        return [0, 1]

    def example_generator(self, mode, partition):
        for i in range(3):
            example = {'label': self.labels[i % len(self.labels)]}
            if i == 0:
                example['image_fobj'] = io.BytesIO(imagemaker.jpeg(20, 20, seed=partition * 10 + i))
            else:
                example.update(image_bytes=imagemaker.png(20, 20, seed=partition * 10 + i),
                               filename=f'p{partition}_{i}.png')
            if self.extra:
                example.update(weight=0.5 * i, tags=['x', str(i)], index=partition * 10 + i)
            yield example


@pytest.mark.slow
def test_in_memory_images_label_map_partitions_and_extras(tmp_path):
    import tensorflow as tf
    out = str(tmp_path / 'out')
    convert(f'--output_dir={out}', config=MemoryConfig())
    spec = {'weight': tf.io.FixedLenFeature([], tf.float32),
            'index': tf.io.FixedLenFeature([], tf.int64), 'tags': tf.io.VarLenFeature(tf.string)}
    rows = sorted(read_split(out, 'train', spec), key=lambda r: r['index'])
    assert [r['index'] for r in rows] == [0, 1, 2, 10, 11, 12]
    assert [r[records.LABEL] for r in rows] == [2, 0, 2, 2, 0, 2]
    assert [list(r['tags']) for r in rows][1] == [b'x', b'1']
    assert rows[2]['weight'] == 1.0 and rows[4][records.FILENAME] == 'p1_1.png'
    assert open(os.path.join(out, 'labels.txt')).read() == 'b\nc\na\n'
    import tensorflow_datasets as tfds
    example = next(iter(tfds.as_numpy(tfds.builder_from_directory(out).as_dataset(split='train'))))
    assert set(example) >= {records.ENCODED, records.LABEL, 'weight', 'tags', 'index'}


@pytest.mark.slow
def test_label_missing_from_map_fails_before_any_image_is_read(tmp_path):
    with pytest.raises(Exception) as info:
        convert(f'--output_dir={tmp_path}/out', config=MemoryConfig(labels=('a', 'zz')))
    assert DatasetError.find_in(info.value) == (
        "label 'zz' (split train) is not in MemoryConfig.text_label_map; add it there or fix the input")
    # Labels are resolved before any chunk is converted: nothing was read or written.
    assert os.listdir(tmp_path / 'out') == []


@pytest.mark.slow
def test_job_api_takes_flags_and_options_by_name_and_rejects_unknown_names(tmp_path):
    from pipeline import job
    root = write_tree(tmp_path / 'in', {f'train/c{i % 2}/{i}.jpg': imagemaker.jpeg(20, 20, seed=i)
                                        for i in range(6)})
    summary = job.convert([f'--input_dir={root}', NO_LEAKAGE_CHECK],
                          output_dir=str(tmp_path / 'out'), num_shards=2,
                          direct_running_mode='in_memory', direct_num_workers=1)
    assert (summary['splits']['train']['records'], summary['splits']['train']['shards']) == (6, 2)
    with pytest.raises(DatasetError) as info:
        job.convert([f'--input_dir={root}'], output_dir=str(tmp_path / 'x'), num_shard=2)
    assert str(info.value) == "unknown option 'num_shard'; did you mean 'num_shards'?"


@pytest.mark.slow
def test_more_labels_than_num_labels_is_an_error(tmp_path):
    root = write_tree(tmp_path / 'in', {f'train/c{i}/x.jpg': imagemaker.jpeg(20, 20) for i in range(3)})
    with pytest.raises(Exception) as info:
        convert(f'--input_dir={root}', f'--output_dir={tmp_path}/out', '--num_labels=2')
    assert "found 3 distinct labels ('c0', 'c1', 'c2'), more than num_labels = 2" in DatasetError.find_in(info.value)


@pytest.mark.slow
def test_label_offset_reserves_background(tmp_path):
    root = write_tree(tmp_path / 'in', {f'train/c{i}/x.jpg': imagemaker.jpeg(20, 20) for i in range(2)})
    out = str(tmp_path / 'out')
    convert(f'--input_dir={root}', f'--output_dir={out}', '--label_offset=1')
    assert sorted(r[records.LABEL] for r in read_split(out, 'train')) == [1, 2]
    assert open(os.path.join(out, 'labels.txt')).read() == 'background\nc0\nc1\n'


@pytest.mark.slow
def test_a_class_folder_empty_in_every_split_takes_no_id_unless_the_labels_file_names_it(
        tmp_path):
    """As docs/inputs.md says: train/a, an empty train/b, train/c give a 0 and c 1; a labels
    file keeps b's id."""
    root = write_tree(tmp_path / 'in', {'train/a/x.jpg': imagemaker.jpeg(20, 20, seed=1),
                                        'train/c/y.jpg': imagemaker.jpeg(20, 20, seed=2)})
    os.makedirs(os.path.join(root, 'train', 'b'))
    (tmp_path / 'labels.txt').write_text('a\nb\nc\n')
    for flags, names, ids in (((), 'a\nc\n', [0, 1]),
                              ((f'--labels_file={tmp_path}/labels.txt',), 'a\nb\nc\n', [0, 2])):
        out = str(tmp_path / f'out{len(flags)}')
        convert(f'--input_dir={root}', f'--output_dir={out}', *flags)
        assert open(os.path.join(out, 'labels.txt')).read() == names
        assert sorted(r[records.LABEL] for r in read_split(out, 'train')) == ids


@pytest.mark.slow
def test_inconsistent_extras_and_bad_dicts_are_clear_errors(tmp_path):
    class Inconsistent(MemoryConfig):
        def example_generator(self, mode, partition):
            for example in super().example_generator(mode, partition):
                if partition == 1:
                    example['weight'] = 'heavy'
                yield example

    with pytest.raises(Exception) as info:
        convert(f'--output_dir={tmp_path}/a', config=Inconsistent())
    assert DatasetError.find_in(info.value) == (
        "extra feature 'weight' is a single float in some examples and a single text in others; "
        'yield one type')

    class Bad(MemoryConfig):
        def example_generator(self, mode, partition):
            yield {'image_path': '/x.jpg'}

    with pytest.raises(Exception) as info:
        convert(f'--output_dir={tmp_path}/b', config=Bad())
    assert DatasetError.find_in(info.value).startswith(
        "Bad.example_generator('train') yielded a dict with keys ['image_path']; it needs 'label'")


"""Loading helpers return exactly the written records: tf.data and a real PyTorch DataLoader."""
import collections
import hashlib

import numpy as np
import pytest

from pipeline.output import records
from pipeline.testing import imagemaker
from tests.helpers import convert, pixels, read_split, write_tree

pytestmark = pytest.mark.slow   # Every test reads a dataset converted once per module.


def dataset(*args, **kwargs):
    """pipeline/readers/tf_data.py's, imported (with TensorFlow) only when a test runs."""
    from pipeline.readers.tf_data import dataset as tf_dataset
    return tf_dataset(*args, **kwargs)


@pytest.fixture(scope='module')
def written(tmp_path_factory):
    files = {f'train/c{c}/{i}.png': imagemaker.png(20 + i, 10 + c, seed=c * 10 + i)
             for c in range(3) for i in range(7)}
    files.update({f'test/c{c}/{i}.jpg': imagemaker.jpeg(30, 20, seed=500 + c * 10 + i)
                  for c in range(3) for i in range(2)})
    root = write_tree(tmp_path_factory.mktemp('in'), files)
    out = str(tmp_path_factory.mktemp('out') / 'ds')
    convert(f'--input_dir={root}', f'--output_dir={out}', '--num_shards=3')
    # TensorFlow and Pillow decode JPEGs with slightly different IDCTs: one expectation each.
    expected = {split: _items((pixels(r), r[records.LABEL]) for r in read_split(out, split))
                for split in ('train', 'test')}
    expected.update({f'{split}-pillow': _items((imagemaker.decode(r[records.ENCODED]), r[records.LABEL])
                                               for r in read_split(out, split))
                     for split in ('train', 'test')})
    return out, expected


def _items(pairs) -> collections.Counter:
    return collections.Counter((hashlib.sha256(np.asarray(image).tobytes()).hexdigest(), int(label))
                               for image, label in pairs)


def test_tf_data_returns_every_record_once(written):
    out, expected = written
    plain = list(dataset(out, 'train').as_numpy_iterator())
    assert _items(plain) == expected['train'] and len(plain) == 21
    assert plain[0][0].dtype == np.uint8 and plain[0][0].shape[2] == 3
    shuffled = list(dataset(out, 'train', shuffle_files=True, shuffle_buffer=8, seed=1).as_numpy_iterator())
    assert _items(shuffled) == expected['train']
    assert [int(l) for _, l in list(dataset(out, 'train').as_numpy_iterator())] == [int(l) for _, l in plain]


@pytest.mark.parametrize('workers', [0, 2, 5])
def test_torch_dataloader_workers_split_records_without_duplicates(written, workers):
    import torch   # Imported here: collecting the tests of the quick tier need not import it.
    from pipeline.readers.torch_data import TFRecordImageDataset
    out, expected = written
    loader = torch.utils.data.DataLoader(TFRecordImageDataset(out, 'train'), batch_size=None,
                                         num_workers=workers)
    items = [(image.numpy(), label) for image, label in loader]
    assert _items(items) == expected['train-pillow'] and len(items) == 21
    assert all(image.dtype == np.uint8 and image.ndim == 3 for image, _ in items)


def test_torch_ranks_partition_the_split(written):
    from pipeline.readers.torch_data import TFRecordImageDataset
    out, expected = written
    parts = [list(TFRecordImageDataset(out, 'test', rank=r, world_size=2)) for r in range(2)]
    assert _items([(i.numpy(), l) for part in parts for i, l in part]) == expected['test-pillow']
    assert all(parts)

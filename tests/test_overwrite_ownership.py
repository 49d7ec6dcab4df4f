"""`--overwrite` replaces only a dataset this tool wrote: a folder that TFDS built (its own
dataset_info.json, shards named by the same template) holding the user's labels.txt and
summary.json is refused in one line naming the files, with or without `--overwrite`."""
import numpy as np
import pytest

from pipeline.testing import imagemaker
from tests.helpers import cli, output_files, write_tree


@pytest.fixture
def tfds_folder(tmp_path) -> str:
    """Two shards of `pets` and the metadata tfds.folder_dataset.write_metadata adds to them,
    plus the user's own labels.txt and summary.json."""
    import tensorflow as tf
    import tensorflow_datasets as tfds
    out = str(tmp_path / 'pets')
    features = tfds.features.FeaturesDict({'image': tfds.features.Image(shape=(None, None, 3)),
                                           'label': tfds.features.ClassLabel(names=['cat', 'dog'])})
    write_tree(out, {'labels.txt': b'dog\ncat\n', 'summary.json': b'{"accuracy": 0.93}\n'})
    for shard in range(2):
        with tf.io.TFRecordWriter(f'{out}/pets-train.tfrecord-{shard:05d}-of-00002') as writer:
            for label in range(2):
                writer.write(features.serialize_example(
                    {'image': np.zeros((4, 4, 3), np.uint8), 'label': label}))
    tfds.folder_dataset.write_metadata(data_dir=out, features=features, split_infos=None,
                                       check_data=False)
    return out


@pytest.mark.parametrize('flags', [[], ['--overwrite'], ['--overwrite', '--dataset_name=pets']])
def test_a_folder_tfds_built_is_refused_and_left_as_it_was(tmp_path, tfds_folder, flags):
    before = output_files(tfds_folder)
    assert len(before) == 7
    inputs = write_tree(tmp_path / 'in', {f'train/c{i % 2}/{i}.jpg': imagemaker.jpeg(30, 20, seed=i)
                                          for i in range(4)})
    result = cli(f'--input_dir={inputs}', f'--output_dir={tfds_folder}', *flags)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f'error: {tfds_folder} holds files this run would overwrite that are not part of a '
        'dataset it replaces: dataset_info.json, features.json, labels.txt, summary.json; move '
        'them away or choose another --output_dir']
    assert output_files(tfds_folder) == before
    import tensorflow_datasets as tfds
    assert tfds.builder_from_directory(tfds_folder).info.splits['train'].num_examples == 4


@pytest.mark.slow
def test_overwrite_leaves_a_file_of_the_users_with_an_old_metadata_name(tmp_path):
    """A dataset that noted its metadata files (summary.json's digests) owns only those: a file
    named like the class-names file of earlier versions is the user's."""
    inputs = write_tree(tmp_path / 'in', {f'train/c{i % 2}/{i}.jpg': imagemaker.jpeg(30, 20, seed=i)
                                          for i in range(4)})
    out = tmp_path / 'out'
    flags = [f'--input_dir={inputs}', f'--output_dir={out}']
    assert cli(*flags).returncode == 0
    (out / 'image-class-label.labels.txt').write_text('my own class list\n')
    assert cli(*flags, '--overwrite').returncode == 0
    assert (out / 'image-class-label.labels.txt').read_text() == 'my own class list\n'

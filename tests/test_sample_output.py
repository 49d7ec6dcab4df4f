"""The generated sample replaces its own earlier output in ./sample_tfrecords, and nothing else."""
import os

import pytest

from pipeline.testing import imagemaker
from tests.helpers import cli, output_files, write_tree


@pytest.mark.slow
def test_the_sample_refuses_a_dataset_that_is_not_the_sample(tmp_path):
    root = write_tree(tmp_path / 'in', {f'train/c{i % 2}/{i}.jpg': imagemaker.jpeg(24, 20, seed=i)
                                        for i in range(4)})
    work = tmp_path / 'work'
    assert cli(f'--input_dir={root}', f'--output_dir={work}/sample_tfrecords').returncode == 0
    before = output_files(f'{work}/sample_tfrecords')
    refused = cli(cwd=str(work))
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1] == (
        'error: ./sample_tfrecords holds a dataset that is not the generated sample (e.g. '
        'dataset_info.json); the sample replaces only its own. Move it away, or run the command '
        'from another folder')
    assert output_files(f'{work}/sample_tfrecords') == before
    os.rename(f'{work}/sample_tfrecords', f'{work}/moved')
    made = cli(cwd=str(work))   # (Replacing its own: tests/test_sample.py.)
    assert made.returncode == 0, made.stderr
    assert sorted(os.listdir(work)) == ['moved', 'sample_tfrecords']

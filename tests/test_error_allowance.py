"""A few broken files of a small split are skipped and reported, not a failed run; a split whose
inputs mostly fail (a wrong column, an unreadable bucket) still fails, and a --max_error_ratio
given is held exactly."""
import json

import pytest

from pipeline.testing import imagemaker
from tests.helpers import cli, write_tree


@pytest.fixture(scope='module')
def small(tmp_path_factory):
    """150 images in two classes, 3 of them broken (2%: over the 1% default)."""
    files = {f'train/c{i % 2}/{i}.jpg': imagemaker.jpeg(24, 20, seed=i) for i in range(147)}
    files.update({f'train/c0/broken-{i}.jpg': b'not an image' for i in range(3)})
    return write_tree(tmp_path_factory.mktemp('small'), files)


@pytest.mark.slow
def test_a_few_broken_files_of_a_small_split_are_skipped_and_reported(small, tmp_path):
    result = cli(f'--input_dir={small}', f'--output_dir={tmp_path}/out')
    assert result.returncode == 0, result.stderr
    summary = json.load(open(f'{tmp_path}/out/summary.json'))
    assert (summary['splits']['train']['records'], summary['splits']['train']['skipped']) == (147, 3)
    errors = [json.loads(line) for line in open(f'{tmp_path}/out/errors-train.jsonl')]
    assert sorted(e['source'].rsplit('/', 1)[1] for e in errors) == [
        'broken-0.jpg', 'broken-1.jpg', 'broken-2.jpg']


@pytest.mark.slow
def test_the_ratio_given_is_held_and_a_split_that_mostly_fails_fails(small, tmp_path):
    strict = cli(f'--input_dir={small}', f'--output_dir={tmp_path}/strict', '--max_error_ratio=0.01')
    assert strict.returncode == 2
    assert strict.stderr.splitlines()[-1].startswith(
        "error: 3 of 150 inputs of split 'train' (2.0%) could not be converted, more than "
        '--max_error_ratio 0.01; nothing was committed. See ')
    mostly = write_tree(tmp_path / 'mostly', {**{f'train/c/{i}.jpg': b'text' for i in range(8)},
                                             'train/c/ok.jpg': imagemaker.jpeg(24, 20)})
    failed = cli(f'--input_dir={mostly}', f'--output_dir={tmp_path}/mostly-out')
    assert failed.returncode == 2
    assert failed.stderr.splitlines()[-1].startswith(
        "error: 8 of 9 inputs of split 'train' (88.9%) could not be converted")

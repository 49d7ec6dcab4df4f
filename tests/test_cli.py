"""The command line's small promises: one line for a bad flag value, nothing left behind."""
import os

import pytest

from tests import imagemaker
from tests.cli import run_cli
from tests.helpers import write_tree


@pytest.mark.parametrize('flag,expected', [
    ('--num_shards=abc', "error: flag --num_shards: invalid int value: 'abc'"),
    ('--plan_format=xml', "error: flag --plan_format: invalid choice: 'xml' (choose from 'text', "
                          "'json')"),
    ('--direct_num_workers=x', "error: flag --direct_num_workers: invalid int value: 'x'"),
])
def test_a_bad_flag_value_is_one_line(tmp_path, flag, expected):
    inputs = write_tree(tmp_path / 'in', {'train/a/1.jpg': imagemaker.jpeg(20, 20)})
    result = run_cli(f'--input_dir={inputs}', f'--output_dir={tmp_path}/out', flag)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f'{expected}; python -m pipeline.run --help lists every flag']
    assert not os.path.exists(f'{tmp_path}/out')

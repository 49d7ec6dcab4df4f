"""The figures at the end of a run, through the command line: each says what it measures, and
work reused from an interrupted attempt is not counted as converted."""
import glob
import json
import re
import signal

import pytest

from pipeline.testing import imagemaker
from tests.helpers import IN_PROCESS, run_cli, write_tree

pytestmark = pytest.mark.slow

TOTAL = re.compile(r'(\d+) inputs in [\d.]+ s of wall time, start-up included '
                   r'\(((\d+) converted now: )?\d+ inputs/s\)')
WRITTEN = re.compile(r'train shard \d/4 written: \d+ images, [\d.]+ MB, 0 skipped; converted at '
                     r'\d+ images/s per worker')
REUSED = re.compile(r'train shard \d/4 reused from an earlier attempt: \d+ images, [\d.]+ MB, '
                    r'0 skipped')


def _flags(tmp_path) -> list[str]:
    inputs = write_tree(tmp_path / 'in', {f'train/c{i % 3}/{i}.jpg':
                                          imagemaker.jpeg(24, 16, seed=i) for i in range(600)})
    return [f'--input_dir={inputs}', f'--output_dir={tmp_path}/out', '--num_shards=4',
            *IN_PROCESS]   # 5 chunks, converted one at a time.


def _killed_at(point: str, flags: list[str]) -> None:
    result = run_cli(*flags, kill_at=point)
    assert result.returncode == -signal.SIGKILL


def test_a_run_reports_its_wall_time_and_each_shard_its_conversion_rate(tmp_path):
    result = run_cli(*_flags(tmp_path))
    assert result.returncode == 0, result.stderr
    total = [m for m in map(TOTAL.fullmatch, result.stdout.splitlines()) if m]
    assert len(total) == 1 and total[0][1] == '600' and total[0][2] is None
    assert 'reused' not in result.stdout
    assert len([line for line in result.stderr.splitlines() if WRITTEN.fullmatch(line)]) == 4


def test_inputs_reused_after_an_interruption_are_not_counted_as_converted(tmp_path):
    flags = _flags(tmp_path)
    _killed_at('chunk:3', flags)
    reused = 0
    for sidecar in glob.glob(f'{tmp_path}/out/.tmp-*/parts/*.tfrecord.json'):
        part = json.load(open(sidecar))
        reused += part['records'] + part['errors']
    result = run_cli(*flags)
    assert result.returncode == 0, result.stderr
    total = [m for m in map(TOTAL.fullmatch, result.stdout.splitlines()) if m]
    assert len(total) == 1 and int(total[0][3]) == 600 - reused
    assert f'reused 3 of 5 chunks converted by an earlier attempt ({reused} inputs)' \
        in result.stdout.splitlines()


def test_a_shard_finished_before_an_interruption_is_reported_as_reused(tmp_path):
    flags = _flags(tmp_path)
    _killed_at('shard:1', flags)
    result = run_cli(*flags)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len([line for line in lines if REUSED.fullmatch(line)]) == 1
    assert len([line for line in lines if WRITTEN.fullmatch(line)]) == 3

"""The figures at the end of a run, through the command line: each says what it measures, and
work reused from an interrupted attempt is not counted as converted."""
import glob
import json
import re
import signal

import pytest

from tests.helpers import IN_PROCESS, cli, killed_at

pytestmark = pytest.mark.slow

TOTAL = re.compile(r'(\d+) inputs in [\d.]+ s of wall time, start-up included '
                   r'\(((\d+) converted now: )?\d+ inputs/s\)')
WRITTEN = re.compile(r'train shard \d/4 written: \d+ images, [\d.]+ MB, 0 skipped; converted at '
                     r'\d+ images/s per worker')
REUSED = re.compile(r'train shard \d/4 reused from an earlier attempt: \d+ images, [\d.]+ MB, '
                    r'0 skipped')


@pytest.fixture
def flags(tmp_path, image_folders) -> list[str]:
    """600 inputs in 5 chunks, converted one at a time, into 4 shards, without the check for
    copies across splits (--leakage=off): what is tested is the figures of the conversion and of
    its reuse, and the check's Beam stages take half of a small conversion's time."""
    return [f'--input_dir={image_folders(600)}', f'--output_dir={tmp_path}/out', '--num_shards=4',
            *IN_PROCESS, '--leakage=off']


def _killed_at(point: str, flags: list[str]) -> None:
    result = killed_at(point, *flags)
    assert result.returncode == -signal.SIGKILL


def test_a_run_reports_its_wall_time_and_each_shard_its_conversion_rate(flags):
    result = cli(*flags)
    assert result.returncode == 0, result.stderr
    total = [m for m in map(TOTAL.fullmatch, result.stdout.splitlines()) if m]
    assert len(total) == 1 and total[0][1] == '600' and total[0][2] is None
    assert 'reused' not in result.stdout
    assert len([line for line in result.stderr.splitlines() if WRITTEN.fullmatch(line)]) == 4


def test_inputs_reused_after_an_interruption_are_not_counted_as_converted(tmp_path, flags):
    _killed_at('chunk:3', flags)
    reused = 0
    for sidecar in glob.glob(f'{tmp_path}/out/.tmp-*/parts/*.tfrecord.json'):
        part = json.load(open(sidecar))
        reused += part['records'] + part['errors']
    result = cli(*flags)
    assert result.returncode == 0, result.stderr
    total = [m for m in map(TOTAL.fullmatch, result.stdout.splitlines()) if m]
    assert len(total) == 1 and int(total[0][3]) == 600 - reused
    assert f'reused 3 of 5 chunks converted by an earlier attempt ({reused} inputs)' \
        in result.stdout.splitlines()


def test_a_shard_finished_before_an_interruption_is_reported_as_reused(flags):
    _killed_at('shard:1', flags)
    result = cli(*flags)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len([line for line in lines if REUSED.fullmatch(line)]) == 1
    assert len([line for line in lines if WRITTEN.fullmatch(line)]) == 3

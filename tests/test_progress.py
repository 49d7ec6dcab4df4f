"""Live progress of a conversion on the console: inputs done of the total, the rate and the
time left, as lines in a log and in place on a terminal, before the per-shard lines."""
import os
import pty
import re
import subprocess
import sys

import pytest

from pipeline.progress import status_text
from pipeline.testing import imagemaker
from tests.helpers import IN_PROCESS, run_cli, write_tree

PROGRESS = re.compile(r'converting: ([\d,]+) of 1,000 inputs \(\d+%\), [\d,]+ inputs/s, '
                      r'about \d+ (s|min) left')


@pytest.fixture
def inputs(tmp_path):
    """Images large enough that re-encoding them spans many polls of the progress display."""
    return write_tree(tmp_path / 'in', {f'train/c{i % 3}/{i}.jpg': imagemaker.jpeg(800, 600,
                                                                                   seed=i)
                                        for i in range(1000)})


def test_a_log_gets_progress_lines_while_chunks_are_converted(tmp_path, inputs):
    result = run_cli(f'--input_dir={inputs}', f'--output_dir={tmp_path}/out', '--num_shards=2',
                     '--reencode', *IN_PROCESS)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    progress = [n for n, line in enumerate(lines) if PROGRESS.fullmatch(line)]
    shards = [n for n, line in enumerate(lines) if ' written: ' in line]
    assert progress and len(shards) == 2 and max(progress) < min(shards)
    done = [int(PROGRESS.fullmatch(lines[n])[1].replace(',', '')) for n in progress]
    assert done == sorted(done) and 0 < done[0] and done[-1] < 1000   # Seen while converting.
    assert len(progress) <= 10   # About a line per tenth of the work.
    assert '\r' not in result.stderr


def test_a_terminal_gets_one_status_line_redrawn_in_place(tmp_path, inputs):
    parent, child = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, '-m', 'pipeline.run', f'--input_dir={inputs}',
         f'--output_dir={tmp_path}/out', '--num_shards=2', '--reencode', *IN_PROCESS],
        stdout=subprocess.PIPE, stderr=child, text=True)
    os.close(child)
    shown = b''
    while True:
        try:
            data = os.read(parent, 4096)
        except OSError:   # The terminal closed: the process ended.
            break
        if not data:
            break
        shown += data
    os.close(parent)
    assert process.wait(timeout=300) == 0
    screen = shown.decode().replace('\r\n', '\n')
    redraws = [part.removeprefix('\x1b[K') for part in screen.split('\r')[1:]]
    assert any(PROGRESS.match(part) for part in redraws)
    assert screen.count('\n') == 2 + 1   # No progress lines: the two shard lines, the commit.
    assert ' written: ' in screen.split('\n')[0]   # Drawn over the status line, which is cleared.


def test_status_text_counts_reused_work_apart():
    assert status_text(500, 2000, 6000, 2.0) == (
        'converting: 500 of 2,000 inputs (25%) (6,000 reused from an earlier attempt), '
        '250 inputs/s, about 6 s left')
    assert status_text(0, 2000, 0, 1.0) == 'converting: 0 of 2,000 inputs (0%)'

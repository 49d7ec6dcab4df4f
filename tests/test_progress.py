"""Live progress of a conversion on the console: inputs done of the total, the rate and the
time left, as lines in a log and in place on a terminal, before the per-shard lines."""
import os
import pty
import re
import signal
import subprocess
import sys

import pytest

from pipeline.progress import status_text
from pipeline.testing import imagemaker
from tests.helpers import IN_PROCESS, cli, write_tree

PROGRESS = re.compile(r'converting: ([\d,]+) of 600 inputs \(\d+%\), [\d,]+ inputs/s, '
                      r'about \d+ (s|min) left')
LISTING = re.compile(r'listing folder .+: ([\d,]+) inputs, [\d,]+/s')
DONE = re.compile(r'converting: 600 of 600 inputs \(100%\), [\d,]+ inputs/s')


@pytest.fixture(scope='module')
def inputs(tmp_path_factory):
    """600 images (5 chunks) large enough that re-encoding them spans many polls of the progress
    display; 20 different ones, each in 30 files."""
    images = [imagemaker.jpeg(800, 600, seed=i) for i in range(20)]
    return write_tree(tmp_path_factory.mktemp('in'), {f'train/c{i % 3}/{i}.jpg': images[i % 20]
                                                      for i in range(600)})


@pytest.mark.slow
def test_a_log_gets_progress_lines_while_chunks_are_converted(tmp_path, inputs):
    result = cli(f'--input_dir={inputs}', f'--output_dir={tmp_path}/out', '--num_shards=2',
                 '--reencode')
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    progress = [n for n, line in enumerate(lines) if PROGRESS.fullmatch(line)]
    shards = [n for n, line in enumerate(lines) if ' written: ' in line]
    assert progress and len(shards) == 2 and max(progress) < min(shards)
    done = [int(PROGRESS.fullmatch(lines[n])[1].replace(',', '')) for n in progress]
    assert done == sorted(done) and 0 < done[0] and done[-1] < 600   # Seen while converting.
    assert len(progress) <= 10   # About a line per tenth of the work.
    assert [n for n, line in enumerate(lines) if DONE.fullmatch(line)] == [min(shards) - 1]
    assert '\r' not in result.stderr


def _on_a_terminal(inputs, output_dir, *flags) -> tuple[subprocess.Popen, int]:
    """The command line with stderr on a pseudo-terminal: (process, the terminal's reading end)."""
    parent, child = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, '-m', 'pipeline.run', f'--input_dir={inputs}', f'--output_dir={output_dir}',
         '--num_shards=2', '--reencode', *flags],
        stdout=subprocess.PIPE, stderr=child, text=True, start_new_session=True)
    os.close(child)
    return process, parent


def _read_until(parent: int, done=lambda shown: False) -> bytes:
    """What the terminal shows until `done(shown)` or the process closes it."""
    shown = b''
    while not done(shown):
        try:
            data = os.read(parent, 4096)
        except OSError:   # The terminal closed: the process ended.
            break
        if not data:
            break
        shown += data
    return shown


@pytest.mark.slow
def test_a_terminal_gets_one_status_line_redrawn_in_place(tmp_path, inputs):
    process, parent = _on_a_terminal(inputs, f'{tmp_path}/out', *IN_PROCESS)
    shown = _read_until(parent)
    os.close(parent)
    assert process.wait(timeout=300) == 0
    screen = shown.decode().replace('\r\n', '\n')
    redraws = [part.removeprefix('\x1b[K') for part in screen.split('\r')[1:]]
    assert any(PROGRESS.match(part) for part in redraws)
    # What is listed is named at once, before any count; counts, where seen, before converting.
    assert redraws[0] == f'listing folder {inputs}'
    listing = [n for n, part in enumerate(redraws) if LISTING.fullmatch(part)]
    assert all(n < min(n for n, part in enumerate(redraws) if PROGRESS.match(part))
               and int(LISTING.fullmatch(redraws[n])[1].replace(',', '')) <= 600 for n in listing)
    # The last status, at 100%, stays as a line; then the two shard lines and the commit, with
    # nothing redrawn after them.
    lines = [line.rsplit('\r\x1b[K', 1)[-1] for line in screen.split('\n')]
    assert DONE.fullmatch(lines[0]) and ' written: ' in lines[1] and ' written: ' in lines[2]
    assert lines[3].startswith('dataset committed') and screen.count('\n') == 4
    assert '\r' not in screen.split('\n', 1)[1]


def test_status_text_counts_reused_work_apart():
    assert status_text(500, 2000, 6000, 2.0) == (
        'converting: 500 of 2,000 inputs (25%) (6,000 reused from an earlier attempt), '
        '250 inputs/s, about 6 s left')
    assert status_text(0, 2000, 0, 1.0) == 'converting: 0 of 2,000 inputs (0%)'


@pytest.mark.slow
def test_ctrl_c_ends_the_status_line_at_once(tmp_path, inputs):
    process, parent = _on_a_terminal(inputs, f'{tmp_path}/out', '--direct_num_workers=2')
    converting = re.compile(rb'converting: [1-9][\d,]* of')
    _read_until(parent, lambda shown: converting.search(shown))
    os.killpg(process.pid, signal.SIGINT)   # As a terminal's Ctrl-C.
    after = _read_until(parent).decode()
    os.close(parent)
    assert process.wait(timeout=120) == 130
    assert 'interrupted; rerun the same command to resume' in after
    assert 'converting:' not in after   # Not redrawn while the runner stops.

"""Ctrl-C during a conversion: one line on the console, the lock released, and the same command
resumes the work. The command line runs as a subprocess in its own process group, which gets
SIGINT as a terminal's Ctrl-C sends it."""
import glob
import os
import signal
import subprocess
import time

import pytest

from pipeline import faults, worker_watch
from pipeline.testing import imagemaker
from tests.helpers import (IN_PROCESS, alive_after, cli, plain_split, read_split, start_cli,
                           start_until_converting, write_tree)

pytestmark = pytest.mark.slow

INTERRUPTED = 'interrupted; rerun the same command to resume'


@pytest.fixture(scope='module')
def many(tmp_path_factory) -> str:
    """3000 inputs: a run on one worker per core converts for seconds (50 different images)."""
    images = [imagemaker.jpeg(256, 192, seed=i) for i in range(50)]
    return write_tree(tmp_path_factory.mktemp('many'), {f'train/c{i % 3}/{i}.jpg': images[i % 50]
                                                        for i in range(3000)})


def test_ctrl_c_prints_one_line_releases_the_lock_and_the_rerun_resumes(tmp_path, many):
    inputs = many
    out = str(tmp_path / 'out')
    flags = [f'--input_dir={inputs}', f'--output_dir={out}', '--num_shards=2']
    process = start_until_converting(out, *flags, poll=0.05)
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert [line for line in stderr.splitlines() if not line.startswith('converting: ')] == [
        INTERRUPTED]
    assert stdout == ''
    assert not os.path.exists(f'{out}/.lock')
    assert not glob.glob(f'{out}/*.tfrecord-*')

    rerun = cli(*flags)
    assert rerun.returncode == 0, rerun.stderr
    assert 'resuming run' in rerun.stderr
    assert len(read_split(out, 'train')) == 3000


def test_sigterm_to_the_launcher_stops_its_workers_releases_the_lock_and_the_rerun_resumes(
        tmp_path, many):
    inputs = many
    out = str(tmp_path / 'out')
    flags = [f'--input_dir={inputs}', f'--output_dir={out}', '--num_shards=2']
    process = start_until_converting(out, *flags, poll=0.05)
    workers = worker_watch.worker_processes(process.pid)
    assert workers
    os.kill(process.pid, signal.SIGTERM)   # The launcher only, as a service manager sends it.
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    assert [line for line in stderr.splitlines() if not line.startswith('converting: ')] == [
        'terminated (SIGTERM); rerun the same command to resume']
    assert stdout == ''
    assert not os.path.exists(f'{out}/.lock')
    assert not alive_after(workers)   # None runs on, unseen.

    rerun = cli(*flags)
    assert rerun.returncode == 0, rerun.stderr
    assert 'resuming run' in rerun.stderr
    assert len(read_split(out, 'train')) == 3000


def test_sigterm_to_a_run_in_one_process_is_its_line_not_the_step_it_stopped(tmp_path, many):
    # Beam's in-memory mode runs the steps in the launcher, and reported the signal raised
    # inside one as that step's error (exit 2).
    out = str(tmp_path / 'out')
    process = start_until_converting(out, f'--input_dir={many}', f'--output_dir={out}',
                                     *IN_PROCESS, poll=0.05)
    os.kill(process.pid, signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    assert [line for line in stderr.splitlines() if not line.startswith('converting: ')] == [
        'terminated (SIGTERM); rerun the same command to resume']
    assert not os.path.exists(f'{out}/.lock')


@pytest.fixture(scope='module')
def few(tmp_path_factory) -> str:
    return write_tree(tmp_path_factory.mktemp('few'), {
        f'train/c{i % 3}/{i}.jpg': imagemaker.jpeg(64, 48, seed=i) for i in range(200)})


@pytest.mark.parametrize('number,code,line', [
    (signal.SIGINT, 130, INTERRUPTED),
    (signal.SIGTERM, 143, 'terminated (SIGTERM); rerun the same command to resume')])
@pytest.mark.parametrize('delay', [0.0, 0.5])
def test_a_stop_signal_while_the_workers_start_ends_the_run_at_once(tmp_path, few, number, code,
                                                                   line, delay):
    """The runner's own cleanup waited forever for a worker still starting (the lock held)."""
    out = str(tmp_path / 'out')
    process = start_cli(f'--input_dir={few}', f'--output_dir={out}', '--reencode')
    workers = {}
    while not workers:
        assert process.poll() is None, process.communicate()
        workers = worker_watch.worker_processes(process.pid)
        time.sleep(0.02)
    time.sleep(delay)
    os.kill(process.pid, number)   # The launcher only.
    try:
        _, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    assert process.returncode == code, stderr
    assert [x for x in stderr.splitlines() if not x.startswith('converting: ')] == [line]
    assert not os.path.exists(f'{out}/.lock')
    assert not alive_after(workers)


def _catches(pid: int, number: int) -> bool:
    """Whether process `pid` has a handler for signal `number` (/proc's SigCgt mask)."""
    with open(f'/proc/{pid}/status') as status:
        mask = next(line for line in status if line.startswith('SigCgt:')).split()[1]
    return bool(int(mask, 16) >> (number - 1) & 1)


@pytest.mark.parametrize('number,code,line', [
    (signal.SIGINT, 130, INTERRUPTED),
    (signal.SIGTERM, 143, 'terminated (SIGTERM); rerun the same command to resume')])
def test_a_stop_signal_while_the_command_imports_is_one_line(tmp_path, few, number, code, line):
    # The first second of the command is its imports: a stop then was a traceback (SIGINT) or
    # a silent death (SIGTERM).
    process = start_cli(f'--input_dir={few}', f'--output_dir={tmp_path}/out')
    while not _catches(process.pid, signal.SIGTERM):
        assert process.poll() is None
        time.sleep(0.005)
    with open(f'/proc/{process.pid}/maps') as maps:   # Beam's runner not imported yet.
        assert 'cygrpc' not in maps.read()
    os.kill(process.pid, number)
    _, stderr = process.communicate(timeout=60)
    assert (process.returncode, stderr.splitlines()) == (code, [line])
    assert not os.path.exists(tmp_path / 'out')


def _state(pid: int) -> str | None:
    """A process's state letter in /proc (T: stopped), None once it is gone."""
    try:
        with open(f'/proc/{pid}/stat') as stat:
            return stat.read().rsplit(')', 1)[1].split()[0]
    except OSError:
        return None


def _until_paused(process: subprocess.Popen) -> dict[int, str]:
    """The workers of `process` once one of them stopped itself at its pause point."""
    while True:
        assert process.poll() is None, process.communicate()
        workers = worker_watch.worker_processes(process.pid)
        if any(_state(pid) == 'T' for pid in workers):
            return workers
        time.sleep(0.02)


def _interrupted(process: subprocess.Popen) -> tuple[int, list[str]]:
    """SIGINT to the process group, as Ctrl-C sends it: (exit code, lines but progress)."""
    os.killpg(process.pid, signal.SIGINT)
    try:
        _, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    return process.returncode, [x for x in stderr.splitlines() if not x.startswith('converting: ')]


def test_the_first_stop_wins_at_every_instant_of_a_background_job(tmp_path, few):
    """Started as a shell starts a background job (SIGINT ignored), the command took a SIGINT to
    its process group as its workers did: a worker that died of it was reported as a dead worker
    (exit 2), and one that had not started yet ignored it, so the run committed (exit 0)."""
    out = tmp_path / 'out'
    flags = [f'--input_dir={few}', f'--output_dir={out}', '--num_shards=2', '--leakage=off']

    def started(pause: str | None = None) -> subprocess.Popen:
        env = dict(os.environ, **({faults.STOP_ENV: pause} if pause else {}))
        return start_cli(*flags, env=env, ignoring=(signal.SIGINT,))

    process = started('chunk:1')   # While the workers convert: one stopped after a chunk.
    workers = _until_paused(process)
    assert _interrupted(process) == (130, [INTERRUPTED])
    assert not alive_after(workers)
    assert sorted(os.listdir(out)) == [os.path.basename(glob.glob(f'{out}/.tmp-*')[0])]

    process = started()   # The resumed run, in its first second: its workers just forked.
    workers = {}
    while not workers:
        assert process.poll() is None, process.communicate()
        workers = worker_watch.worker_processes(process.pid)
        time.sleep(0.005)
    assert _interrupted(process) == (130, [INTERRUPTED])
    assert not alive_after(workers)
    assert not os.path.exists(out / '.lock') and not os.path.exists(out / 'dataset_info.json')

    process = started('commit:journal')   # Once the commit began (its journal written).
    workers = _until_paused(process)
    code, lines = _interrupted(process)
    assert (code, lines[-1]) == (130, f'interrupted after the dataset was committed to {out}')
    assert not [x for x in lines if x.startswith(('error', 'Traceback'))], lines
    assert not alive_after(workers)
    assert not glob.glob(f'{out}/.*')   # No journal, lock or temporary folder left.
    assert len(plain_split(str(out), 'train')) == 200

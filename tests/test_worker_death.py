"""A worker process of a default local run (one per core) that dies, as an out-of-memory kill
ends it, stops the run at any stage in one line, the lock released and no worker left; the same
command then resumes and writes exactly the dataset an uninterrupted run writes."""
import os
import signal
import subprocess
import sys

import pytest

from pipeline.worker_watch import worker_processes
from tests.helpers import alive_after, cli, output_files, run_cli, start_until_converting

pytestmark = pytest.mark.slow

DIED = ('error: a worker process of this run died (killed by SIGKILL; the system kills one this '
        'way when memory runs out) and the run stopped. Rerun the same command to resume it; if '
        'a worker dies again, run fewer at once (--direct_num_workers=N) or give the machine '
        'more memory')


@pytest.fixture(scope='module')
def inputs(image_folders) -> str:
    return image_folders(900)


@pytest.fixture(scope='module')
def reference(inputs, tmp_path_factory) -> dict:
    """The files an uninterrupted run writes (the same on any runner)."""
    out = str(tmp_path_factory.mktemp('reference') / 'out')
    assert cli(f'--input_dir={inputs}', f'--output_dir={out}', '--num_shards=3').returncode == 0
    return output_files(out)


def _python_workers(launcher: int) -> list[int]:
    """The Python processes of the launcher's workers (each runs under a shell)."""
    found = []
    for pid in worker_processes(launcher):
        with open(f'/proc/{pid}/cmdline', 'rb') as stream:
            if stream.read().split(b'\0')[0] == sys.executable.encode():
                found.append(pid)
    return found


def _assert_stopped_then_resumed(result, flags: list[str], out: str, reference: dict) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1] == DIED
    assert 'Traceback' not in result.stderr and result.stdout == ''
    assert not os.path.exists(f'{out}/.lock')
    rerun = cli(*flags)
    assert rerun.returncode == 0, rerun.stderr
    assert output_files(out) == reference


def test_worker_killed_while_converting(tmp_path, inputs, reference):
    out = str(tmp_path / 'out')
    flags = [f'--input_dir={inputs}', f'--output_dir={out}', '--num_shards=3']
    process = start_until_converting(out, *flags, poll=0.01)
    workers = worker_processes(process.pid)
    os.kill(_python_workers(process.pid)[0], signal.SIGKILL)
    try:
        stdout, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    assert not alive_after(workers)   # None left.
    _assert_stopped_then_resumed(subprocess.CompletedProcess(process.args, process.returncode,
                                                             stdout, stderr),
                                 flags, out, reference)


@pytest.mark.parametrize('point', ['shard:1', 'commit:journal'])
def test_worker_dying_while_joining_shards_or_committing(tmp_path, inputs, reference, point):
    """The worker kills itself with SIGKILL at the crash point: after writing its first shard,
    or in the commit step (which runs on a worker) once the journal is written."""
    out = str(tmp_path / 'out')
    flags = [f'--input_dir={inputs}', f'--output_dir={out}', '--num_shards=3']
    _assert_stopped_then_resumed(run_cli(*flags, kill_at=point, timeout=60), flags, out,
                                 reference)

"""The command line's worker processes (pipeline/worker_processes.py): forked from the launcher
before the run, as many as the run uses, none left behind; one that dies before it is given
work stops the run as any dead worker does; Ctrl-C or SIGTERM while they are forked ends the
command at once; a launcher killed takes its workers with it; the Python API starts its workers
itself; the command freezes what its imports made before it forks them."""
import os
import signal
import subprocess
import sys
import time

import pytest

from pipeline import job
from pipeline.launch import resolve
from pipeline.testing import imagemaker
from pipeline.worker_watch import start_time, worker_processes as workers_below
from tests.helpers import alive_after, cli, output_files, read_split, start_cli, write_tree

CORES = os.cpu_count()


@pytest.mark.parametrize('argv,workers', [
    ([], CORES), (['--input_dir', 'in', '--output_dir=out'], CORES),
    (['--runner=DirectRunner'], CORES), (['--runner', 'direct'], CORES),
    (['--direct_running_mode=multi_processing', '--direct_num_workers=3'], 3),
    (['--direct_running_mode', 'multi_processing'], 1),   # Beam's default: one worker.
    (['--direct_num_workers=3'], 3), (['--direct_num_workers', '1'], 1),
    (['--direct_num_workers=0'], CORES),
    (['--direct_num_workers=3', '--direct_running_mode=in_memory'], 0),   # In this process.
    (['--direct_running_mode=multi_threading'], 0), (['--direct_running_mode=in_memory'], 0),
    (['--runner=DataflowRunner', '--project=p'], 0), (['--runner=PrismRunner'], 0),
    (['--plan_only'], CORES),   # It times a sample on the workers.
    (['--runner=DataflowRunner', '--project=p', '--temp_location=gs://bucket/tmp',
      '--dry_run=true'], 0), (['--dry_run=false'], CORES),
    (['--dry_run=no', '--plan_only'], CORES),
    (['--help'], 0), (['-h'], 0)])
def test_the_workers_forked_are_those_the_run_starts(argv, workers):
    assert resolve(argv).workers == workers


def _ended(process, timeout: float) -> tuple[str, str]:
    """(stdout, stderr) of `process` once it ends; killed with its group if it does not."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise




def _workers_while_it_runs(process) -> dict[int, str]:
    """Every worker process seen below `process` until it ends."""
    seen = {}
    while process.poll() is None:
        seen.update(workers_below(process.pid))
        time.sleep(0.01)
    return seen


@pytest.fixture(scope='module')
def inputs(tmp_path_factory) -> str:
    return write_tree(tmp_path_factory.mktemp('in'), {
        f'train/c{i % 2}/{i}.jpg': imagemaker.jpeg(32, 24, seed=i) for i in range(40)})


@pytest.mark.slow
def test_the_command_runs_in_workers_forked_before_it_and_leaves_none(tmp_path, inputs):
    """Their lines reach the console as they are, a non-ASCII path too."""
    out = f'{tmp_path}/sortie-été-出力'
    process = start_cli(f'--input_dir={inputs}', f'--output_dir={out}',
                        '--direct_running_mode=multi_processing', '--direct_num_workers=2')
    deadline = time.monotonic() + 60
    while len(workers := workers_below(process.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    with open(f'/proc/{process.pid}/cmdline', 'rb') as stream:
        launcher = stream.read()
    commands = []
    for pid in workers:
        with open(f'/proc/{pid}/cmdline', 'rb') as stream:
            commands.append(stream.read())
    stdout, stderr = _ended(process, 120)
    assert process.returncode == 0, stderr
    assert len(workers) == 2 and commands == [launcher, launcher]   # Forked, not started anew.
    assert [line for line in stderr.splitlines() if not line.startswith(
        ('converting: ', 'train shard 1/1 written: ', 'dataset committed to '))] == []
    assert f'dataset committed to {out}' in stderr.splitlines()
    assert len(read_split(out, 'train')) == 40
    assert not alive_after(workers)


@pytest.mark.slow
def test_workers_of_a_command_with_nothing_to_convert_are_ended(tmp_path, inputs):
    out = str(tmp_path / 'out')
    flags = [f'--input_dir={inputs}', f'--output_dir={out}']
    assert cli(*flags).returncode == 0
    written = output_files(out)
    again = start_cli(*flags)
    workers = _workers_while_it_runs(again)
    stdout, stderr = _ended(again, 60)
    assert again.returncode == 0, stderr
    assert 'converted by an earlier run of this command' in stdout
    assert output_files(out) == written
    assert len(workers) == CORES and not alive_after(workers)


@pytest.mark.slow
def test_a_worker_killed_before_it_is_given_work_stops_the_run_and_the_rerun_resumes(
        tmp_path, inputs):
    out = str(tmp_path / 'out')
    flags = [f'--input_dir={inputs}', f'--output_dir={out}', '--num_shards=2']
    process = start_cli(*flags)
    deadline = time.monotonic() + 60
    while not (workers := workers_below(process.pid)) and time.monotonic() < deadline:
        time.sleep(0.002)
    os.kill(next(iter(workers)), signal.SIGKILL)
    stdout, stderr = _ended(process, 120)
    assert process.returncode == 2, stderr
    assert stderr.splitlines()[-1].startswith('error: a worker process of this run died '
                                              '(killed by SIGKILL;')
    assert 'Traceback' not in stderr and stdout == ''
    assert not os.path.exists(f'{out}/.lock')
    assert not alive_after(workers)
    assert cli(*flags).returncode == 0
    assert len(read_split(out, 'train')) == 40


@pytest.mark.slow
def test_the_python_api_starts_its_own_workers(tmp_path, inputs):
    out = str(tmp_path / 'out')
    summary = job.convert([f'--input_dir={inputs}', f'--output_dir={out}',
                           '--direct_running_mode=multi_processing', '--direct_num_workers=2'])
    assert summary['splits']['train']['records'] == 40
    assert len(read_split(out, 'train')) == 40


def _first_worker(process) -> dict[int, str | None]:
    """{pid: start time} of a child of `process`, as soon as it has one (its first worker, being
    forked)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(f'/proc/{process.pid}/task/{process.pid}/children') as stream:
            found = stream.read().split()
        if found:
            return {int(found[0]): start_time(int(found[0]))}
        assert process.poll() is None, process.communicate()
    raise AssertionError('no worker was forked')


@pytest.mark.slow
@pytest.mark.parametrize('stop,code,line', [
    ('SIGINT', 130, 'interrupted; rerun the same command to resume'),   # Ctrl-C, to the group.
    ('SIGTERM', 143, 'terminated (SIGTERM); rerun the same command to resume')])
@pytest.mark.parametrize('delay', [0.0, 0.0005, 0.002, 0.01])
def test_a_stop_while_the_workers_are_forked_ends_the_command_at_once(tmp_path, inputs, delay,
                                                                      stop, code, line):
    out = str(tmp_path / 'out')
    process = start_cli(f'--input_dir={inputs}', f'--output_dir={out}')
    worker = _first_worker(process)
    time.sleep(delay)
    if stop == 'SIGINT':
        os.killpg(process.pid, signal.SIGINT)
    else:
        os.kill(process.pid, signal.SIGTERM)   # The launcher alone, as a service manager sends it.
    stdout, stderr = _ended(process, 60)
    assert process.returncode == code, stderr
    assert stderr.splitlines()[-1] == line
    assert 'Traceback' not in stderr and 'Exception ignored' not in stderr
    assert not os.path.exists(f'{out}/.lock')
    assert not alive_after(worker)


@pytest.mark.slow
def test_workers_end_with_a_launcher_killed_as_it_hands_them_work(tmp_path, inputs):
    process = start_cli(f'--input_dir={inputs}', f'--output_dir={tmp_path / "out"}')
    claimed = None
    deadline = time.monotonic() + 60
    while claimed is None and time.monotonic() < deadline:
        for pid, started in workers_below(process.pid).items():
            try:   # Handed its work: its stderr is the run's log, no longer the launcher's pipe.
                if os.readlink(f'/proc/{pid}/fd/2').endswith('.log'):
                    claimed = {pid: started}
            except OSError:
                pass
    assert claimed, process.communicate()
    os.kill(process.pid, signal.SIGKILL)
    _ended(process, 60)   # Returns once no worker holds the pipes any longer.
    assert not alive_after(claimed)


@pytest.mark.slow
@pytest.mark.parametrize('argv0,command', [('image-tfrecords', True), ('my_script.py', False)])
def test_the_command_freezes_its_imports_and_a_library_import_leaves_the_collector_alone(
        argv0, command):
    """The command line freezes what its imports made before it forks its workers (so no full
    collection scans it again); importing the module as a library changes nothing."""
    probe = ('import gc, sys; sys.argv = [sys.argv[1], "--help"]; import pipeline.run; '
             'print(gc.isenabled(), gc.get_freeze_count() > 100_000)')
    result = subprocess.run([sys.executable, '-c', probe, argv0], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ['True', str(command)]

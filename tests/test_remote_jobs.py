"""A job that a service runs, followed by the command line to its end: Beam's own job service on
127.0.0.1 stands in for Dataflow (and a Flink or Spark job server), with workers that hold only
the package a submission stages (pipeline/testing/job_service.py). A job that succeeds, one that
fails, one detached and followed up with --attach, the lock of an ended job taken over, and a
followed command stopped by Ctrl-C or SIGTERM (a real process)."""
import json
import os
import re
import shlex
import signal
import time

import pytest
from apache_beam.runners.runner import PipelineState

from pipeline import beam_internals, faults
from pipeline.testing.job_service import JobService, worker_python
from tests.helpers import cli, output_files, start_cli

pytestmark = pytest.mark.slow
FAILED_LINE = re.compile(r"error: job (job-[0-9a-f-]+) ended FAILED: KeyError: 'beam:env:process:v1'")


@pytest.fixture(scope='module')
def service(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp('job-service'))
    running = JobService(folder, worker_python(folder))
    yield running
    running.stop()


@pytest.fixture(scope='module')
def inputs(image_folders) -> list[str]:
    return [f'--input_dir={image_folders(60)}', '--num_shards=3']


@pytest.fixture(scope='module')
def direct(inputs, tmp_path_factory) -> dict:
    """What a local run writes."""
    out = tmp_path_factory.mktemp('direct')
    assert cli(*inputs, f'--output_dir={out}').returncode == 0
    return output_files(str(out))


def _lock(out) -> dict:
    with open(os.path.join(out, '.lock')) as stream:
        return json.load(stream)


def _ended(service: JobService, job_id: str) -> str:
    """The state the job ends in, once the service says it ended."""
    deadline, job = time.monotonic() + 300, beam_internals.portable_result(service.endpoint, job_id)
    while True:
        state = str(job.state)
        if PipelineState.is_terminal(state) or time.monotonic() > deadline:
            return state
        time.sleep(0.2)


def _attach_argv(stdout: str) -> list[str]:
    """The follow-up command a detached run prints, as argv."""
    line = next(line for line in stdout.splitlines() if '--attach=' in line)
    return shlex.split(line.split('python -m pipeline.run', 1)[1])


def test_a_failed_job_ends_the_command_with_its_own_error_and_frees_the_output(
        tmp_path, service, inputs):
    result = cli(*inputs, f'--output_dir={tmp_path}/out', *service.failing_flags())
    assert result.returncode == 1, result.stderr
    assert FAILED_LINE.fullmatch(result.stderr.splitlines()[-1]), result.stderr
    assert 'Traceback' not in result.stderr and result.stdout == ''
    assert os.listdir(tmp_path / 'out') == []   # No lock, no temporary folder, no dataset.


def test_a_followed_job_ends_once_its_dataset_is_committed_and_takes_over_an_ended_jobs_lock(
        tmp_path, service, inputs, direct):
    out = tmp_path / 'out'
    detached = cli(*inputs, f'--output_dir={out}', *service.failing_flags(), '--detach')
    assert detached.returncode == 0, detached.stderr
    job = _lock(out)['job']
    assert job['where'] == service.endpoint and f'Job {job["id"]} submitted' in detached.stdout
    assert _ended(service, job['id']) == 'FAILED'
    assert _lock(out)['job'] == job   # A detached job's failure frees nothing by itself.

    followed = cli(*inputs, f'--output_dir={out}', *service.flags())
    assert followed.returncode == 0, followed.stderr
    assert f'taking over (its job ended FAILED) the lock {out}/.lock' in followed.stderr
    assert f', job {job["id"]} at {service.endpoint}' in followed.stderr
    assert 'converting: 60 of 60 inputs (100%)' in followed.stderr
    assert f'Wrote dataset to {out}. Load it with:' in followed.stdout
    assert 'train' in followed.stdout.splitlines()[1] and ' 60 ' in followed.stdout.splitlines()[1]
    assert output_files(str(out)) == direct   # Committed, lock released, nothing else left.


def test_a_detached_job_is_named_in_its_lock_and_followed_up_with_attach(
        tmp_path, service, inputs, direct):
    out = tmp_path / 'out'
    detached = cli(*inputs, f'--output_dir={out}', *service.flags(), '--detach')
    assert detached.returncode == 0, detached.stderr
    job_id = _lock(out)['job']['id']
    argv = _attach_argv(detached.stdout)
    assert argv == [f'--attach={job_id}', f'--output_dir={out}', '--runner=PortableRunner',
                    f'--job_endpoint={service.endpoint}']
    followed = cli(*argv)
    assert followed.returncode == 0, followed.stderr
    assert f'Wrote dataset to {out}. Load it with:' in followed.stdout
    assert output_files(str(out)) == direct
    again = cli(*argv)   # The job has ended: the same answer at once.
    assert (again.returncode, again.stdout) == (0, followed.stdout)


def test_a_detached_job_that_fails_is_reported_by_attach_which_frees_the_output(
        tmp_path, service, inputs):
    out = tmp_path / 'out'
    detached = cli(*inputs, f'--output_dir={out}', *service.failing_flags(), '--detach')
    followed = cli(*_attach_argv(detached.stdout))
    assert followed.returncode == 1, followed.stderr
    assert FAILED_LINE.fullmatch(followed.stderr.splitlines()[-1]), followed.stderr
    assert os.listdir(out) == []


def test_a_lock_whose_job_the_service_does_not_say_ended_is_refused(tmp_path, service, inputs):
    out = tmp_path / 'out'
    os.makedirs(out)
    holder = {'token': 'f' * 32, 'run_id': 'r', 'host': 'elsewhere', 'pid': 1, 'waits': False,
              'started': '2026-12-07T10:00:00+00:00', 'runner': 'PortableRunner'}
    for job in ({'id': 'job-unknown', 'runner': 'PortableRunner', 'where': service.endpoint},
                {'id': 'job-x', 'runner': 'PortableRunner', 'where': '10.0.0.2:8099'}):
        (out / '.lock').write_text(json.dumps({**holder, 'job': job}))
        result = cli(*inputs, f'--output_dir={out}', *service.flags())
        assert result.returncode == 2
        assert result.stderr.startswith(f'error: {out} is being written by another run: ')
        assert f'job {job["id"]} at {job["where"]}' in result.stderr
        assert 'Its job is running as far as the service given to this run tells' in result.stderr
        assert _lock(out)['job'] == job


@pytest.mark.parametrize('stop,code,line', [(signal.SIGINT, 130, 'interrupted'),
                                            (signal.SIGTERM, 143, 'terminated (SIGTERM)')])
def test_a_stop_while_following_leaves_the_job_running_and_says_how_to_follow_it(
        tmp_path, service, inputs, direct, stop, code, line):
    out = tmp_path / 'out'
    process = start_cli(*inputs, f'--output_dir={out}', *service.flags())
    seen = []
    while not any('submitted as job' in text for text in seen):
        seen.append(process.stderr.readline())
        assert seen[-1] or process.poll() is None, seen
    process.send_signal(stop)
    stdout, stderr = process.communicate(timeout=120)
    job_id = re.search(r'submitted as job (\S+) to ', seen[-1])[1]
    assert process.returncode == code, stderr
    assert stderr.splitlines()[-1] == (
        f'{line}: stopped following; the job {job_id} goes on without this command (cancel it '
        f"with the job API's Cancel (job id {job_id}) at {service.endpoint}, or the UI of the "
        f'runner behind it (Flink, Spark)); follow it again with python -m pipeline.run '
        f'--attach={job_id} --output_dir={out} --runner=PortableRunner '
        f'--job_endpoint={service.endpoint}')
    assert stdout == ''
    followed = cli(*_attach_argv(stderr))   # The job went on to its end, and committed.
    assert followed.returncode == 0, followed.stderr
    assert output_files(str(out)) == direct


def test_detach_is_refused_where_this_command_runs_the_job(tmp_path, inputs):
    result = cli(*inputs, f'--output_dir={tmp_path}', '--detach')
    assert (result.returncode, result.stderr) == (
        2, 'error: --detach hands a job to a service that runs it alone (Dataflow, or a job server '
           'at host:port with workers of its own); this runner runs it in this command\n')


def test_a_service_that_stops_answering_leaves_the_output_to_its_job(tmp_path, service, inputs):
    """Whether the job still runs cannot be known: its lock stays, and the line says so. (Its
    worker stops itself at its first chunk, so the job cannot end before its service does.)"""
    folder = tmp_path / 'service'
    os.makedirs(folder)
    lost = JobService(str(folder), service.worker, {faults.STOP_ENV: 'chunk:1'})
    try:
        process = start_cli(*inputs, f'--output_dir={tmp_path}/out', *lost.flags())
        while 'submitted as job' not in process.stderr.readline():
            assert process.poll() is None
    finally:
        lost.stop()
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 1, stderr
    job = _lock(tmp_path / 'out')['job']
    assert stderr.splitlines()[-1] == (
        f'error: the service at {lost.endpoint} stopped answering about job {job["id"]}'
        "; it may still run and hold the output's lock: --attach "
        'follows it once the service answers')

"""The command line's small promises: one line for a bad flag value, nothing left behind in the
temp folder by its process, nor in the process that runs it as a function."""
import logging
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading

import pytest

from pipeline.output import records
from pipeline.testing import imagemaker
from pipeline.testing.gcs_servers import free_port
from tests.helpers import cli, read_split, run_cli, write_tree


@pytest.mark.parametrize('flag,expected', [
    ('--num_shards=abc', "error: flag --num_shards: invalid int value: 'abc'"),
    ('--plan_format=xml', "error: flag --plan_format: invalid choice: 'xml' (choose from 'text', "
                          "'json')"),
    ('--direct_num_workers=x', "error: flag --direct_num_workers: invalid int value: 'x'"),
])
def test_a_bad_flag_value_is_one_line(tmp_path, flag, expected):
    inputs = write_tree(tmp_path / 'in', {'train/a/1.jpg': imagemaker.jpeg(20, 20)})
    result = cli(f'--input_dir={inputs}', f'--output_dir={tmp_path}/out', flag)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f'{expected}; python -m pipeline.run --help lists every flag']
    assert not os.path.exists(f'{tmp_path}/out')


@pytest.mark.slow
def test_a_run_that_fails_on_the_users_error_leaves_no_log_file(tmp_path):
    temp = tmp_path / 'tmp'
    temp.mkdir()
    inputs = write_tree(tmp_path / 'in', {'train/a/1.jpg': b'not an image'})
    env = dict(os.environ, TMPDIR=str(temp))
    for argv in ([f'--output_dir={tmp_path}/out'],
                 [f'--input_dir={inputs}', f'--output_dir={tmp_path}/out', '--num_shards=x'],
                 [f'--input_dir={inputs}', f'--output_dir={tmp_path}/out']):   # All skipped.
        result = run_cli(*argv, env=env)
        assert result.returncode == 2 and result.stderr.splitlines()[-1].startswith('error: ')
        assert 'the full trace is in' not in result.stderr
        assert [os.path.join(d, n) for d, _, names in os.walk(temp) for n in names] == []


@pytest.mark.slow
def test_simple_example_script_converts_and_leaves_nothing_in_the_temp_folder(tmp_path):
    """The classic example script, its config class in __main__, as a process of its own."""
    temp = tmp_path / 'tmp'
    temp.mkdir()
    result = subprocess.run([sys.executable, '-m', 'pipeline.classic.simple_example',
                             '--num_classes=3', f'--save_dir={tmp_path}'], capture_output=True,
                            text=True, env=dict(os.environ, TMPDIR=str(temp)), timeout=300)
    assert result.returncode == 0, result.stderr
    data_dir = f'{tmp_path}/image_classification_builder/simple/0.1.0'
    assert f'records to {data_dir}' in result.stdout
    assert 'Worker:' not in result.stderr
    labels = {r[records.TEXT]: r[records.LABEL] for r in read_split(data_dir, 'train')}
    assert labels == {'class-0': 0, 'class-1': 1, 'class-2': 2}
    assert [os.path.join(d, n) for d, _, names in os.walk(temp) for n in names] == []


@pytest.mark.slow
def test_the_python_api_prints_no_runner_worker_logs(tmp_path):
    inputs = write_tree(tmp_path / 'in', {f'train/c{i % 2}/{i}.jpg': imagemaker.jpeg(20, 20, seed=i)
                                          for i in range(4)})
    code = ("from pipeline import job; "
            f'summary = job.convert(["--input_dir={inputs}", "--output_dir={tmp_path}/out", '
            '"--direct_running_mode=multi_processing", "--direct_num_workers=2"]); '
            'print(summary["splits"]["train"]["records"])')
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout == '4\n'
    assert 'Worker:' not in result.stderr and 'apache_beam' not in result.stderr


@pytest.mark.slow
def test_missing_credentials_for_a_cloud_storage_path_is_one_line_with_the_fix(tmp_path):
    inputs = write_tree(tmp_path / 'in', {'train/a/1.jpg': imagemaker.jpeg(20, 20)})
    env = {k: v for k, v in os.environ.items() if k != 'STORAGE_EMULATOR_HOST'}
    nobody = f'127.0.0.1:{free_port()}'   # No metadata server: no machine credentials either.
    env.update(GCE_METADATA_HOST=nobody, GCE_METADATA_IP=nobody)
    result = run_cli(f'--input_dir={inputs}', '--output_dir=gs://my-bucket/out', env=env)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        'error: no Google Cloud credentials to access gs://my-bucket/out: run `gcloud auth '
        'application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a service account '
        'key file']


def test_worker_lines_of_any_module_of_ours_show_and_the_runners_do_not():
    """Worker records come to the launcher as protobuf text naming the file that logged them; a
    module in a sub-package (pipeline/output/) counts as ours like one at the top."""
    import logging

    from pipeline import beam_internals, console
    from pipeline.output import temp_folder

    def record(where: str) -> logging.LogRecord:
        entry = (f'severity: INFO\nmessage: "dataset committed to /tmp/caf\\303\\251"\n'
                 f'log_location: "{where}:76"\n')
        return logging.LogRecord(beam_internals.WORKER_LOGGER, logging.INFO, '', 0, 'Worker: %s',
                                 (entry,), None)

    assert console._worker_message(record(temp_folder.__file__)) == (
        'dataset committed to /tmp/café', True)
    beam_worker = logging.__file__.replace('logging/__init__.py', 'apache_beam/sdk_worker.py')
    assert console._worker_message(record(beam_worker)) == ('dataset committed to /tmp/café', False)


def _process_state() -> dict:
    """What a command run in this process could leave changed: loggers and their handlers,
    threads, signal handlers, streams, the environment, the current and the temporary folder."""
    loggers = {name: (logger.level, list(logger.handlers), logger.propagate, logger.disabled)
               for name, logger in logging.Logger.manager.loggerDict.items()
               if isinstance(logger, logging.Logger)}
    loggers = {name: state for name, state in loggers.items() if state != (0, [], True, False)}
    root = logging.getLogger()
    return {'loggers': loggers, 'root': (root.level, list(root.handlers)),
            'threads': set(threading.enumerate()), 'excepthook': threading.excepthook,
            'signals': {number: signal.getsignal(number)
                        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)},
            'streams': (sys.stdout, sys.stderr), 'environment': dict(os.environ),
            'folder': os.getcwd(), 'temporary files': sorted(os.listdir(tempfile.gettempdir()))}


@pytest.mark.slow
def test_a_command_run_in_this_process_leaves_nothing_behind(tmp_path, monkeypatch,
                                                             image_folders):
    """helpers.cli runs the command in the test's process: a conversion and a refusal leave no
    handler, logger level, thread, signal handler or temporary file behind."""
    (tmp_path / 'tmp').mkdir()
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path / 'tmp'))
    flags = [f'--input_dir={image_folders(30)}', f'--output_dir={tmp_path}/out', '--num_shards=2']
    before, children = _process_state(), _children_cpu_seconds()
    converted = cli(*flags, cwd=tmp_path)
    refused = cli(*flags, '--jpeg_quality=80')
    assert (converted.returncode, refused.returncode) == (0, 2), refused.stderr
    assert 'already holds a dataset' in refused.stderr
    assert _process_state() == before
    assert _children_cpu_seconds() == children   # No process was started (and waited for).


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime

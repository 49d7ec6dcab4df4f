"""Running conversions and reading their output back with TensorFlow, for the tests.

TensorFlow is imported by the functions that read records, so tests that read none start fast."""
import contextlib
import dataclasses
import glob
import io
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from apache_beam.testing.test_pipeline import TestPipeline

from pipeline import command, faults
from pipeline.local_runner import LocalRunner
from pipeline.output import records
from pipeline.testing.datasets import (  # noqa: F401 (re-exported)
    IN_PROCESS, convert, output_files, write_tree)

_RUNNER_FLAGS = ('--direct_', '--runner')
_current_folder = threading.Lock()   # The process's one current folder, while a command uses it.


def stage_pipeline() -> TestPipeline:
    """A TestPipeline on the runner of local runs (pipeline/local_runner.py)."""
    return TestPipeline(runner=LocalRunner())


def start_cli(*argv, env: dict | None = None, cwd=None,
              ignoring: tuple[int, ...] = ()) -> subprocess.Popen:
    """`python -m pipeline.run ARGV` in its own process group, as a shell starts a job; `env` is
    the whole environment (default: this process's); `ignoring`: signals it starts with ignored
    (a shell starts a background job with SIGINT ignored)."""
    def ignore():
        for number in ignoring:
            signal.signal(number, signal.SIG_IGN)
    return subprocess.Popen([sys.executable, '-m', 'pipeline.run', *argv], env=env, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=ignore if ignoring else None)


def start_until_converting(output_dir: str, *argv, poll: float = 0.02) -> subprocess.Popen:
    """`start_cli(*argv)`, returned once a chunk is converted into output_dir's temporary folder."""
    process = start_cli(*argv)
    while not glob.glob(f'{output_dir}/.tmp-*/parts/*.tfrecord.json'):
        assert process.poll() is None, process.communicate()
        time.sleep(poll)
    return process


@dataclasses.dataclass(frozen=True)
class Answer:
    """What a command line answered: as a finished process's, without the process."""
    returncode: int
    stdout: str
    stderr: str


class CommandTimeout(Exception):
    """A command run in this process took longer than its test allows."""


def cli(*argv, cwd=None, timeout: float = 300) -> Answer:
    """The command line `python -m pipeline.run ARGV` run to its end in this process
    (pipeline/command.py), for tests about what it answers (exit code, stdout, stderr, files
    written), not about its process. Without runner flags it converts on the in-memory runner:
    the bytes are the same on any runner. `cwd`: the current folder while it runs; a command
    still running after `timeout` seconds (reading a pipe by mistake, say) is stopped with a
    CommandTimeout, which it answers with an error line."""
    argv = [str(arg) for arg in argv]
    if not any(arg.startswith(_RUNNER_FLAGS) for arg in argv):
        argv += IN_PROCESS
    out, err = io.StringIO(), io.StringIO()
    with _in_folder(cwd), _stopped_after(timeout):
        code = command.main(argv, out, err)
    return Answer(code, out.getvalue(), err.getvalue())


def killed_at(point: str, *argv, timeout: float = 300) -> Answer:
    """The command line run in a process forked from this one, with the crash point `point`
    (pipeline/faults.py) where it kills itself: a real SIGKILL at an exact point, without a new
    Python's start-up. Its returncode is a subprocess's (-9: killed); stdout is not kept."""
    return _forked({faults.ENV: point}, argv, timeout)


def stopped_at(point: str, change, *argv, timeout: float = 300) -> Answer:
    """The command line run in a process forked from this one, stopped at the crash point
    `point` (faults.STOP_ENV), `change()` called while it is, then continued to its end (or to
    the point's next stop, which is continued at once)."""
    return _forked({faults.STOP_ENV: point}, argv, timeout, change)


def _forked(environment: dict, argv, timeout: float, change=None) -> Answer:
    argv = [str(arg) for arg in argv]
    if not any(arg.startswith(_RUNNER_FLAGS) for arg in argv):
        argv += IN_PROCESS
    with tempfile.TemporaryFile('w+') as err:
        pid = os.fork()
        if pid == 0:   # The child never returns: it ends here or at the crash point.
            code = 70
            try:
                os.environ.update(environment)
                with open(os.devnull, 'w') as out:
                    code = command.main(argv, out, err)
                err.flush()
            finally:
                os._exit(code)
        code = _waited(pid, timeout, change)
        err.seek(0)
        return Answer(code, '', err.read())


def _waited(pid: int, timeout: float, change=None) -> int:
    """The exit status of the child `pid` as a returncode, killed if it runs past `timeout`;
    each time it stops, `change()` is called (the first time) and it is continued."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG | os.WUNTRACED)
        if done and os.WIFSTOPPED(status):
            if change is not None:
                change()
                change = None
            os.kill(pid, signal.SIGCONT)
            continue
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise TimeoutError(f'the command did not reach its crash point in {timeout} s')
        time.sleep(0.01)


@contextlib.contextmanager
def _stopped_after(seconds: float):
    """Raises CommandTimeout in the block once it has run `seconds` (SIGALRM: blocking reads
    are interrupted too)."""
    def stop(signum, frame):
        raise CommandTimeout(f'the test stopped it after {seconds} s')

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _in_folder(cwd):
    """In the folder `cwd` while in the block (if given); one block at a time moves there."""
    if cwd is None:
        yield
        return
    with _current_folder, contextlib.chdir(cwd):
        yield


def run_cli(*argv, kill_at: str | None = None, env: dict | None = None, cwd=None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    """Runs the command line to its end; `kill_at` names a crash point (pipeline/faults.py)."""
    env = dict(os.environ if env is None else env)
    if kill_at:
        env['IMAGE_TFRECORDS_KILL_AT'] = kill_at
    process = start_cli(*argv, env=env, cwd=cwd)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def alive_after(processes: dict[int, str | None], seconds: float = 30) -> list[int]:
    """Those of {pid: start time} still running once all have ended, or after `seconds` (polled:
    a loaded machine takes its time to end them). A start time of None: gone when first seen."""
    from pipeline.worker_watch import start_time
    deadline = time.monotonic() + seconds
    while True:
        alive = [pid for pid, started in processes.items()
                 if started is not None and start_time(pid) == started]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


def run_with_module(folder, name: str, text: str, module: str, *argv,
                    kill_at: str | None = None) -> subprocess.CompletedProcess:
    """`module`'s main(argv) in a subprocess that imported the module `name` (source `text`,
    written into `folder`) first: a shard format or an input kind from outside the product."""
    (folder / f'{name}.py').write_text(text)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), root]))
    if kill_at:
        env['IMAGE_TFRECORDS_KILL_AT'] = kill_at
    code = f'import sys, {name}; from {module} import main; sys.exit(main(sys.argv[1:]))'
    return subprocess.run([sys.executable, '-c', code, *argv], env=env, capture_output=True,
                          text=True, timeout=300)


def shard_paths(output_dir: str, split: str) -> list[str]:
    return sorted(glob.glob(os.path.join(output_dir, f'*-{split}.tfrecord-*')))


def read_split(output_dir: str, split: str, extra_spec: dict | None = None,
               hashed: bool = True) -> list[dict]:
    """Every record of a split, parsed with tf.io.parse_single_example, as numpy values
    (`hashed`: each must carry the perceptual hashes; not so in a --leakage=off dataset)."""
    return read_files(shard_paths(output_dir, split), extra_spec, hashed)


def read_files(paths: list[str], extra_spec: dict | None = None,
               hashed: bool = True) -> list[dict]:
    import tensorflow as tf
    spec = records.parse_spec(hashed=hashed)
    spec.update(extra_spec or {})
    out = []
    for raw in tf.data.TFRecordDataset(paths):
        parsed = tf.io.parse_single_example(raw, spec)
        out.append({k: _value(v) for k, v in parsed.items()})
    return out


def _value(tensor):
    import tensorflow as tf
    if isinstance(tensor, tf.SparseTensor):
        tensor = tf.sparse.to_dense(tensor)
    value = tensor.numpy()
    if isinstance(value, bytes) and not value.startswith(b'\xff\xd8'):
        return value.decode()
    return value


def plain_records(paths: list[str]) -> list[dict]:
    """The records of shard files, in order, read without TensorFlow: {feature: value}, text as
    str, bytes as bytes (image/encoded)."""
    found = []
    for path in paths:
        with open(path, 'rb') as stream:
            found += [{name: value.decode() if records.IMAGE_FEATURES.get(name) == 'text' else value
                       for name, [value] in records.decode_example(data).items()}
                      for data in records.read_records(stream)]
    return found


def plain_split(out: str, split: str) -> list[dict]:
    """plain_records of a split's shards."""
    return plain_records(shard_paths(out, split))


def pixels(record: dict) -> np.ndarray:
    import tensorflow as tf
    return tf.io.decode_jpeg(record[records.ENCODED], channels=3).numpy()


def run_measured(*command, timeout: float = 300) -> tuple[subprocess.CompletedProcess, int]:
    """Runs `command` to its end; with the peak resident memory, in bytes, of the largest of
    its processes (the command and every process it waited for)."""
    wrapper = ('import resource, subprocess, sys\n'
               'code = subprocess.run(sys.argv[1:]).returncode\n'
               'print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n'
               'sys.exit(code)\n')
    result = subprocess.run([sys.executable, '-c', wrapper, *command], capture_output=True,
                            text=True, timeout=timeout)
    *lines, peak = result.stderr.splitlines()
    result.stderr = ''.join(line + '\n' for line in lines)
    return result, int(peak) * 1024

"""The worker processes of a local multi-process run, ready before the pipeline runs.

A worker that Beam's DirectRunner starts in multi-process mode (`python -m ...sdk_worker_main`,
once the pipeline runs) spends ~1.5 s of a core importing Beam and the converter, on top of the
launcher's own ~1.5 s of the same imports. The command line instead forks its workers as soon as
its imports are done (`prestart`), before it starts any thread of its own (imports started
OpenBLAS's and jemalloc's, which both handle a fork), with SIGINT and SIGTERM held back until
every child is forked: each child has every module already and waits, on a socket, until the
run hands it what Beam hands a worker it starts (the environment with the runner's addresses,
and the launcher's stdout and stderr as they are by then), then runs Beam's SDK harness.
Where nothing was forked (the Python API, a run asking for more workers) a worker is started as
`python -m pipeline.worker_processes`, which imports and then does the same. A worker nobody
claims is killed when the command ends; the kernel kills one whose launcher ends
(PR_SET_PDEATHSIG). Each names itself NAME (/proc/PID/comm), which is how worker_watch finds
them.
"""
import atexit
import contextlib
import ctypes
import gc
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import traceback

from pipeline.errors import STOPPING_SIGNALS

NAME = 'tfrecord-worker'   # At most 15 bytes: the kernel's limit for a process name.
_LENGTH = struct.Struct('>I')
_STOPS = {signal.SIGINT, *STOPPING_SIGNALS}
_PR_SET_PDEATHSIG = 1
_waiting: list['Worker'] = []


class Worker:
    """A worker process, waiting for `start`: forked from this process (`forked`, only before
    it starts threads) or started as a new Python process."""

    def __init__(self, forked: bool = False):
        ours, theirs = socket.socketpair()
        launcher = os.getpid()
        if forked:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                for socket_ in (ours, *(w._socket for w in _waiting)):   # The launcher's ends.
                    socket_.close()
                os._exit(_serve(theirs, launcher))
            self.process = _Forked(pid)
        else:
            self.process = subprocess.Popen(
                [sys.executable, '-m', __name__ if __name__ != '__main__' else
                 'pipeline.worker_processes', str(theirs.fileno()), str(launcher)],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        theirs.close()
        self._socket = ours

    def start(self, environment: dict[str, str]) -> None:
        """Hands the worker its environment and this process's stdout and stderr (raises
        OSError when the worker is gone)."""
        message = json.dumps(environment).encode()
        with self._socket:
            socket.send_fds(self._socket, [_LENGTH.pack(len(message))], [1, 2])
            self._socket.sendall(message)

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()
        self._socket.close()


class _Forked:
    """What this module uses of `subprocess.Popen`, for a forked child."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)


def prestart(count: int) -> None:
    """Forks `count` worker processes for the run to come (pipeline/launch.py says how many).
    Only before this process starts threads, with the modules workers need imported. A SIGINT
    or stopping signal that comes meanwhile is held back until the last fork (inside one,
    Python would lose it)."""
    if not os.path.isdir('/proc/self') or _waiting:
        return
    atexit.register(_kill_waiting)
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
    try:
        for _ in range(count):
            _waiting.append(Worker(forked=True))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def claim() -> Worker:
    """A started worker process: one that waits already, or a new one."""
    return _waiting.pop(0) if _waiting else Worker()


def _kill_waiting() -> None:
    while _waiting:
        _waiting.pop().kill()


def _receive(channel: socket.socket) -> tuple[dict[str, str], list[int]]:
    header, fds, _, _ = socket.recv_fds(channel, _LENGTH.size, 2)
    if len(header) < _LENGTH.size:
        raise EOFError
    (length,), message = _LENGTH.unpack(header), b''
    while len(message) < length:
        part = channel.recv(length - len(message))
        if not part:
            raise EOFError
        message += part
    return json.loads(message), fds


def _serve(channel: socket.socket, launcher: int) -> int:
    """The worker's side: wait, then run Beam's SDK harness as Beam would start it; the exit
    code."""
    with open('/proc/self/comm', 'w') as comm:
        comm.write(NAME)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the launcher's to handle.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)   # Ends with its launcher...
    if os.getppid() != launcher:   # ... which may have ended already.
        return 0
    from apache_beam.runners.worker import sdk_worker_main
    import pipeline.graph  # noqa: F401  (every DoFn a worker unpickles)
    gc.freeze()   # As the command line does before it forks (pipeline/run.py).
    with channel:
        try:
            environment, fds = _receive(channel)
        except (EOFError, OSError):
            return 0   # The launcher ended without this worker.
    for target, fd in zip((1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(environment)
    import tempfile
    tempfile.tempdir = None   # TMPDIR as the launcher set it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        sdk_worker_main.main(sys.argv)
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return 0


if __name__ == '__main__':
    sys.exit(_serve(socket.socket(fileno=int(sys.argv[1])), int(sys.argv[2])))

"""Ends a local multi-process run whose worker process died (killed when memory ran out, say),
in one line, instead of waiting for it forever or failing with the runner's own error.

A local multi-process run's workers are processes of pipeline/worker_processes.py, each handed
to the runner by a thread of this process that waits for it and reports a non-zero exit as that
thread's uncaught `RuntimeError` ('Worker subprocess exited with return code N'); the runner
itself may then wait forever for the dead worker's work. While `watching()`, that report is a
dead worker: the runner gets GRACE_SECONDS to fail on its own, then the remaining workers (the
processes below this one named as worker_processes names them, as /proc lists them) are killed
and the main thread gets WorkerDied, so the job's cleanup runs (the output lock is released). A
job that fails after a worker died fails with WorkerDied, whatever the runner says; no worker of
it is left running. A job interrupted (Ctrl-C, SIGTERM) has its workers killed at once, from the
signal handler, before the runner's own cleanup waits for them (which can wait forever for a
worker still starting), and ends interrupted whatever the runner then reports. Elsewhere (other
runners, in-memory mode, no /proc) it does nothing.
"""
import contextlib
import os
import signal
import threading
import time
from typing import Iterator

from pipeline import beam_internals, console
from pipeline.errors import STOPPING_SIGNALS, DatasetError
from pipeline.worker_processes import NAME as WORKER_NAME

GRACE_SECONDS = 3.0        # For the runner to fail on its own once a worker died.
SCAN_SECONDS = 0.5         # How often the worker processes are listed (to kill them later).
_INTERRUPT = signal.SIGUSR1
_STOP_SIGNALS = (signal.SIGINT, *(s for s in STOPPING_SIGNALS if s != _INTERRUPT))
_BEAM_WORKER = b'apache_beam.runners.worker.sdk_worker_main'   # Beam's own (its fallback).


class WorkerDied(DatasetError):
    """A worker process of the run died; the run stopped and can be resumed."""

    def __init__(self, how: str):
        super().__init__(f'a worker process of this run died ({how}; the system kills one this '
                         'way when memory runs out) and the run stopped. Rerun the same command '
                         'to resume it; if a worker dies again, run fewer at once '
                         '(--direct_num_workers=N) or give the machine more memory')


def _how(code: int) -> str:
    """A worker's exit code as its shell reports it (128 + N: killed by signal N)."""
    number = -code if code < 0 else code - 128 if code > 128 else 0
    try:
        return f'killed by {signal.Signals(number).name}' if number else f'exit status {code}'
    except ValueError:
        return f'exit status {code}'


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (none once it is gone)."""
    found = []
    for task in _listdir(f'/proc/{pid}/task'):
        with contextlib.suppress(OSError):
            with open(f'/proc/{pid}/task/{task}/children') as stream:
                found += [int(p) for p in stream.read().split()]
    return found


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def start_time(pid: int) -> str | None:
    """The start time of a live process (None when it is gone or a zombie)."""
    try:
        with open(f'/proc/{pid}/stat') as stream:
            fields = stream.read().rsplit(')', 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in 'ZXx' else fields[19]


def _is_worker(pid: int) -> bool:
    """Whether a process is a worker of a local run: one of pipeline/worker_processes.py, or one
    Beam started itself."""
    try:
        with open(f'/proc/{pid}/comm') as stream:
            if stream.read().rstrip('\n') == WORKER_NAME:
                return True
        with open(f'/proc/{pid}/cmdline', 'rb') as stream:
            return _BEAM_WORKER in stream.read().split(b'\0')
    except OSError:
        return False


def worker_processes(parent: int | None = None) -> dict[int, str]:
    """The worker processes below `parent` (default: this process): {pid: start time}."""
    found, todo = {}, children(os.getpid() if parent is None else parent)
    while todo:
        pid = todo.pop()
        todo += children(pid)
        started = start_time(pid)
        if started is not None and _is_worker(pid):
            found[pid] = started
    return found


class _Watch:
    def __init__(self):
        self.died: str | None = None        # How the first dead worker ended.
        self.interrupted: BaseException | None = None   # What the stop signal's handler raised.
        self._known: dict[int, str] = {}    # Every worker seen, kept when its shell is gone.
        self._stop, self._wake = threading.Event(), threading.Event()
        self._killing = threading.Lock()
        self.in_main = threading.current_thread() is threading.main_thread()
        self.armed = self.in_main          # Whether the main thread may still get WorkerDied.
        self._thread = threading.Thread(target=self._run, name='worker-watch', daemon=True)

    def hook(self, args: threading.ExceptHookArgs) -> None:
        """Takes the runner's report of a worker's non-zero exit (see the module docstring)."""
        code = beam_internals.worker_exit_code(args.exc_value)
        if code is not None and self.died is None:
            self.died = _how(code)
            self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._killing:
                self._known.update(worker_processes())
            if self._wake.wait(SCAN_SECONDS):
                break
        if self._stop.wait(GRACE_SECONDS):
            return
        self.kill_workers()
        if self.armed:
            signal.pthread_kill(threading.main_thread().ident, _INTERRUPT)

    def kill_workers(self) -> None:
        """SIGKILLs every worker seen that still runs and waits (a few seconds at most) until
        none does, so none writes to the output after the lock is released."""
        with self._killing:
            self._kill_workers()

    def keep_killing(self) -> None:
        """Kills the workers, and any the runner still starts, until the watch stops."""
        while not self._stop.is_set():
            self.kill_workers()
            self._stop.wait(0.2)

    def _kill_workers(self) -> None:
        self._known.update(worker_processes())
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            alive = [pid for pid, started in self._known.items() if start_time(pid) == started]
            if not alive:
                return
            for pid in alive:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join()


@contextlib.contextmanager
def watching() -> Iterator[None]:
    """Runs a local job under watch (see the module docstring): raises WorkerDied, with every
    worker process ended, when a worker died while it ran and it did not finish."""
    if not os.path.isdir('/proc/self/task'):
        yield
        return
    watch = _Watch()
    previous_hook = threading.excepthook
    threading.excepthook = _chained(watch, previous_hook)
    previous_handler = (signal.signal(_INTERRUPT, _raiser(watch, signal.getsignal(_INTERRUPT)))
                        if watch.in_main else None)
    stop_handlers = ({s: signal.signal(s, _stopper(watch, signal.getsignal(s)))
                      for s in _STOP_SIGNALS} if watch.in_main else {})
    watch.start()
    try:
        yield
    except KeyboardInterrupt:   # Ctrl-C, or SIGTERM to this process only: no worker outlives it.
        watch.kill_workers()
        raise
    except Exception as exc:
        if watch.interrupted is not None:   # The runner failed as its workers were stopped.
            raise watch.interrupted from exc
        if watch.died is None or DatasetError.find_in(exc):
            raise
        raise WorkerDied(watch.died) from exc
    finally:
        watch.armed = False
        watch.stop()
        if watch.died is not None or watch.interrupted is not None:
            watch.kill_workers()
        threading.excepthook = previous_hook
        for number, handler in stop_handlers.items():
            signal.signal(number, handler)
        if watch.in_main:
            signal.signal(_INTERRUPT, previous_handler or signal.SIG_DFL)


def _chained(watch: _Watch, previous):
    def hook(args: threading.ExceptHookArgs) -> None:
        watch.hook(args)
        previous(args)
    return hook


def _stopper(watch: _Watch, previous):
    """A stop signal's handler: the workers are killed at once, and any started later until the
    job ends (from a thread, so the handler returns), and the previous handler raises
    (KeyboardInterrupt by default); a later stop changes nothing."""
    def handler(signum, frame):
        if previous is signal.SIG_IGN or watch.interrupted is not None:
            return
        console.end_status()
        threading.Thread(target=watch.keep_killing, name='stop-workers', daemon=True).start()
        try:
            if callable(previous):
                previous(signum, frame)
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            watch.interrupted = exc
            raise
    return handler


def _raiser(watch: _Watch, previous):
    """SIGUSR1's handler: the watch's own (a worker died, or the run was stopped, and the runner
    waits on), or a stopping signal from outside, handled as the other stopping signals are."""
    stop = _stopper(watch, previous)

    def handler(signum, frame):
        if watch.died is None and watch.interrupted is None:
            return stop(signum, frame)
        if watch.armed:
            watch.armed = False
            raise watch.interrupted or WorkerDied(watch.died)
    return handler

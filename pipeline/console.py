"""Console output of local runs: our progress lines, without the runner's worker chatter.

DirectRunner worker processes send their log records to the launcher, which prints them as raw
protobuf text ('Worker: severity: ... message: "..."'). The console shows the message of our own
records as a plain line and hides the rest, including the runner's tracebacks of a failed step:
the launcher reports the failure in one line. Every record, unfiltered, goes to a log file,
and so does what worker processes print; `--verbose` shows it all on the console instead.
"""
import contextlib
import logging
import os
import re
import sys
import threading
from typing import Callable, Iterator

from google.protobuf import text_encoding

import pipeline
import transforms

_WORKER_LOGGER = 'apache_beam.runners.portability.local_job_service'
_ENTRY = re.compile(r'message: "(?P<message>(?:[^"\\]|\\.)*)".*?log_location: "(?P<where>[^"]*)"',
                    re.S)
# Where our modules are, sub-packages included: a worker record logged from there is ours.
_OURS = tuple(os.path.dirname(os.path.abspath(package.__file__)) + os.sep
              for package in (pipeline, transforms))
TRACE = 'image_tfrecords.trace'   # For the log file; the console shows it with --verbose only.
_watchers: list[Callable[[str], None]] = []   # Called with each line before it is shown.
_output_lock = threading.RLock()   # Without the command line's console: orders our output.


class _ConsoleFilter(logging.Filter):
    def __init__(self, verbose: bool):
        super().__init__()
        self._verbose = verbose

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == _WORKER_LOGGER and record.msg == 'Worker: %s' and record.args:
            found = _worker_message(record)
            if found is None:
                return self._verbose
            record.msg, record.args = found[0], ()
            return found[1] or self._verbose
        if record.name == 'image_tfrecords':
            return True
        if record.name.startswith('apache_beam.runners'):
            return self._verbose
        return record.levelno >= logging.WARNING or self._verbose


def _worker_message(record: logging.LogRecord) -> tuple[str, bool] | None:
    """(message, whether it is one of our own lines) of a worker's log record, if it has one."""
    match = _ENTRY.search(str(record.args[0]))
    if match is None:
        return None
    message = text_encoding.CUnescape(match['message']).decode('utf-8', 'replace')
    ours = match['where'].startswith(_OURS) and 'Traceback (most recent' not in message
    return message, ours


class _OwnWorkerLines(logging.Filter):
    """Without the command line's console (the Python API): our own lines from worker processes
    go to the 'image_tfrecords' logger as plain messages, the runner's worker chatter nowhere."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == 'Worker: %s' and record.args:
            found = _worker_message(record)
            if found is not None and found[1]:
                _tell_watchers(found[0])
                logging.getLogger('image_tfrecords').log(record.levelno, '%s', found[0])
            return False
        return True


@contextlib.contextmanager
def own_worker_lines() -> Iterator[None]:
    """While a job runs: worker log records as `_OwnWorkerLines` says, unless the command line's
    console shows them."""
    if _console is not None:
        yield
        return
    worker_logs, only_ours = logging.getLogger(_WORKER_LOGGER), _OwnWorkerLines()
    worker_logs.addFilter(only_ours)
    try:
        yield
    finally:
        worker_logs.removeFilter(only_ours)


class _ConsoleHandler(logging.StreamHandler):
    """Log records as lines on stderr; on a terminal, also a status line below them, redrawn in
    place."""

    def __init__(self, status_line: bool):
        super().__init__()
        self.status_line, self.status = status_line, ''

    def emit(self, record: logging.LogRecord) -> None:
        _tell_watchers(record.getMessage())
        if self.status:
            self.stream.write('\r\x1b[K')
        super().emit(record)
        if self.status:
            self.stream.write(self.status)
            self.flush()

    def show(self, text: str) -> None:
        with self.lock:
            self.status = text
            self.stream.write(f'\r\x1b[K{text}')
            self.flush()


_console: _ConsoleHandler | None = None


@contextlib.contextmanager
def watching_lines(callback: Callable[[str], None]) -> Iterator[None]:
    """While in the block, `callback(message)` runs before each of our lines is shown (on the
    command line's console, or relayed from a worker with the Python API), under output_lock."""
    _watchers.append(callback)
    try:
        yield
    finally:
        _watchers.remove(callback)


def _tell_watchers(message: str) -> None:
    with output_lock():
        for callback in list(_watchers):
            callback(message)


def output_lock() -> threading.RLock:
    """Held while a line or the status is written: what holds it writes in order."""
    return _console.lock if _console is not None else _output_lock


def show_status(text: str) -> bool:
    """Shows `text` in place of the previous status on a terminal console ('' clears it);
    False when there is no such console (not a terminal, --verbose, or the Python API)."""
    if _console is None or not _console.status_line:
        return False
    if text or _console.status:
        _console.show(text)
    return True


def send_stderr_to(log_fd: int) -> None:
    """Points file descriptor 2 of this process, and so of the runner's worker processes it
    starts, at the log open as `log_fd`; `sys.stderr` (the console) stays on the terminal."""
    console = os.fdopen(os.dup(2), 'w', buffering=1)
    os.dup2(log_fd, 2)
    sys.stderr = console


def setup_console_logging(verbose: bool = False, log_file: str | None = None) -> None:
    """Plain progress lines on stderr, and every record in `log_file` if given."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    root.setLevel(logging.INFO)
    global _console
    console = _console = _ConsoleHandler(sys.stderr.isatty() and not verbose)
    console.setFormatter(logging.Formatter('%(message)s'))
    console.addFilter(_ConsoleFilter(verbose))
    if log_file:  # Added first: it sees each record before the console filter rewrites it.
        to_file = logging.FileHandler(log_file)
        to_file.setFormatter(logging.Formatter('%(asctime)s %(levelname)s %(name)s: %(message)s'))
        root.addHandler(to_file)
    root.addHandler(console)
    threading.excepthook = _log_thread_error


def _log_thread_error(args: threading.ExceptHookArgs) -> None:
    """An uncaught exception in a background thread (the runner's, when a job fails or is
    interrupted) goes to the log file; the console shows it with --verbose only, as the
    launcher reports the failure itself."""
    logging.getLogger(TRACE).info(
        'uncaught exception in thread %s', args.thread.name if args.thread else '?',
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback))

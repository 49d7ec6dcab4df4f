"""What a run shows: our own lines, without the runner's worker chatter.

Local worker processes send their log records to the launcher, which logs each as raw protobuf
text ('Worker: severity: ... message: "..."'). While a job runs (`relay_worker_lines`), those
from our own modules are logged again as plain lines of the 'image_tfrecords' logger, and the
rest stay as they are. The command line shows them (`showing`): our lines, warnings of any
logger, and the runner's records only with --verbose; the launcher reports a failure itself in
one line, so the runner's tracebacks are not shown. On a terminal a status line stays below the
lines, redrawn in place (`show_status`).
"""
import contextlib
import logging
import os
import threading
from typing import Iterator, TextIO

from pipeline import beam_internals

OURS = 'image_tfrecords'          # Our lines' logger.
TRACE = 'image_tfrecords.trace'   # Tracebacks and details, for the log file; --verbose shows it.
# Where our modules are, sub-packages included: a worker record logged from there is ours.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OURS = tuple(os.path.join(_ROOT, package) + os.sep for package in ('pipeline', 'transforms'))
_BEAM_RUNNERS = os.path.join(os.sep, 'apache_beam', 'runners', '')   # Logged from root too.
_output_lock = threading.RLock()   # Without a console: orders what is written.
_console: '_ConsoleHandler | None' = None


class _ConsoleFilter(logging.Filter):
    def __init__(self, verbose: bool):
        super().__init__()
        self._verbose = verbose

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == OURS or self._verbose:
            return True
        if (record.name.startswith('apache_beam.runners') or record.name == TRACE
                or _BEAM_RUNNERS in record.pathname):   # A job's messages, relayed by Beam.
            return False
        return record.levelno >= logging.WARNING


def _worker_message(record: logging.LogRecord) -> tuple[str, bool] | None:
    """(message, whether it is one of our own lines) of a worker's log record, if it is one."""
    found = beam_internals.worker_line(record)
    if found is None:
        return None
    message, where = found
    return message, where.startswith(_OURS) and 'Traceback (most recent' not in message


class _RelayOwnLines(logging.Filter):
    """Our own lines from worker processes go to the OURS logger as plain messages; the other
    worker records go on as they are where a console shows what a run logs (it hides them,
    the log keeps them), and nowhere otherwise (the Python API)."""

    def filter(self, record: logging.LogRecord) -> bool:
        found = _worker_message(record)
        if found is None:
            return True
        if not found[1]:
            return _console is not None
        logging.getLogger(OURS).log(record.levelno, '%s', found[0])
        return False


@contextlib.contextmanager
def relay_worker_lines() -> Iterator[None]:
    """While a job runs: worker records as `_RelayOwnLines` says."""
    worker_logs, relay = logging.getLogger(beam_internals.WORKER_LOGGER), _RelayOwnLines()
    worker_logs.addFilter(relay)
    try:
        yield
    finally:
        worker_logs.removeFilter(relay)


class _ConsoleHandler(logging.StreamHandler):
    """Log records as lines on a stream; on a terminal, also a status line below them, redrawn
    in place."""

    def __init__(self, stream: TextIO, status_line: bool):
        super().__init__(stream)
        self.status_line, self.status = status_line, ''
        self.ended = False   # A stop signal came: the status is not drawn again.

    def emit(self, record: logging.LogRecord) -> None:
        if self.status:
            self.stream.write('\r\x1b[K')
        super().emit(record)
        if self.status:
            self.stream.write(self.status)
            self.flush()

    def show(self, text: str) -> None:
        with self.lock:
            if self.ended and text:
                return
            self.status = text
            self.stream.write(f'\r\x1b[K{text}')
            self.flush()


@contextlib.contextmanager
def showing(stream: TextIO, verbose: bool = False) -> Iterator[None]:
    """While in the block, records are shown on `stream` as the command line shows them (see
    the module docstring): every record with `verbose`; a status line where `stream` is a
    terminal and not `verbose`."""
    global _console
    console = _ConsoleHandler(stream, stream.isatty() and not verbose)
    console.setFormatter(logging.Formatter('%(message)s'))
    console.addFilter(_ConsoleFilter(verbose))
    levels = {name: logging.getLogger(name).level
              for name in (OURS, beam_internals.WORKER_LOGGER)}
    for name in levels:
        logging.getLogger(name).setLevel(logging.INFO)
    root = logging.getLogger()
    root.addHandler(console)
    previous, _console = _console, console
    try:
        yield
    finally:
        _console = previous
        root.removeHandler(console)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        if console.status:
            console.show('')


def output_lock() -> threading.RLock:
    """Held while a line or the status is written: what holds it writes in order."""
    return _console.lock if _console is not None else _output_lock


def end_status() -> None:
    """At a stop signal: the status line is cleared and not drawn again, while the run stops."""
    console = _console
    if console is not None and console.status_line:
        console.ended = True
        console.show('')


def show_status(text: str) -> bool:
    """Shows `text` in place of the previous status on a terminal console ('' clears it);
    False when there is no such console (not a terminal, --verbose, or the Python API)."""
    if _console is None or not _console.status_line:
        return False
    if text or _console.status:
        _console.show(text)
    return True

"""Command line: `python -m pipeline.run --input_dir ... --output_dir ...` (see --help).

Without any input or output flag it generates a small sample dataset and converts it into
./sample_tfrecords, so the first run shows what the tool does. The command itself is a function
(pipeline/command.py); this module is the process around it, and does what only a process may:
it forks the local worker processes as soon as its imports are done, gives the run a folder of
its own for temporary files and its log (pipeline/run_folder.py), sends everything the runner
and its workers write to that log (the console keeps our lines), and turns SIGTERM into the
same clean stop as Ctrl-C (the first stop only; Ctrl-C also where it was started ignoring it).
"""
import atexit
import gc
import os
import signal
import sys
import threading
import time

from pipeline.errors import STOPPING_SIGNALS, DatasetError, Terminated, stop_line

STARTED = time.monotonic()   # The command's start, before the imports below (seconds of them).
COMMAND = __name__ == '__main__' or os.path.basename(sys.argv[0]) == 'image-tfrecords'


def command_line() -> None:
    """`python -m pipeline.run` and `image-tfrecords`: the process, ended with the command's
    exit code once its cleanup ran. A signal after the command returned changes nothing, and a
    thread the runner left running (a stopped in-memory run's could wait forever) does not
    hold the process."""
    code = main()
    for number in (signal.SIGINT, *STOPPING_SIGNALS):
        signal.signal(number, signal.SIG_IGN)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _stopped(stop: KeyboardInterrupt) -> int:
    line, code = stop_line(stop)
    print(line, file=sys.stderr)
    return code


def stop_on_signals() -> None:
    """Ctrl-C (SIGINT) and the stopping signals end the command (workers stopped, the output lock
    released, one line), also where it was started with SIGINT ignored (a shell starts a
    background job so, but its worker processes still stop on it); only the main thread can
    take them."""
    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGINT, *STOPPING_SIGNALS):
            signal.signal(number, _stop)


_stopping = False


def _stop(signum, frame) -> None:
    """The first stop raises (KeyboardInterrupt, or Terminated for a stopping signal); a later
    one is ignored, so that it neither cuts the first one's cleanup short nor changes its line."""
    global _stopping
    if _stopping:
        return
    _stopping = True
    raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)


if COMMAND:
    # The imports make ~200,000 objects that live as long as the process; full collections
    # among them cost the command ~0.3 s. They are frozen once imported (at the end).
    gc.disable()
    stop_on_signals()   # A stop while the imports run is a stop too: one line, no traceback.
try:
    import logging

    from pipeline import beam_internals, command, console, run_folder, worker_processes
    from pipeline.launch import Launch, resolve
except KeyboardInterrupt as stopped:
    if not COMMAND:
        raise
    sys.exit(_stopped(stopped))

_resolved: 'Launch | None' = None   # The command line's flags, resolved before the workers fork.


def main(argv: 'list[str] | None' = None) -> int:
    """The process: its run folder and log, then the command (pipeline/command.py)."""
    try:
        argv = (_resolved or sys.argv[1:]) if argv is None else argv
        own = run_folder.start()
        verbose = isinstance(argv, Launch) and argv.verbose
        console_stream = sys.stderr if verbose else _send_stderr_to(own.log_fd)
        _log_to(own.log)
        stop_on_signals()
        try:
            return command.main(argv, sys.stdout, console_stream, STARTED, own.keep_log)
        finally:
            logging.shutdown()
    except KeyboardInterrupt as stop:   # Before the command's own handling began.
        return _stopped(stop)


def _send_stderr_to(log_fd: int):
    """Points file descriptor 2 of this process, and so of the worker processes it starts, at
    the log open as `log_fd`; returns the console (the terminal, as stderr was)."""
    terminal = os.fdopen(os.dup(2), 'w', buffering=1)
    sys.stderr = terminal   # First: a stop from here on prints its line to the terminal.
    os.dup2(log_fd, 2)
    return terminal


def _log_to(path: str) -> None:
    """Every record of the process goes to the log at `path`; an uncaught exception in a
    background thread (the runner's, when a job fails or is interrupted) too, as the command
    reports the failure itself."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    root.setLevel(logging.INFO)
    to_file = logging.FileHandler(path)
    to_file.setFormatter(logging.Formatter('%(asctime)s %(levelname)s %(name)s: %(message)s'))
    root.addHandler(to_file)
    threading.excepthook = _log_thread_error


def _log_thread_error(args: threading.ExceptHookArgs) -> None:
    try:
        logging.getLogger(console.TRACE).info(
            'uncaught exception in thread %s', args.thread.name if args.thread else '?',
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback))
    except BaseException:   # The process is ending under it (a stop): its line is said.
        pass


def _prestart() -> None:
    """Resolves the command line's flags (the command reports a problem with them itself) and
    forks the worker processes they ask for."""
    global _resolved
    try:
        _resolved = resolve(sys.argv[1:])
    except DatasetError:
        return
    worker_processes.prestart(_resolved.workers if beam_internals.missing() is None else 0)


if COMMAND:
    # What is imported is never scanned by a collection again, here or in the workers forked
    # next (a worker's full collection among them took ~0.12 s, in the middle of a run).
    gc.freeze()
    gc.enable()
    stop_on_signals()
    try:
        _prestart()
        if __name__ == '__main__':
            command_line()
    except KeyboardInterrupt as stopped:   # Ctrl-C or a signal, held back while they forked.
        sys.exit(_stopped(stopped))

"""One writer per output prefix: the lock object `OUTPUT/.lock`.

A run creates the lock before it writes anything (local: exclusive create; Cloud Storage: an
upload with the precondition "no object yet") and deletes it at the end, failed or not. The
lock names its holder (host, pid, start time, run id, runner). A second run is refused at once
with a DatasetError that says who holds the lock and how to clear it. A lock whose holder is
provably gone (a run on this host whose process no longer exists) is taken over with a notice,
so the usual rerun after a crash needs no flag; any other lock (another host, or a Dataflow job,
whose launcher does not wait for it) is cleared only by `--break_lock` once the user knows the
holder is gone. Every later step that writes into the output checks that it still holds it.
"""
import datetime
import json
import logging
import os
import socket
import uuid

from pipeline.formats import fileio
from pipeline.formats.errors import DatasetError

LOCK = '.lock'
LOG = logging.getLogger('image_tfrecords')


def lock_path(output_dir: str) -> str:
    return fileio.join(output_dir.rstrip('/'), LOCK)


def _holder(path: str) -> dict | None:
    data = fileio.read_if_exists(path)
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return {'token': data.decode('utf-8', 'replace')}


def describe(holder: dict) -> str:
    return (f"run {holder.get('run_id', '?')} on host {holder.get('host', '?')}, pid "
            f"{holder.get('pid', '?')}, started {holder.get('started', '?')}"
            + (f" ({holder['runner']})" if holder.get('runner') else ''))


def _gone(holder: dict) -> bool:
    """True only when the holder is provably no longer running."""
    if holder.get('waits') is not True or holder.get('host') != socket.gethostname():
        return False
    try:
        os.kill(int(holder['pid']), 0)
    except ProcessLookupError:
        return True
    except (OSError, ValueError, KeyError):
        return False
    return False


def acquire(output_dir: str, run_id: str, runner: str, waits: bool, break_lock: bool = False) -> str:
    """Takes the output lock; returns its token, or raises a DatasetError naming the holder.

    `waits`: the process taking the lock lives as long as the run (false when a job is only
    submitted), so its lock may be taken over once it is gone.
    """
    path = lock_path(output_dir)
    token = uuid.uuid4().hex
    holder = {'token': token, 'run_id': run_id, 'host': socket.gethostname(), 'pid': os.getpid(),
              'started': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
              'runner': runner, 'waits': waits}
    data = json.dumps(holder, indent=1).encode()
    for _ in range(3):
        if fileio.create_exclusive(path, data):
            return token
        other = _holder(path)
        if other is None:
            continue  # Released meanwhile.
        if break_lock or _gone(other):
            LOG.warning('%s the lock %s of %s', 'breaking (--break_lock)' if break_lock else
                        'taking over (its process is gone)', path, describe(other))
            if _holder(path) == other:
                fileio.delete([path])
            continue
        raise DatasetError(
            f'{output_dir} is being written by another run: {describe(other)}; its lock is '
            f'{path}. Wait for it, or if it is not running any more, pass --break_lock')
    raise DatasetError(f'could not take the lock {path}: it keeps changing; is another run starting?')


def check(output_dir: str, token: str) -> None:
    """Raises a DatasetError unless the lock of `output_dir` is still `token`'s."""
    holder = _holder(lock_path(output_dir))
    if holder is None or holder.get('token') != token:
        now = f'it is now held by {describe(holder)}' if holder else 'it is gone'
        raise DatasetError(f'this run lost its lock {lock_path(output_dir)} ({now}); nothing more '
                           'was committed. Make sure one run at a time writes there, and rerun')


def release(output_dir: str, token: str) -> None:
    """Deletes the lock if it is still `token`'s."""
    path = lock_path(output_dir)
    holder = _holder(path)
    if holder is not None and holder.get('token') == token:
        fileio.delete([path])


def held(output_dir: str) -> dict | None:
    """Who holds the lock of `output_dir`, if anyone."""
    return _holder(lock_path(output_dir))

"""The output folder's lock: one writer at a time (pipeline/output/folder.py says how).

A job that a service runs is named in its lock once submitted (`name_job`): a later run asks the
service it is given about it (`acquire`'s `job_ended`) and takes the lock over once that service
says the job ended, as it does for a local run whose process is gone."""
import contextlib
import dataclasses
import datetime
import json
import logging
import os
import socket
import uuid
from typing import Callable, Iterator

from pipeline.errors import DatasetError, printable
from pipeline.io import fileio
from pipeline.io.gcs import delete_if_generation, read_versioned, write_if_generation
from pipeline.output.bounded_reads import NotAFile, as_json, read_raw
from pipeline.output.temp_folder import remove_partials

LOG = logging.getLogger('image_tfrecords')
LOCK = '.lock'
STALE_UNREADABLE_SECONDS = 30
LOCK_MAX_BYTES = 1 << 20   # Read of a lock at most; the locks this tool writes have ~300.


def lock_path(output_dir: str) -> str:
    return fileio.join(output_dir.rstrip('/'), LOCK)


@dataclasses.dataclass(frozen=True)
class LockState:
    """What `.lock` holds now: its holder (None when empty or unreadable), age and generation."""
    holder: dict | None
    age: float
    generation: int = 0      # Cloud Storage only.


def read_lock(output_dir: str) -> LockState | None:
    """The lock of `output_dir`, or None when nobody holds it."""
    path = lock_path(output_dir)
    if fileio.is_gcs(path):
        found = read_versioned(path, LOCK_MAX_BYTES)
        if found is None:
            return None
        data, generation, updated = found
    else:
        try:
            found = read_raw(path, LOCK_MAX_BYTES)
        except NotAFile as exc:
            raise DatasetError(f'{path} is {exc}, not the lock of this tool; move it away and '
                               'rerun') from None
        if found is None:
            return None
        data, updated = found
        generation = 0
    if len(data) > LOCK_MAX_BYTES:
        raise DatasetError(f'{path} holds more than {LOCK_MAX_BYTES >> 20} MiB, so it is not a '
                           'lock of this tool (those hold a few hundred bytes); move it away and '
                           'rerun')
    age = datetime.datetime.now(datetime.timezone.utc).timestamp() - updated
    return LockState(_parse_holder(data), age, generation)


def _parse_holder(data: bytes) -> dict | None:
    holder = as_json(data)
    return holder if isinstance(holder, dict) and isinstance(holder.get('token'), str) else None


def lock_advice(state: LockState) -> str:
    """What happens to a lock, in words: who may take it over, and when."""
    holder = state.holder
    if is_stale(state):
        return 'its holder is gone: the next run takes it over'
    if holder is None:
        return (f'if no run is starting, the next run takes it over once it is '
                f'{STALE_UNREADABLE_SECONDS} s old')
    if _checkable(holder):
        return 'its process is running'
    if isinstance(holder.get('job'), dict):
        return ('its job holds it: the next run given the same service takes it over once the '
                'service says the job ended')
    return ('a run on another host or a Dataflow job holds it; once it is not running any more, '
            'pass --break_lock')


def describe(state: LockState) -> str:
    """Who holds a lock, in one line, with anything from the file escaped."""
    holder = state.holder
    if holder is None:
        when = (f'written {state.age:.0f} s ago' if state.age >= 0
                else 'with a modification time in the future')
        return f'an empty or unreadable lock, {when}'
    text = (f"run {holder.get('run_id', '?')} on host {holder.get('host', '?')}, pid "
            f"{holder.get('pid', '?')}, started {holder.get('started', '?')}"
            + (f" ({holder['runner']})" if holder.get('runner') else ''))
    job = holder.get('job')
    if isinstance(job, dict):
        text += f", job {job.get('id', '?')} at {job.get('where', '?')}"
    return printable(text)


def _proc_stat(pid: int) -> tuple[str, str | None] | None:
    """(state, start time in clock ticks after boot) of a process, None when there is none; the
    start time is None where it cannot be read."""
    if not os.path.exists('/proc/self/stat'):   # No procfs: ask the kernel whether pid exists.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except OSError:
            pass
        return '?', None
    try:
        with open(f'/proc/{pid}/stat') as stream:
            fields = stream.read().rsplit(')', 1)[1].split()
    except FileNotFoundError:
        return None
    except OSError:
        return '?', None
    return fields[0], fields[19]


def _machine() -> dict:
    """What a holder on this machine shares with us: host name, boot id and PID namespace (two
    containers may share a host name, and pids mean nothing across namespaces)."""
    found = {'host': socket.gethostname()}
    try:
        with open('/proc/sys/kernel/random/boot_id') as stream:
            found['boot_id'] = stream.read().strip()
        found['pid_ns'] = os.readlink('/proc/self/ns/pid')
    except OSError:
        pass
    return found


def _checkable(holder: dict) -> bool:
    """Whether the holder's process can be looked up here: a run that waits for its job, on
    this machine, in this PID namespace. Any other holder is cleared only by --break_lock."""
    return holder.get('waits') is True and all(holder.get(k) == v for k, v in _machine().items())


def _alive_here(state: LockState) -> bool:
    """Whether the holder is a run on this machine whose process is provably running: its pid
    is a process started when the lock says (so --break_lock never clears it)."""
    holder = state.holder
    if holder is None or not _checkable(holder) or not isinstance(holder.get('pid'), int):
        return False
    stat = _proc_stat(holder['pid'])
    return (stat is not None and stat[0] not in ('Z', 'X') and stat[1] is not None
            and str(holder.get('pid_start')) == stat[1])


def is_stale(state: LockState) -> bool:
    """True only when the holder is provably no longer running (see the module docstring)."""
    holder = state.holder
    if holder is None:
        return state.age > STALE_UNREADABLE_SECONDS
    if not _checkable(holder):
        return False
    try:
        pid = int(holder['pid'])
    except (KeyError, TypeError, ValueError):
        return False
    stat = _proc_stat(pid)
    if stat is None:
        return True
    process_state, started = stat
    return process_state in ('Z', 'X') or (
        None not in (started, holder.get('pid_start')) and str(holder['pid_start']) != started)


@contextlib.contextmanager
def _guard(output_dir: str) -> Iterator[None]:
    """Locally: an exclusive flock of the output folder while `.lock` changes (see above)."""
    if fileio.is_gcs(output_dir):
        yield
        return
    import fcntl
    with fileio.output_errors(output_dir):
        os.makedirs(output_dir, exist_ok=True)
    fd = os.open(output_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def acquire(output_dir: str, run_id: str, runner: str, waits: bool,
            break_lock: bool = False,
            job_ended: Callable[[dict], str | None] | None = None) -> str:
    """Takes the output lock; returns its token, or raises a DatasetError naming the holder.

    `waits`: the process taking the lock lives as long as the run (false when a service runs
    the job), so its lock may be taken over once it is gone. `job_ended`: the state a job named
    in a lock ended in, as the service of this run says (None: running, or not known).
    """
    path = lock_path(output_dir)
    token = uuid.uuid4().hex
    own = _proc_stat(os.getpid())
    data = json.dumps({
        'token': token, 'run_id': run_id, **_machine(), 'pid': os.getpid(),
        'pid_start': own[1] if own else None,
        'started': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'runner': runner, 'waits': waits}, indent=1).encode()
    gcs = fileio.is_gcs(path)
    to_break = None   # With --break_lock: the holder first seen, the only one it may clear.
    with fileio.output_errors(path), _guard(output_dir):
        remove_partials(output_dir, LOCK)
        for _ in range(5):
            state = read_lock(output_dir)
            if state is None:
                if gcs and not fileio.create_exclusive(path, data):
                    continue   # Another run created it first: look again.
                if not gcs:
                    fileio.write_bytes_atomic(path, data)
                return token
            if break_lock and to_break is None:
                to_break = state.holder
            breaking = break_lock and state.holder == to_break and not _alive_here(state)
            job = state.holder.get('job') if state.holder else None
            job_end = (job_ended(job) if job_ended and isinstance(job, dict)
                       and not (breaking or is_stale(state)) else None)
            if not (breaking or is_stale(state) or job_end):
                raise DatasetError(_held(output_dir, state))
            if gcs and not write_if_generation(path, data, state.generation):
                continue   # Another run changed it first: look again.
            if not gcs:
                fileio.write_bytes_atomic(path, data)
            LOG.warning('%s the lock %s of %s', 'breaking (--break_lock)' if breaking else
                        f'taking over (its job ended {job_end})' if job_end else
                        'taking over (its process is gone)', path, describe(state))
            return token
    raise DatasetError(f'could not take the lock {path}: it keeps changing; is another run '
                       'starting?')


def _held(output_dir: str, state: LockState) -> str:
    """Why a lock cannot be taken, and what to do: --break_lock only where it would help."""
    path = lock_path(output_dir)
    held = f'{output_dir} is being written by another run: {describe(state)}; its lock is {path}.'
    if _alive_here(state):
        return (f'{held} Its process is running on this machine: wait for it to end '
                '(--break_lock never takes the lock of a running process; if that process is '
                f'not a run of this tool, move {path} away and rerun)')
    if state.holder and isinstance(state.holder.get('job'), dict):
        return (f'{held} Its job is running as far as the service given to this run tells (or '
                'it runs on another service): wait for it (--attach=JOB_ID follows it), or cancel '
                'it and rerun')
    return f'{held} Wait for it, or if it is not running any more, pass --break_lock'


def name_job(output_dir: str, token: str, job: dict) -> bool:
    """Names in `token`'s lock the job that a service runs for it; False when the lock is not
    `token`'s any more (the job ended and released it)."""
    path = lock_path(output_dir)
    with fileio.output_errors(path), _guard(output_dir):
        state = read_lock(output_dir)
        if not _is_held_by(state, token):
            return False
        data = json.dumps({**state.holder, 'job': job}, indent=1).encode()
        if fileio.is_gcs(path):
            return write_if_generation(path, data, state.generation)
        fileio.write_bytes_atomic(path, data)
        return True


def check_lock(output_dir: str, token: str) -> LockState:
    """The lock of `output_dir`; raises a DatasetError unless it is still `token`'s."""
    state = read_lock(output_dir)
    if not _is_held_by(state, token):
        now = f'it is now held by {describe(state)}' if state else 'it is gone'
        raise DatasetError(f'this run lost its lock {lock_path(output_dir)} ({now}); nothing more '
                           'was committed. Make sure one run at a time writes there, and rerun')
    return state


def _is_held_by(state: LockState | None, token: str) -> bool:
    return state is not None and state.holder is not None and state.holder.get('token') == token


def release(output_dir: str, token: str, seen: LockState | None = None) -> None:
    """Deletes the lock if it is still `token`'s. `seen`: the lock as check_lock just found it;
    on Cloud Storage it is then deleted only if it is still that generation, without reading it
    again (one round trip instead of three)."""
    path = lock_path(output_dir)
    with _guard(output_dir):
        state = seen if fileio.is_gcs(path) and _is_held_by(seen, token) else read_lock(output_dir)
        if not _is_held_by(state, token):
            return
        if fileio.is_gcs(path):
            delete_if_generation(path, state.generation)
        else:
            os.remove(path)

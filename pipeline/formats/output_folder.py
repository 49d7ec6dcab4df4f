"""The output folder's protocol: one writer at a time, each run's temporary folder, the commit
journal, and what counts as the dataset in the folder, recoverable after a kill at any instant.

Everything lives directly in OUTPUT:

    .lock                     who writes the folder now (JSON: token, run id, host, pid, ...)
    .commit.json              the journal of a commit in progress: run id, phase, file names
    .tmp-RUN/                 the temporary folder of run RUN (16 hex digits)
    .tmp-RUN/.image-tfrecords-run.json   its marker: run id and state, running or committed
    .tmp-RUN/parts/, shards/  its work: a TFRecord part per chunk and shard, a file per shard and
                              format (part_path, shard_path; resume.py says when it is reused)

**Confinement.** Every path this module touches is derived from OUTPUT and names it validates:
a run id is 16 hex digits, a dataset file is a shard name or one of the metadata names, a file
in a temporary folder is a shard or a staged metadata file. Nothing is ever read from a file as
a path, so no file in the folder, whoever wrote it, can make a run move or delete anything
outside OUTPUT. A journal or lock that breaks these rules is refused in one line and touches
nothing. Temporary folders are recognised by their marker, never by their name alone, and a
symbolic link in their place is refused, so `--overwrite` and `--clean_temp` delete only what
this tool wrote.

**The lock.** Taking it is exclusive whether the lock is absent or stale. Locally every change
of `.lock` (create, take over, release) happens under an advisory lock (flock) of the output
folder itself, held only for that moment and dropped by the kernel if the process dies; on
Cloud Storage every change is conditional on the generation read (create: no object yet; take
over: still the stale holder's; release: still ours). A holder is stale when it is provably
gone: a run on this machine (same host name, boot and PID namespace) whose process no longer
exists, is a zombie, or is another process with the same pid (its start time differs), or a
lock older than STALE_UNREADABLE_SECONDS that is empty or unreadable. Anything else (another
host or container, a host restarted since, a Dataflow job) needs `--break_lock`.

**The commit** (transforms/commit.py calls it): the new shards and metadata are complete in the
temporary folder, then the journal lists the old dataset's file names (moved aside into
`.tmp-RUN/replaced/`) and the new files' names (moved in), `dataset_info.json` moved away first
and in last. After the moves the marker says `committed`, then the journal is deleted, then the
temporary folder with the marker last. A kill at any instant leaves a journal (the next run
rolls it forward: every move can be repeated) or a committed marker (the next run finishes the
cleanup); the folder holds the complete old dataset or the complete new one.
"""
import contextlib
import dataclasses
import datetime
import functools
import json
import logging
import os
import re
import socket
import uuid
from typing import Iterable, Iterator

from pipeline.formats import faults, fileio, metadata, shard_formats
from pipeline.formats.bounded_reads import (
    NotAFile, as_json, parse_json, read_file, read_metadata, read_raw)
from pipeline.formats.errors import DatasetError, printable
from pipeline.formats.shard_formats import ShardFormat

LOG = logging.getLogger('image_tfrecords')

LOCK = '.lock'
JOURNAL = '.commit.json'
TEMP_PREFIX = '.tmp-'
MARKER = '.image-tfrecords-run.json'
MOVE_BATCH = 100
STALE_UNREADABLE_SECONDS = 30
LOCK_MAX_BYTES = 1 << 20   # Read of a lock at most; the locks this tool writes have ~300.
RUNNING, COMMITTED = 'running', 'committed'
REPLACED = 'replaced'   # The temporary folder's subfolder for the old dataset's files.

_RUN_ID = re.compile(r'[0-9a-f]{16}\Z')
_SPLIT = '(?:' + '|'.join(metadata.SPLITS) + ')'


def metadata_names(splits: Iterable[str]) -> tuple[str, ...]:
    """The files beside the shards of a dataset of `splits` that this version writes."""
    return (metadata.DATASET_INFO, metadata.FEATURES, metadata.LABELS, metadata.CLASS_NAMES,
            metadata.SUMMARY, metadata.LEAKAGE, *(metadata.error_report_name(s) for s in splits),
            *(metadata.damaged_report_name(s) for s in splits))


# Any version's, any splits': what the protocol recognises as a dataset's metadata file.
METADATA_NAMES = (*metadata_names(metadata.SPLITS), metadata.OLD_CLASS_NAMES)
_GLOB = re.compile(r'[*?\[]')


# --- Names and the folder itself ---------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _shard_patterns(suffixes: tuple[str, ...]) -> tuple[re.Pattern, re.Pattern]:
    """(final shard name, temporary shard path) for the registered formats' suffixes."""
    suffix = '(?:' + '|'.join(map(re.escape, suffixes)) + ')'
    return (re.compile(rf'[a-z][a-z0-9_]*-{_SPLIT}\.{suffix}-\d{{5,}}-of-\d{{5,}}\Z'),
            re.compile(rf'shards/{_SPLIT}-\d{{5,}}-[0-9a-f]{{16}}\.{suffix}\Z'))


def is_shard_name(name: str) -> bool:
    """Whether `name` is a name this tool gives a shard file."""
    return _shard_patterns(tuple(shard_formats.suffixes()))[0].match(name) is not None


def _is_temp_shard(path: str) -> bool:
    """Whether `path` (relative to a temporary folder) names a temporary shard file."""
    return _shard_patterns(tuple(shard_formats.suffixes()))[1].match(path) is not None


def is_dataset_file(name: str) -> bool:
    """Whether `name` is a name this tool gives a file of a dataset (a shard or metadata)."""
    return name in METADATA_NAMES or is_shard_name(name)


def check_output_dir(output_dir: str) -> None:
    """Raises a DatasetError when `output_dir` cannot be an output folder (a file, below a
    file, or a name with glob characters, which listing would read as a pattern)."""
    if _GLOB.search(output_dir):
        raise DatasetError(f'--output_dir {printable(output_dir)} contains a glob character '
                           '(*, ? or [); choose a folder name without them')
    if fileio.is_gcs(output_dir):
        return
    path = os.path.abspath(output_dir)
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        below = '' if path == os.path.abspath(output_dir) else f' ({path} is a file)'
        raise DatasetError(f'--output_dir {output_dir} is not a folder{below}; choose a folder')


def check_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise ValueError(f'not a run id: {printable(repr(run_id))}')
    return run_id


def temp_dir(output_dir: str, run_id: str) -> str:
    return fileio.join(output_dir.rstrip('/'), TEMP_PREFIX + check_run_id(run_id))


def part_path(temp_dir: str, split: str, shard: int, chunk: int, chunk_fp: str) -> str:
    return fileio.join(temp_dir, 'parts', f'{split}-{shard:05d}-{chunk:06d}-{chunk_fp}.tfrecord')


def shard_path(temp_dir: str, split: str, shard: int, shard_fp: str,
               shard_format: ShardFormat) -> str:
    return fileio.join(temp_dir, 'shards', f'{split}-{shard:05d}-{shard_fp}.{shard_format.suffix}')


def pairs_path(temp_dir: str, name: str) -> str:
    """A part of leakage.jsonl (transforms/findings.py), joined into it at the commit."""
    return fileio.join(temp_dir, 'pairs', f'{name}.jsonl')


def in_format(shard_file: str, shard_format: ShardFormat) -> str:
    """The path of the same temporary shard in another format."""
    return f'{shard_file.rsplit(".", 1)[0]}.{shard_format.suffix}'


def _is_link(path: str) -> bool:
    return not fileio.is_gcs(path) and os.path.islink(path)


def _refuse_links(folder: str) -> None:
    """Raises a DatasetError if a temporary folder is, or holds, a symbolic link (local disk).
    The old dataset's own files moved aside into `replaced/` may be links (they are moved and
    deleted as links, never followed)."""
    if fileio.is_gcs(folder):
        return
    if os.path.islink(folder):
        raise DatasetError(f'{folder} is a symbolic link; this tool keeps its temporary files '
                           'only in a real folder. Remove the link and rerun')
    replaced = os.path.join(folder, REPLACED)
    for parent, dirs, files in os.walk(folder):
        links = [name for name in dirs + files if os.path.islink(os.path.join(parent, name))]
        if links and parent != replaced:
            raise DatasetError(f'{os.path.join(parent, links[0])} is a symbolic link; a '
                               'temporary folder of this tool holds none. Remove it and rerun')


_PARTIAL = re.compile(r'\.(?:commit\.json|lock|image-tfrecords-run\.json)\.partial-'
                      r'[0-9a-f]{8}(?:[0-9a-f]{24})?\Z')


def _remove_partials(output_dir: str, name: str) -> None:
    """Deletes what a kill left of an atomic write of `name` (NAME.partial-HEX) in the folder."""
    if fileio.is_gcs(output_dir) or not os.path.isdir(output_dir):
        return
    for entry in os.scandir(output_dir):
        if (entry.name.startswith(name + '.partial-') and _PARTIAL.match(entry.name)
                and entry.is_file(follow_symlinks=False)):
            os.remove(entry.path)


# --- The lock -----------------------------------------------------------------------------------

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
        found = fileio.read_versioned(path, LOCK_MAX_BYTES)
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
            break_lock: bool = False) -> str:
    """Takes the output lock; returns its token, or raises a DatasetError naming the holder.

    `waits`: the process taking the lock lives as long as the run (false when a job is only
    submitted), so its lock may be taken over once it is gone.
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
        _remove_partials(output_dir, LOCK)
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
            if not (breaking or is_stale(state)):
                raise DatasetError(_held(output_dir, state))
            if gcs and not fileio.write_if_generation(path, data, state.generation):
                continue   # Another run changed it first: look again.
            if not gcs:
                fileio.write_bytes_atomic(path, data)
            LOG.warning('%s the lock %s of %s', 'breaking (--break_lock)' if breaking else
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
    return f'{held} Wait for it, or if it is not running any more, pass --break_lock'


def check_lock(output_dir: str, token: str) -> None:
    """Raises a DatasetError unless the lock of `output_dir` is still `token`'s."""
    state = read_lock(output_dir)
    if state is None or state.holder is None or state.holder.get('token') != token:
        now = f'it is now held by {describe(state)}' if state else 'it is gone'
        raise DatasetError(f'this run lost its lock {lock_path(output_dir)} ({now}); nothing more '
                           'was committed. Make sure one run at a time writes there, and rerun')


def release(output_dir: str, token: str) -> None:
    """Deletes the lock if it is still `token`'s."""
    path = lock_path(output_dir)
    with _guard(output_dir):
        state = read_lock(output_dir)
        if state is None or state.holder is None or state.holder.get('token') != token:
            return
        if fileio.is_gcs(path):
            fileio.delete_if_generation(path, state.generation)
        else:
            os.remove(path)


# --- Temporary folders --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class TempFolder:
    path: str
    run_id: str
    state: str     # RUNNING or COMMITTED


def _marker_state(folder: str, run_id: str) -> str | None:
    try:
        found = read_raw(fileio.join(folder, MARKER))
    except NotAFile:
        return None
    marker = as_json(found[0]) if found is not None else None
    if (isinstance(marker, dict) and marker.get('run_id') == run_id
            and marker.get('state') in (RUNNING, COMMITTED)):
        return marker['state']
    return None


def _write_marker(folder: str, run_id: str, state: str) -> None:
    fileio.write_bytes_atomic(fileio.join(folder, MARKER),
                              json.dumps({'run_id': run_id, 'state': state}).encode())


def temp_folders(output_dir: str) -> list[TempFolder]:
    """The temporary folders of this tool's runs in `output_dir`: named `.tmp-RUN`, not a
    link, and carrying a marker for RUN. Anything else is not ours and is left alone."""
    if not (fileio.is_gcs(output_dir) or os.path.isdir(output_dir)):
        return []
    found = []
    for entry in fileio.list_dir(output_dir):
        run_id = entry.name[len(TEMP_PREFIX):]
        if (entry.is_dir and entry.name.startswith(TEMP_PREFIX) and _RUN_ID.match(run_id)
                and not _is_link(entry.path)):
            state = _marker_state(entry.path, run_id)
            if state is not None:
                found.append(TempFolder(entry.path, run_id, state))
    return found


def start_temp(output_dir: str, run_id: str) -> None:
    """Makes sure run `run_id` has its marked temporary folder; refuses a link or a folder of
    that name that this tool did not make (nothing in it is touched)."""
    folder = temp_dir(output_dir, run_id)
    _refuse_links(folder)
    state = _marker_state(folder, run_id)
    if state is None:
        _remove_partials(folder, MARKER)   # A kill while the first marker was written.
    if state is None and _has_files(folder):
        raise DatasetError(f'{folder} exists but was not made by this tool (it has no marker '
                           f'{MARKER}); move it away and rerun')
    if state is None:
        _write_marker(folder, run_id, RUNNING)


def drop_if_unused(output_dir: str, run_id: str) -> None:
    """Removes a run's temporary folder that holds its marker alone (a run that failed before
    it wrote anything leaves nothing behind)."""
    folder = temp_dir(output_dir, run_id)
    marker = fileio.join(folder, MARKER)
    if fileio.is_gcs(folder):
        if fileio.list_prefix(folder) == [marker]:
            fileio.delete([marker])
    elif not _is_link(folder) and os.path.isdir(folder) and os.listdir(folder) == [MARKER]:
        os.remove(marker)
        os.rmdir(folder)


def _has_files(folder: str) -> bool:
    if fileio.is_gcs(folder):
        return bool(fileio.list_prefix(folder))
    return os.path.isdir(folder) and bool(os.listdir(folder))


def remove_temp(folder: str) -> None:
    """Deletes a temporary folder, its marker last, so a kill leaves it recognisable."""
    marker = fileio.join(folder, MARKER)
    if fileio.is_gcs(folder):
        fileio.delete([p for p in fileio.list_prefix(folder) if p != marker])
        faults.crash_point('cleanup:contents')
        fileio.delete([marker] if fileio.exists(marker) else [])
        return
    if not os.path.isdir(folder) or os.path.islink(folder):
        return
    for entry in os.scandir(folder):
        if entry.name == MARKER:
            continue
        if entry.is_dir(follow_symlinks=False):
            fileio.delete_tree(entry.path)
        else:
            os.remove(entry.path)
    faults.crash_point('cleanup:contents')
    with contextlib.suppress(FileNotFoundError):
        os.remove(marker)
    faults.crash_point('cleanup:marker')
    with contextlib.suppress(OSError):
        os.rmdir(folder)


# --- The dataset in the folder ------------------------------------------------------------------

def dataset_files(output_dir: str) -> list[str]:
    """Names of the files of this tool's dataset in `output_dir`, as its own dataset_info.json
    names them: [] when there is none, or when the folder's dataset_info.json and summary.json
    are not this tool's (see is_own_dataset); one of this tool's that it cannot read is a
    DatasetError."""
    path = fileio.join(output_dir, metadata.DATASET_INFO)
    info, summary = (read_metadata(output_dir, name) for name in (metadata.DATASET_INFO,
                                                                  metadata.SUMMARY))
    if not is_own_dataset(info, summary):
        return []
    names = named_files(info, path)
    if isinstance(summary.get('digests'), dict):   # It noted the metadata files it wrote.
        names = [n for n in names if n != metadata.OLD_CLASS_NAMES or n in summary['digests']]
    files, _ = _entries(output_dir)
    return [name for name in names if name in files]


def is_own_dataset(info, summary) -> bool:
    """Whether a parsed dataset_info.json and summary.json are those of one dataset this tool
    wrote: the first names this tool as its module, the second carries a run id, the dataset's
    name and the same splits. Any other folder with a dataset_info.json (TFDS writes one, with
    shards named by the same template) holds no dataset of this tool, so nothing in it is ever
    replaced or removed."""
    if not (isinstance(info, dict) and isinstance(summary, dict)
            and isinstance(info.get('splits'), list) and isinstance(summary.get('splits'), dict)):
        return False
    run_id, splits = summary.get('run_id'), [s.get('name') if isinstance(s, dict) else None
                                             for s in info['splits']]
    return (info.get('moduleName') == metadata.MODULE and isinstance(run_id, str)
            and _RUN_ID.match(run_id) is not None and summary.get('dataset') == info.get('name')
            and all(isinstance(name, str) for name in splits)
            and sorted(splits) == sorted(summary['splits']))


def named_files(info, path: str) -> list[str]:
    """The file names a dataset_info.json (`info`, read from `path`) describes, validated: a
    DatasetError when it is not one this tool can read."""
    try:
        return _named_files(info)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise DatasetError(f'{path} does not describe a dataset this tool can read '
                           f'({printable(str(exc))[:200]}); move the folder\'s contents away or '
                           'choose another folder') from None


def _named_files(info: dict) -> list[str]:
    if not isinstance(info, dict):
        raise ValueError('not a JSON object')
    name = info['name']
    if not isinstance(name, str) or not re.fullmatch(r'[a-z][a-z0-9_]*', name):
        raise ValueError(f'dataset name {name!r}')
    formats = shard_formats.declared(info)
    names = [metadata.DATASET_INFO, metadata.FEATURES, metadata.LABELS, metadata.CLASS_NAMES,
             metadata.OLD_CLASS_NAMES, metadata.SUMMARY, metadata.LEAKAGE]
    for split in info['splits']:
        if split.get('filepathTemplate', metadata.SHARD_TEMPLATE) != metadata.SHARD_TEMPLATE:
            raise ValueError('shard names other than this tool\'s')
        split_name, lengths = split['name'], split['shardLengths']
        if split_name not in metadata.SPLITS or not isinstance(lengths, list):
            raise ValueError(f'split {split_name!r}')
        if len(lengths) > metadata.MAX_SHARDS:
            raise ValueError(f'split {split_name} lists {len(lengths)} shards, more than the '
                             f'{metadata.MAX_SHARDS} this tool writes')
        if len(lengths) > 10_000_000 or any(int(n) < 0 for n in lengths) or int(split['numBytes']) < 0:
            raise ValueError(f'split {split_name!r}: shard lengths or bytes')
        names.append(metadata.error_report_name(split_name))
        names.append(metadata.damaged_report_name(split_name))
        for file_format in formats:
            names += [metadata.shard_name(name, split_name, i, len(lengths), file_format)
                      for i in range(len(lengths))]
    return names


def _entries(output_dir: str) -> tuple[set[str], set[str]]:
    """(file names, folder names) directly in `output_dir`."""
    if not (fileio.is_gcs(output_dir) or os.path.isdir(output_dir)):
        return set(), set()
    entries = fileio.list_dir(output_dir)
    return ({e.name for e in entries if not e.is_dir and e.error is None},
            {e.name for e in entries if e.is_dir or e.error is not None})


def foreign_files(output_dir: str, names: Iterable[str], dataset: Iterable[str]) -> list[str]:
    """Those of `names` that exist in `output_dir` (as a file, a folder or a broken link) and
    are not files of `dataset`: what a commit must not overwrite."""
    files, folders = _entries(output_dir)
    ours = set(dataset)
    return sorted(n for n in set(names) if (n in files and n not in ours) or n in folders)


def refuse_foreign(output_dir: str, foreign: list[str]) -> None:
    if foreign:
        shown = ', '.join(printable(n) for n in foreign[:5])
        raise DatasetError(f'{output_dir} holds files this run would overwrite that are not part '
                           f'of a dataset it replaces: {shown}'
                           + (f' and {len(foreign) - 5} more' if len(foreign) > 5 else '')
                           + '; move them away or choose another --output_dir')


# --- The commit journal -------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Journal:
    """A commit in progress: the old dataset's files (moved into TEMP/replaced/) and the new
    files (from TEMP/<source> to their final names), all names, no paths."""
    run_id: str
    phase: str                                  # 'replace', then 'install'.
    replace: tuple[str, ...]
    install: tuple[tuple[str, str], ...]

    def validate(self) -> 'Journal':
        check_run_id(self.run_id)
        if self.phase not in ('replace', 'install'):
            raise ValueError(f'phase {self.phase!r}')
        for name in self.replace:
            if not is_dataset_file(name):
                raise ValueError(f'{name!r} is not a dataset file name')
        for source, target in self.install:
            staged = source.startswith('final/') and source[len('final/'):] in METADATA_NAMES
            if not (staged or _is_temp_shard(source)) or not is_dataset_file(target):
                raise ValueError(f'{source!r} -> {target!r} is not a move of this tool')
        return self


def journal_path(output_dir: str) -> str:
    return fileio.join(output_dir.rstrip('/'), JOURNAL)


def write_journal(output_dir: str, journal: Journal) -> None:
    document = {'run_id': journal.run_id, 'phase': journal.phase,
                'replace': list(journal.replace), 'install': [list(m) for m in journal.install]}
    fileio.write_bytes_atomic(journal_path(output_dir), json.dumps(document, indent=1).encode())


def read_journal(output_dir: str) -> Journal | None:
    """The journal of an interrupted commit, validated; a DatasetError when it is not one this
    tool wrote (then nothing is touched)."""
    path = journal_path(output_dir)
    data = read_file(path, bounded=True)
    if data is None:
        return None
    try:
        document = parse_json(path, data)
        journal = Journal(document['run_id'], document['phase'], tuple(document['replace']),
                          tuple((s, t) for s, t in document['install'])).validate()
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise DatasetError(f'{path} is not a commit journal this tool wrote '
                           f'({printable(str(exc))[:200]}); nothing was done. If no run of this '
                           'tool is committing there, delete it and rerun') from None
    folder = temp_dir(output_dir, journal.run_id)
    _refuse_links(folder)
    if _marker_state(folder, journal.run_id) is None:
        raise DatasetError(f'{path} is not a commit journal this tool wrote (its temporary '
                           f'folder {folder} has no marker); nothing was done. If no run of this '
                           'tool is committing there, delete it and rerun')
    return journal


def roll_forward(output_dir: str, journal: Journal, recovering: bool = False) -> None:
    """Carries out a commit from its journal's phase to the end (see the module docstring)."""
    out = output_dir.rstrip('/')
    temp = temp_dir(out, journal.run_id)
    with fileio.output_errors(out):
        if journal.phase == 'replace':
            replace = [(fileio.join(out, name), fileio.join(temp, REPLACED, name))
                       for name in journal.replace]
            for number, batch in enumerate(_batches(replace, first=True), 1):
                _move(batch, recovering)
                faults.crash_point(f'commit:replace:{number}')
            journal = dataclasses.replace(journal, phase='install')
            write_journal(out, journal)
        install = [(fileio.join(temp, source), fileio.join(out, target))
                   for source, target in journal.install]
        for number, batch in enumerate(_batches(install, first=False), 1):
            _move(batch, recovering)
            faults.crash_point(f'commit:install:{number}')
        _write_marker(temp, journal.run_id, COMMITTED)
        faults.crash_point('commit:marked')
        fileio.delete([journal_path(out)])
        faults.crash_point('commit:unjournaled')
        remove_temp(temp)


def _batches(moves: list, first: bool) -> list[list]:
    """Moves in batches of MOVE_BATCH, the one of dataset_info.json alone: first or last."""
    info = [m for m in moves if fileio.basename(m[0 if first else 1]) == metadata.DATASET_INFO]
    rest = [m for m in moves if m not in info]
    batches = [rest[i:i + MOVE_BATCH] for i in range(0, len(rest), MOVE_BATCH)]
    if info:
        batches = [info, *batches] if first else [*batches, info]
    return batches


def _move(pairs: list, recovering: bool) -> None:
    if recovering:  # Some moves may have happened before the crash.
        pairs = [(s, d) for s, d in pairs if fileio.exists(s)]
    fileio.rename([s for s, _ in pairs], [d for _, d in pairs])


def finish_interrupted(output_dir: str, run_id: str) -> tuple[list[str], set[str]]:
    """Completes what a killed run left half-done (call with the lock held): a commit from its
    journal, the cleanup of temporary folders whose commit finished, and what an atomic write
    left; run `run_id`'s own temporary folder is removed if a cut-off cleanup emptied it.
    Returns a line per thing done and the ids of the runs whose commit is now complete."""
    out = output_dir.rstrip('/')
    lines, finished = [], set()
    journal = read_journal(out)
    if journal is not None:
        roll_forward(out, journal, recovering=True)
        lines.append(f'completed the interrupted commit of run {journal.run_id} in {out}: it '
                     'holds that run\'s dataset now')
        finished.add(journal.run_id)
    _remove_partials(out, JOURNAL)
    for folder in temp_folders(out):
        if folder.state == COMMITTED:
            remove_temp(folder.path)
            lines.append(f'removed the temporary folder {folder.path} of run {folder.run_id}, '
                         'whose commit had finished')
            finished.add(folder.run_id)
    own = temp_dir(out, run_id)
    if not fileio.is_gcs(own) and not os.path.islink(own) and os.path.isdir(own):
        with contextlib.suppress(OSError):
            os.rmdir(own)   # Only if empty.
    return lines, finished

"""All file I/O of the product, for local paths and `gs://` alike: one function per operation,
each handing its path to the file system of the path's scheme, as Beam's io/filesystems.py picks
a FileSystem: LocalFiles (local_files.py) or GcsFiles (gcs_files.py), which do what each kind of
storage needs. What does not depend on the scheme is here: a write's failures that no retry fixes
(disk full, no permission, no bucket) come out as a DatasetError naming the path, a folder listed
once per block is not listed again, and calls that wait on a round trip run a few at a time.
Reads ahead are in read_ahead.py, which failures are permanent in failures.py.
"""
import base64
import contextlib
import contextvars
import errno
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, Sequence, TypeVar

from pipeline.errors import DatasetError
from pipeline.io.beam_files import match   # noqa: F401 (part of this module's API)
from pipeline.io.failures import (  # noqa: F401 (DamagedInput, TooLarge: part of its API)
    MIB, DamagedInput, TooLarge, _permanent_write_error)
from pipeline.io.file_entry import Entry
from pipeline.io.gcs_files import GcsFiles
from pipeline.io.local_files import LocalFiles

DEFAULT_MAX_INPUT = 256 * MIB   # --max_input_mb
_LOCAL, _GCS = LocalFiles(), GcsFiles()


def is_gcs(path: str) -> bool:
    return path.startswith('gs://')


def _files(path: str) -> LocalFiles | GcsFiles:
    """The file system of a path's scheme."""
    return _GCS if is_gcs(path) else _LOCAL


def join(base: str, *parts: str) -> str:
    return _files(base).join(base, *parts)


def basename(path: str) -> str:
    return _files(path).basename(path)


def dirname(path: str) -> str:
    return _files(path).dirname(path)


def read_bytes(path: str) -> bytes:
    """A whole file, in one request on Cloud Storage (retried on transient errors)."""
    return _files(path).read_bytes(path)


def read_input(path: str, limit: int) -> bytes:
    """One input of a dataset, at most `limit` bytes (else TooLarge). Locally only a regular
    file is read (a pipe would block, a device never end), its size checked before it is read
    and while (a file may grow); a Cloud Storage object's download stops past `limit`."""
    return _files(path).read_input(path, limit)


def not_regular(path: str) -> str | None:
    """Why a local `path` that exists is not read (a pipe would block its reader), or None."""
    return _files(path).not_regular(path)


def read_range(path: str, start: int, length: int) -> bytes:
    """Up to `length` bytes of a file from byte `start` (fewer at its end): one ranged read."""
    if length <= 0:
        return b''
    return _files(path).read_range(path, start, length)


def open_read(path: str):
    return _files(path).open_read(path)


def create(path: str):
    """Opens a new file `path` for writing, folders made as needed: locally whatever had the
    name before is unlinked first; on Cloud Storage the object appears when the file closes."""
    return _files(path).create(path)


def is_untrusted(path: str) -> bool:
    """Whether a local file is not one this tool could have made: it has other names too
    (st_nlink > 1; one may lie outside the output), or it is no regular file (a pipe would
    block its reader, a link lead elsewhere). Such a file is never taken as the tool's own work.
    False when absent and on Cloud Storage."""
    return _files(path).is_untrusted(path)


@contextlib.contextmanager
def writing(path: str):
    """`create(path)` for a `with` block, whose failures that retrying cannot fix (disk full,
    no permission, read-only, no bucket) come out as a DatasetError naming `path`."""
    with output_errors(path), create(path) as stream:
        yield stream


@contextlib.contextmanager
def output_errors(path: str):
    """Turns a permanent failure to write `path` into a DatasetError naming it and the fix."""
    try:
        yield
    except DatasetError:
        raise
    except Exception as exc:
        reason = _permanent_write_error(exc)
        if reason is None:
            raise
        raise DatasetError(f'cannot write {path}: {reason}') from None


def write_bytes(path: str, data: bytes) -> None:
    with writing(path) as stream:
        stream.write(data)


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Writes `path` so that it is never seen half-written (see `writing_atomic`)."""
    with writing_atomic(path) as stream:
        stream.write(data)


def writing_atomic(path: str):
    """`writing(path)` for a file that is never seen half-written: locally through a temporary
    name and a rename; on Cloud Storage an object only appears once its upload is complete (and
    one that a failure in the block ended is deleted)."""
    return _files(path).writing_atomic(path, writing)


def create_exclusive(path: str, data: bytes) -> bool:
    """Creates `path` holding `data` only if it does not exist; False if it does (locally
    O_CREAT|O_EXCL; on Cloud Storage an upload with the precondition generation 0)."""
    return _files(path).create_exclusive(path, data)


def upload(local_path: str, destination: str) -> int:
    """Copies the local file `local_path` to `destination` and checks that what arrived has its
    size and CRC32C (Cloud Storage: the object's stated checksum; disk: the copy read back);
    returns the size."""
    size, crc = os.path.getsize(local_path), _file_crc32c(local_path)
    arrived, arrived_crc = _files(destination).upload(local_path, destination, _file_crc32c)
    if (arrived, arrived_crc) != (size, crc):
        raise OSError(errno.EIO, f'{destination} holds {arrived} bytes with CRC32C {arrived_crc} '
                      f'after writing {size} bytes with CRC32C {crc}')
    return size


def _file_crc32c(path: str) -> str:
    """The CRC32C of a local file as Cloud Storage states it (base64 of the big-endian value)."""
    import google_crc32c
    checksum = google_crc32c.Checksum()
    with open(path, 'rb') as stream:
        for block in iter(lambda: stream.read(1 << 20), b''):
            checksum.update(block)
    return base64.b64encode(checksum.digest()).decode()


def read_if_exists(path: str) -> bytes | None:
    """The bytes of `path`, or None when there is no such file (on Cloud Storage, one request)."""
    return _files(path).read_if_exists(path)


def file_names(folder: str) -> list[str]:
    """The paths of the files directly in `folder`, found by name alone (no file is looked at):
    what a poll can afford; [] when the folder does not exist."""
    return _files(folder).file_names(folder)


def modified(path: str) -> float | None:
    """When the file at `path` was last written (seconds since the epoch), None if absent."""
    return _files(path).modified(path)


def tree_bytes(path: str) -> int:
    """Bytes of every file below folder `path`."""
    return sum(entry.size or 0 for _, entry in walk_files(path))


def size(path: str) -> int:
    """The size of a file in bytes."""
    return _files(path).size(path)


def exists(path: str) -> bool:
    """Whether the file `path` exists (on Cloud Storage, one request: Beam's takes two)."""
    return _files(path).exists(path)


def delete(paths: Iterable[str]) -> None:
    """Deletes files; one that does not exist is no error. On Cloud Storage, in batch requests."""
    paths = list(paths)
    for files in (_LOCAL, _GCS):
        mine = [p for p in paths if _files(p) is files]
        if mine:
            files.delete(mine)


def delete_tree(path: str) -> None:
    """Deletes a folder and everything below it; nothing happens when it does not exist."""
    _files(path).delete_tree(path)


def rename(sources: list[str], destinations: list[str]) -> None:
    """Moves files, replacing what is at the destinations (folders are created as needed).

    Local moves are atomic renames. On Cloud Storage a move is a copy and a delete, so after a
    crash in between both names exist with the same bytes; moving again completes it.
    """
    if sources:
        _files(sources[0]).rename(sources, destinations)


def concatenate(sources: list[str], destination: str) -> int:
    """Joins files in order into `destination` (the sources are left in place); returns its
    size in bytes. On Cloud Storage a server-side compose: no bytes pass through the worker."""
    return _files(destination).concatenate(sources, destination)


_LISTED: contextvars.ContextVar[dict | None] = contextvars.ContextVar('listed', default=None)


@contextlib.contextmanager
def listing_once():
    """Inside the block, a folder `list_dir` listed once is not listed again: its entries are
    given again. For steps that look at the same folders several times while nothing changes
    them (each input kind asks whether the input is its own)."""
    token = _LISTED.set({})
    try:
        yield
    finally:
        _LISTED.reset(token)


_T, _R = TypeVar('_T'), TypeVar('_R')


def at_once(function: Callable[[_T], _R], items: Sequence[_T], threads: int = 16) -> list[_R]:
    """function(item) of each item, in order, up to `threads` calls at a time: for calls that
    each wait on a round trip to Cloud Storage. Each call sees the caller's context (a
    listing_once block holds in it); the first exception raised is raised."""
    if len(items) < 2:
        return [function(item) for item in items]
    contexts = [contextvars.copy_context() for _ in items]   # One each: a context runs once.
    with ThreadPoolExecutor(min(threads, len(items))) as pool:
        return list(pool.map(lambda context, item: context.run(function, item), contexts, items))


def list_dir(path: str) -> list[Entry]:
    """The entries directly in folder `path` (sub-folders and files, hidden ones included), sorted."""
    listed = _LISTED.get()
    if listed is None:
        return _files(path).list_dir(path)
    key = path.rstrip('/') or path
    if key not in listed:
        listed[key] = _files(path).list_dir(path)
    return list(listed[key])


def walk_files(path: str) -> Iterator[tuple[str, Entry]]:
    """(path relative to `path`, entry) of every file below `path`, hidden ones included.

    Local links are followed (each real folder is visited once, so a link loop ends); a link
    that cannot be followed is an entry with an error; folders nest to any depth.
    """
    return _files(path).walk_files(path, list_dir)


def check_bucket(path: str) -> None:
    """Raises a DatasetError naming `path` when its bucket is missing or not accessible."""
    _files(path).check_bucket(path)

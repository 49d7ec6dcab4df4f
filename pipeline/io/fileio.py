"""All file I/O of the product, for local paths and `gs://` alike, through Beam's FileSystems.

The google-cloud-storage client is used where it does a thing better than FileSystems: reading
an object in one request, composing, creating an object only if absent, uploading a file with
its CRC32C, listing one folder level and checking that a bucket exists. Beam's GCS layer retries
transient errors (429/5xx, dropped connections) with backoff; permanent ones come out of here as
a DatasetError that names the path. The Cloud Storage client and what only Cloud Storage does are in
gcs.py, reads ahead in read_ahead.py, which failures are permanent in failures.py.
"""

import contextlib
import contextvars
import dataclasses
import errno
import io
import os
import posixpath
import shutil
import stat
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence, TypeVar

from pipeline.errors import DatasetError
from pipeline.io.failures import MIB, DamagedInput, TooLarge, _permanent_write_error, _short
from pipeline.io.gcs import (delete_objects, list_prefix, split_gcs, storage_client,
                             upload_bytes, write_if_generation)

if TYPE_CHECKING:
    from apache_beam.io.filesystem import FileMetadata


def is_gcs(path: str) -> bool:
    return path.startswith('gs://')


def _filesystems():
    """Beam's FileSystems, imported when first needed: reading a local dataset (verify, the
    readers) does not load Apache Beam."""
    from apache_beam.io.filesystems import FileSystems
    return FileSystems


def join(base: str, *parts: str) -> str:
    if not is_gcs(base):
        return os.path.join(base, *parts)
    for part in parts:
        base = base.rstrip('/') + '/' + part.lstrip('/')
    return base


def basename(path: str) -> str:
    return posixpath.basename(path.rstrip('/')) if is_gcs(path) else os.path.basename(path)


def dirname(path: str) -> str:
    return posixpath.dirname(path) if is_gcs(path) else os.path.dirname(path)


def read_bytes(path: str) -> bytes:
    """A whole file. Local: plain open() (a tenth of the cost of FileSystems). Cloud Storage:
    one media download (FileSystems' reader asks for the object's and the bucket's metadata
    first: three operations per image instead of one), retried on transient errors."""
    if not is_gcs(path):
        with open(path, 'rb') as stream:
            return stream.read()
    from google.cloud.storage.retry import DEFAULT_RETRY
    bucket, name = split_gcs(path)
    return storage_client().bucket(bucket).blob(name).download_as_bytes(retry=DEFAULT_RETRY)


DEFAULT_MAX_INPUT = 256 * MIB   # --max_input_mb


def read_input(path: str, limit: int) -> bytes:
    """One input of a dataset, at most `limit` bytes (else TooLarge). Locally only a regular
    file is read (a pipe would block, a device never end), its size checked before it is read
    and while (a file may grow); a Cloud Storage object's download stops past `limit`."""
    if is_gcs(path):
        from google.cloud.storage.retry import DEFAULT_RETRY
        bucket, name = split_gcs(path)
        buffer = _Bounded(limit)
        storage_client().bucket(bucket).blob(name).download_to_file(buffer, retry=DEFAULT_RETRY)
        return buffer.getvalue()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)   # A pipe opens without waiting for a writer.
    with os.fdopen(fd, 'rb') as stream:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DamagedInput(_not_regular(info.st_mode))
        os.set_blocking(fd, True)   # A regular file: read it whole, as read() promises.
        if info.st_size > limit:
            raise TooLarge(f'{info.st_size} bytes,', limit)
        # Its size first: a read of `limit` bytes sets that much memory aside (3x the time).
        data = stream.read(info.st_size + 1)
        if len(data) > info.st_size:   # It grew since: the rest, up to the limit.
            data += stream.read(limit + 1 - len(data))
    if len(data) > limit:
        raise TooLarge('grew while read:', limit)
    return data


class _Bounded(io.BytesIO):
    """A buffer that refuses to hold more than `limit` bytes (TooLarge)."""

    def __init__(self, limit: int):
        super().__init__()
        self._limit = limit

    def write(self, data) -> int:
        if self.tell() + len(data) > self._limit:
            raise TooLarge('its download holds', self._limit)
        return super().write(data)


def not_regular(path: str) -> str | None:
    """Why a local `path` that exists is not read (a pipe would block its reader), or None."""
    if is_gcs(path):
        return None
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None   # Missing: its reader says so.
    return None if stat.S_ISREG(mode) else _not_regular(mode)


def _not_regular(mode: int) -> str:
    """Why a file that is not a regular one is not read, in words."""
    kind = ('a folder' if stat.S_ISDIR(mode) else 'a named pipe (FIFO)' if stat.S_ISFIFO(mode)
            else 'a device' if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else 'a socket' if stat.S_ISSOCK(mode) else 'a special file')
    return (f'not a regular file but {kind}; only regular files are read: replace it with the '
            'file it stands for, or remove it')


def read_range(path: str, start: int, length: int) -> bytes:
    """Up to `length` bytes of a file from byte `start` (fewer at its end): one ranged read."""
    if length <= 0:
        return b''
    if not is_gcs(path):
        with open(path, 'rb') as stream:
            return os.pread(stream.fileno(), length, start)
    from google.cloud.storage.retry import DEFAULT_RETRY
    bucket, name = split_gcs(path)
    try:
        return storage_client().bucket(bucket).blob(name).download_as_bytes(
            start=start, end=start + length - 1, checksum=None, retry=DEFAULT_RETRY)
    except Exception as exc:
        if getattr(exc, 'code', None) == 416:   # The range starts at or after the end.
            return b''
        raise


def open_read(path: str):
    if not is_gcs(path):
        return open(path, 'rb')
    from apache_beam.io.filesystem import CompressionTypes
    return _filesystems().open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def create(path: str):
    """Opens a new file `path` for writing (parent folders are created as needed); locally
    whatever had the name before is unlinked first (see `_create_local`); on Cloud Storage see
    `_NewObject`."""
    return _NewObject(path) if is_gcs(path) else _create_local(path)


ONE_REQUEST_BYTES = 8 << 20   # Up to this size a new object is written in one request.


class _NewObject:
    """A new Cloud Storage object, for a `with` block: held in memory and written in one request
    at the end while it is at most ONE_REQUEST_BYTES (none is written if the block fails);
    past that, streamed through Beam's writer, a resumable upload (two requests at least)."""

    def __init__(self, path: str):
        self._path, self._held, self._stream = path, io.BytesIO(), None

    def write(self, data: bytes) -> int:
        if self._stream is None and self._held.tell() + len(data) > ONE_REQUEST_BYTES:
            from apache_beam.io.filesystem import CompressionTypes
            self._stream = _filesystems().create(self._path, mime_type='application/octet-stream',
                                                 compression_type=CompressionTypes.UNCOMPRESSED)
            self._stream.write(self._held.getvalue())
            self._held = None
        return (self._held if self._stream is None else self._stream).write(data)

    def __enter__(self) -> '_NewObject':
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if self._stream is not None:
            self._stream.close()
        elif kind is None:
            upload_bytes(self._path, self._held.getvalue())


def _create_local(path: str):
    """A local file created new for writing: the name is unlinked, then created exclusively
    (O_CREAT|O_EXCL), so a write never goes through a name that existed before (a hard link
    to a file outside the output, say)."""
    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return os.fdopen(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644), 'wb')


def is_untrusted(path: str) -> bool:
    """Whether a local file is not one this tool could have made: it has other names too
    (st_nlink > 1; one may lie outside the output), or it is no regular file (a pipe would block
    its reader, a link lead elsewhere). Such a file is never taken as the tool's own work. False
    when absent and on Cloud Storage."""
    if is_gcs(path):
        return False
    try:
        found = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return found.st_nlink > 1 or not stat.S_ISREG(found.st_mode)


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


@contextlib.contextmanager
def writing_atomic(path: str):
    """`writing(path)` for a file that is never seen half-written: locally through a temporary
    name and a rename; on Cloud Storage an object only appears once its upload is complete (and
    one that a failure in the block ended is deleted)."""
    if is_gcs(path):
        try:
            with writing(path) as stream:
                yield stream
        except BaseException:
            delete([path])
            raise
        return
    partial = f'{path}.partial-{uuid.uuid4().hex[:8]}'
    try:
        with writing(partial) as stream:
            yield stream
    except BaseException:
        delete([partial])
        raise
    os.replace(partial, path)


def create_exclusive(path: str, data: bytes) -> bool:
    """Creates `path` holding `data` only if it does not exist; False if it does.

    Local: O_CREAT|O_EXCL. Cloud Storage: an upload with the precondition generation 0.
    """
    if is_gcs(path):
        return write_if_generation(path, data, 0)
    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, 'wb') as stream:
        stream.write(data)
    return True


def upload(local_path: str, destination: str) -> int:
    """Copies the local file `local_path` to `destination` and checks that what arrived has its
    size and CRC32C (Cloud Storage: the object's stated checksum; disk: the copy read back);
    returns the size."""
    size = os.path.getsize(local_path)
    crc = _file_crc32c(local_path)
    if is_gcs(destination):
        from google.cloud.storage.retry import DEFAULT_RETRY
        bucket, name = split_gcs(destination)
        blob = storage_client().bucket(bucket).blob(name)
        blob.upload_from_filename(local_path, content_type='application/octet-stream',
                                  checksum='crc32c', retry=DEFAULT_RETRY)
        arrived, arrived_crc = blob.size, blob.crc32c
    else:
        with open(local_path, 'rb') as source, _create_local(destination) as out:
            shutil.copyfileobj(source, out, 1 << 20)
        arrived, arrived_crc = os.path.getsize(destination), _file_crc32c(destination)
    if (arrived, arrived_crc) != (size, crc):
        raise OSError(errno.EIO, f'{destination} holds {arrived} bytes with CRC32C {arrived_crc} '
                      f'after writing {size} bytes with CRC32C {crc}')
    return size


def _file_crc32c(path: str) -> str:
    """The CRC32C of a local file as Cloud Storage states it (base64 of the big-endian value)."""
    import base64
    import google_crc32c
    checksum = google_crc32c.Checksum()
    with open(path, 'rb') as stream:
        for block in iter(lambda: stream.read(1 << 20), b''):
            checksum.update(block)
    return base64.b64encode(checksum.digest()).decode()


def read_if_exists(path: str) -> bytes | None:
    """The bytes of `path`, or None when there is no such file (on Cloud Storage, one request)."""
    if is_gcs(path):
        from google.api_core.exceptions import NotFound
        try:
            return read_bytes(path)
        except NotFound:
            return None
    try:
        return read_bytes(path)
    except FileNotFoundError:
        return None


def match(pattern: str) -> list['FileMetadata']:
    """Files matching a glob (`*`, `**`), with sizes; [] when nothing matches."""
    try:
        result = _filesystems().match([pattern])[0]
    except Exception as exc:  # Beam wraps every backend error in BeamIOError.
        raise DatasetError(f'cannot list {pattern}: {_short(exc)}') from None
    return sorted(result.metadata_list, key=lambda m: m.path)


def file_names(folder: str) -> list[str]:
    """The paths of the files directly in `folder`, found by name alone (no file is looked at):
    what a poll can afford; [] when the folder does not exist."""
    if is_gcs(folder):
        return [p for p in list_prefix(folder) if '/' not in p[len(folder.rstrip('/')) + 1:]]
    try:
        return sorted(join(folder, name) for name in os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []


def modified(path: str) -> float | None:
    """When the file at `path` was last written (seconds since the epoch), None if absent."""
    if not is_gcs(path):
        try:
            return os.stat(path).st_mtime
        except FileNotFoundError:
            return None
    bucket, name = split_gcs(path)
    blob = storage_client().bucket(bucket).get_blob(name)
    return blob.updated.timestamp() if blob is not None and blob.updated else None


def tree_bytes(path: str) -> int:
    """Bytes of every file below folder `path`."""
    return sum(entry.size or 0 for _, entry in walk_files(path))


def size(path: str) -> int:
    """The size of a file in bytes."""
    if not is_gcs(path):
        return os.path.getsize(path)
    from google.cloud.storage.retry import DEFAULT_RETRY
    bucket, name = split_gcs(path)
    blob = storage_client().bucket(bucket).get_blob(name, retry=DEFAULT_RETRY)
    if blob is None:
        raise FileNotFoundError(errno.ENOENT, 'no such object', path)
    return blob.size


def exists(path: str) -> bool:
    """Whether the file `path` exists (on Cloud Storage, one request: Beam's takes two)."""
    if not is_gcs(path):
        return os.path.exists(path)
    from google.cloud.storage.retry import DEFAULT_RETRY
    bucket, name = split_gcs(path)
    return storage_client().bucket(bucket).blob(name).exists(retry=DEFAULT_RETRY)


def delete(paths: Iterable[str]) -> None:
    """Deletes files; one that does not exist is no error. On Cloud Storage, in batch requests."""
    paths = list(paths)
    local = [p for p in paths if not is_gcs(p)]
    for path in local:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
    if len(local) < len(paths):
        delete_objects([p for p in paths if is_gcs(p)])


def delete_tree(path: str) -> None:
    """Deletes a folder and everything below it; nothing happens when it does not exist."""
    if is_gcs(path):
        delete(list_prefix(path))
    else:
        shutil.rmtree(path, ignore_errors=True)


def rename(sources: list[str], destinations: list[str]) -> None:
    """Moves files, replacing what is at the destinations (folders are created as needed).

    Local moves are atomic renames. On Cloud Storage a move is a copy and a delete, so after a
    crash in between both names exist with the same bytes; moving again completes it.
    """
    if not sources:
        return
    if is_gcs(sources[0]):
        _filesystems().rename(sources, destinations)
        return
    for source, destination in zip(sources, destinations):
        os.makedirs(os.path.dirname(destination) or '.', exist_ok=True)
        os.replace(source, destination)


def concatenate(sources: list[str], destination: str) -> int:
    """Joins files in order into `destination` (the sources are left in place); returns its
    size in bytes (on Cloud Storage from the compose's answer: no request to ask it).

    On Cloud Storage this is a server-side compose, so no bytes pass through the worker. A
    compose takes at most 32 objects; longer lists are composed as a tree of intermediate
    objects. Every compose writes a fresh object from fixed sources, so retrying one after a
    transient error cannot change the result.
    """
    if is_gcs(destination):
        from google.cloud.storage.retry import DEFAULT_RETRY
        bucket_name, name = split_gcs(destination)
        bucket = storage_client().bucket(bucket_name)
        level, parts, intermediates = 0, [bucket.blob(split_gcs(s)[1]) for s in sources], []
        while len(parts) > 32:
            groups = [parts[i:i + 32] for i in range(0, len(parts), 32)]
            parts = [bucket.blob(f'{name}.compose-{level}-{i}') for i in range(len(groups))]
            for target, group in zip(parts, groups):
                target.compose(group, retry=DEFAULT_RETRY)
            intermediates += [f'gs://{bucket_name}/{p.name}' for p in parts]
            level += 1
        joined = bucket.blob(name)
        joined.compose(parts, retry=DEFAULT_RETRY)
        delete(intermediates)
        return joined.size
    with _create_local(destination) as out:
        for source in sources:
            with open(source, 'rb') as stream:
                remaining = os.fstat(stream.fileno()).st_size
                while remaining > 0:  # Copied inside the kernel.
                    copied = os.copy_file_range(stream.fileno(), out.fileno(), remaining)
                    if not copied:   # It shrank since: never loop on it.
                        raise OSError(errno.EIO, f'{source} ended {remaining} bytes early')
                    remaining -= copied
        return os.fstat(out.fileno()).st_size


@dataclasses.dataclass(frozen=True)
class Entry:
    """One name found by listing a folder."""
    path: str
    name: str
    is_dir: bool = False
    size: int | None = None
    mtime: float | None = None
    error: str | None = None    # Why the entry cannot be read (a broken link, say).

    @property
    def hidden(self) -> bool:
        return self.name.startswith('.')


_SYSTEM_FOLDERS = ('/proc', '/sys', '/dev')


def _is_system_folder(real: str) -> bool:
    return real in _SYSTEM_FOLDERS or real.startswith(tuple(f'{f}/' for f in _SYSTEM_FOLDERS))


def _local_entry(entry: os.DirEntry) -> Entry:
    try:
        found = entry.stat()  # Follows links.
    except OSError as exc:
        reason = ('symbolic link whose target does not exist' if exc.errno == errno.ENOENT else
                  'symbolic link loop' if exc.errno == errno.ELOOP else
                  f'cannot read file: {exc.strerror}')
        return Entry(entry.path, entry.name, error=reason)
    if entry.is_dir():
        if entry.is_symlink() and _is_system_folder(os.path.realpath(entry.path)):
            return Entry(entry.path, entry.name, error='a link into /proc, /sys or /dev (they '
                         'change as they are read and never end), not followed')
        return Entry(entry.path, entry.name, is_dir=True)
    if not stat.S_ISREG(found.st_mode):   # Never opened: a pipe would block, a device not end.
        return Entry(entry.path, entry.name, error=_not_regular(found.st_mode))
    return Entry(entry.path, entry.name, size=found.st_size, mtime=found.st_mtime)


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
        return _list_dir(path)
    key = path.rstrip('/') or path
    if key not in listed:
        listed[key] = _list_dir(path)
    return list(listed[key])


def _list_dir(path: str) -> list[Entry]:
    if not is_gcs(path):
        try:
            with os.scandir(path) as entries:
                return sorted((_local_entry(e) for e in entries), key=lambda e: e.path)
        except OSError as exc:
            raise DatasetError(f'cannot list folder {path}: {exc.strerror}') from None
    bucket, prefix = split_gcs(path)
    prefix = prefix.rstrip('/') + '/' if prefix else ''
    try:
        blobs = storage_client().list_blobs(bucket, prefix=prefix, delimiter='/')
        files = [Entry(f'gs://{bucket}/{b.name}', posixpath.basename(b.name), size=b.size,
                       mtime=b.updated.timestamp() if b.updated else None)
                 for b in blobs if not b.name.endswith('/')]
    except Exception as exc:
        raise DatasetError(f'cannot list {path}: {_short(exc)}') from None
    folders = [Entry(f'gs://{bucket}/{p.rstrip("/")}', posixpath.basename(p.rstrip('/')), is_dir=True)
               for p in blobs.prefixes]
    return sorted(files + folders, key=lambda e: e.path)


def walk_files(path: str) -> Iterator[tuple[str, Entry]]:
    """(path relative to `path`, entry) of every file below `path`, hidden ones included.

    Local links are followed (each real folder is visited once, so a link loop ends); a link
    that cannot be followed is an entry with an error.
    """
    if is_gcs(path):
        base = path.rstrip('/') + '/'
        for meta in match(join(path, '**')):
            if not meta.path.endswith('/'):
                relative = meta.path[len(base):]
                yield relative, Entry(meta.path, posixpath.basename(meta.path), size=meta.size_in_bytes,
                                      mtime=meta.last_updated_in_seconds)
        return
    seen = set()

    def walk(folder: str, relative: str) -> Iterator[tuple[str, Entry]]:
        try:
            identity = os.stat(folder)
            entries = list_dir(folder) if (identity.st_dev, identity.st_ino) not in seen else []
        except (OSError, DatasetError) as exc:   # Gone since its parent was listed, denied, ...
            if not relative:
                raise
            yield relative.rstrip('/'), Entry(folder, os.path.basename(folder), error=(
                f'folder cannot be listed: {getattr(exc, "strerror", None) or exc}'))
            return
        seen.add((identity.st_dev, identity.st_ino))
        for entry in entries:
            name = f'{relative}{entry.name}'
            if entry.is_dir:
                yield from walk(entry.path, name + '/')
            else:
                yield name, entry
    yield from walk(path, '')


def check_bucket(path: str) -> None:
    """Raises a DatasetError naming `path` when its bucket is missing or not accessible."""
    if not is_gcs(path):
        return
    bucket, _ = split_gcs(path)
    try:
        found = storage_client().bucket(bucket).exists()
    except Exception as exc:
        raise DatasetError(f'cannot access bucket gs://{bucket} (for {path}): {_short(exc)}. '
                           'Check the name and that your account may read and write it.') from None
    if not found:
        raise DatasetError(f'bucket gs://{bucket} does not exist (for {path}); create it '
                           f'(gcloud storage buckets create gs://{bucket}) or fix the path')

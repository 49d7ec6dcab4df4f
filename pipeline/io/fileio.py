"""All file I/O of the product, for local paths and `gs://` alike, through Beam's FileSystems.

The google-cloud-storage client is used where it does a thing better than FileSystems: reading
an object in one request, composing, creating an object only if absent, uploading a file with
its CRC32C, listing one folder level and checking that a bucket exists. Beam's GCS layer retries
transient errors (429/5xx, dropped connections) with backoff; permanent ones come out of here as
a DatasetError that names the path.
"""
import collections
import contextlib
import dataclasses
import errno
import io
import os
import posixpath
import shutil
import stat
import threading
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterable, Iterator

from typing import TYPE_CHECKING

from pipeline.errors import DatasetError

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


class DamagedInput(Exception):
    """An input that cannot be read however often it is retried; the message says why."""


MIB = 1 << 20
DEFAULT_MAX_INPUT = 256 * MIB   # --max_input_mb


class TooLarge(DamagedInput):
    """An input with more bytes than the bound on what is read for one input (--max_input_mb)."""

    def __init__(self, what: str, limit: int):
        super().__init__(f'{what} more than --max_input_mb={limit // MIB} MiB, the most read '
                         'for one input; raise --max_input_mb to read it')


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
        data = stream.read(limit + 1)
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


class ReadAhead:
    """Reads Cloud Storage objects ahead of their use on a pool of threads, for callers that
    spend the wait on a round trip (~30-50 ms from a worker) converting what was read before.

    `read_in_order` hands out the reads in the order asked, whatever order they finish in, so
    what a caller makes from them does not depend on timing. At most `reads` are in flight,
    and no new read starts while those read or being read but not yet taken add up to
    `max_bytes` or more (an object of unknown size counts as max_bytes / reads), so memory stays
    flat. A read fails as `read_input` fails (no input is read past `max_input` bytes, after its
    retries), when its result is taken.
    Local files are read when taken: from disk or the page cache that costs less than handing
    the read to a thread.
    """

    def __init__(self, reads: int, max_bytes: int, max_input: int):
        self._reads, self._max_bytes, self._max_input = reads, max_bytes, max_input
        self._pool = ThreadPoolExecutor(reads, thread_name_prefix='read-ahead')
        reserve_connections(reads)

    def read_in_order(self, files: Iterable[tuple[Any, int | None]]
                      ) -> Iterator['Future[bytes] | _ReadWhenTaken | None']:
        """For each (path or None, size or None), in order: None for no path, else an object
        whose result() is the file's bytes. Instead of a path, an object with a `file` (the path
        it reads from) and a `read(limit)` (an archive member, say) is read by calling that."""
        pending: collections.deque = collections.deque()   # (read, bytes counted)
        held = 0
        try:
            for path, size in files:
                remote = path is not None and is_gcs(getattr(path, 'file', path))
                cost = 0
                if remote:
                    cost = size if size is not None else self._max_bytes // self._reads
                while pending and (len(pending) >= self._reads or held + cost > self._max_bytes):
                    read, taken = pending.popleft()
                    held -= taken
                    yield read
                read = (self._pool.submit(_read, path, self._max_input) if remote else
                        None if path is None else _ReadWhenTaken(path, self._max_input))
                pending.append((read, cost))
                held += cost
            while pending:
                yield pending.popleft()[0]
        finally:
            for read, _ in pending:
                if isinstance(read, Future):
                    read.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        reserve_connections(-self._reads)


def _read(location, limit: int) -> bytes:
    return read_input(location, limit) if isinstance(location, str) else location.read(limit)


@dataclasses.dataclass(frozen=True)
class _ReadWhenTaken:
    path: Any
    limit: int

    def result(self) -> bytes:
        return _read(self.path, self.limit)


def open_read(path: str):
    if not is_gcs(path):
        return open(path, 'rb')
    from apache_beam.io.filesystem import CompressionTypes
    return _filesystems().open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def create(path: str):
    """Opens a new file `path` for writing (parent folders are created as needed); locally
    whatever had the name before is unlinked first (see `_create_local`)."""
    if not is_gcs(path):
        return _create_local(path)
    from apache_beam.io.filesystem import CompressionTypes
    return _filesystems().create(path, mime_type='application/octet-stream',
                                 compression_type=CompressionTypes.UNCOMPRESSED)


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
    """Writes `path` so that it is never seen half-written: locally through a temporary name
    and a rename; on Cloud Storage an object only appears once its upload is complete."""
    if is_gcs(path):
        write_bytes(path, data)
        return
    partial = f'{path}.partial-{uuid.uuid4().hex[:8]}'
    write_bytes(partial, data)
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


def read_versioned(path: str, limit: int) -> tuple[bytes, int, float] | None:
    """Cloud Storage: (bytes, generation, time of last update) of an object, None if absent;
    at most its first limit + 1 bytes."""
    from google.api_core.exceptions import NotFound, PreconditionFailed
    from google.cloud.storage.retry import DEFAULT_RETRY
    bucket, name = split_gcs(path)
    for _ in range(3):
        blob = storage_client().bucket(bucket).get_blob(name, retry=DEFAULT_RETRY)
        if blob is None:
            return None
        generation, updated = blob.generation, blob.updated.timestamp()
        try:
            first = {'start': 0, 'end': limit, 'checksum': None} if blob.size > limit else {}
            data = blob.download_as_bytes(if_generation_match=generation, retry=DEFAULT_RETRY,
                                          **first)
        except (NotFound, PreconditionFailed):
            continue   # Replaced or deleted between the two requests.
        return data, generation, updated
    return None


def write_if_generation(path: str, data: bytes, generation: int) -> bool:
    """Cloud Storage: writes the object only if its generation is still `generation` (0: only
    if there is none); False when it is not."""
    from google.api_core.exceptions import PreconditionFailed
    bucket, name = split_gcs(path)
    try:
        storage_client().bucket(bucket).blob(name).upload_from_string(
            data, if_generation_match=generation)
    except PreconditionFailed:
        return False
    return True


def delete_if_generation(path: str, generation: int) -> bool:
    """Cloud Storage: deletes the object only if its generation is still `generation`."""
    from google.api_core.exceptions import NotFound, PreconditionFailed
    bucket, name = split_gcs(path)
    try:
        storage_client().bucket(bucket).blob(name).delete(if_generation_match=generation)
    except (NotFound, PreconditionFailed):
        return False
    return True


def list_prefix(folder: str) -> list[str]:
    """Cloud Storage: every object below `folder` (a prefix, not a pattern), as gs:// paths."""
    bucket, prefix = split_gcs(folder)
    prefix = prefix.rstrip('/') + '/'
    return sorted(f'gs://{bucket}/{b.name}'
                  for b in storage_client().list_blobs(bucket, prefix=prefix))


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
    """The bytes of `path`, or None when there is no such file."""
    if is_gcs(path):
        return read_bytes(path) if exists(path) else None
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
    return _filesystems().exists(path) if is_gcs(path) else os.path.exists(path)


def delete(paths: Iterable[str]) -> None:
    paths = list(paths)
    if paths:
        _filesystems().delete(paths)


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


def concatenate(sources: list[str], destination: str) -> None:
    """Joins files in order into `destination` (the sources are left in place).

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
        bucket.blob(name).compose(parts, retry=DEFAULT_RETRY)
        delete(intermediates)
    else:
        with _create_local(destination) as out:
            for source in sources:
                with open(source, 'rb') as stream:
                    remaining = os.fstat(stream.fileno()).st_size
                    while remaining > 0:  # Copied inside the kernel.
                        remaining -= os.copy_file_range(stream.fileno(), out.fileno(), remaining)


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


def list_dir(path: str) -> list[Entry]:
    """The entries directly in folder `path` (sub-folders and files, hidden ones included), sorted."""
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


def split_gcs(path: str) -> tuple[str, str]:
    bucket, _, prefix = path[len('gs://'):].partition('/')
    return bucket, prefix


_CLIENT = None
_CLIENT_LOCK = threading.Lock()
_CONNECTIONS = 10   # Kept open per host by the client: requests' default, plus reservations.


def storage_client():
    """One google-cloud-storage client per process (Application Default Credentials; it talks
    to STORAGE_EMULATOR_HOST, anonymously, when that is set), its HTTP connection pool sized
    by `reserve_connections`."""
    global _CLIENT
    if _CLIENT is None:
        with _CLIENT_LOCK:
            if _CLIENT is None:
                from google.cloud import storage
                client = storage.Client()
                _size_connection_pool(client)
                _CLIENT = client
    return _CLIENT


def reserve_connections(count: int) -> None:
    """Lets the client keep `count` more HTTP connections per host (a negative count gives
    them back): one for each request a caller will have in flight at once. Without them, the
    connections beyond requests' default of 10 are closed after each use and every further read
    pays a new connection."""
    global _CONNECTIONS
    with _CLIENT_LOCK:
        _CONNECTIONS += count
        if _CLIENT is not None:
            _size_connection_pool(_CLIENT)


def _size_connection_pool(client) -> None:
    from requests.adapters import HTTPAdapter
    for prefix in ('https://', 'http://'):
        client._http.mount(prefix, HTTPAdapter(pool_maxsize=_CONNECTIONS))


_FULL = (errno.ENOSPC, errno.EDQUOT)
_DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _permanent_write_error(exc: BaseException) -> str | None:
    from google.api_core import exceptions as google
    for cause in _causes(exc):
        if isinstance(cause, OSError) and cause.errno in _FULL:
            return f'{cause.strerror}; free some space or choose another --output_dir'
        if isinstance(cause, OSError) and cause.errno in _DENIED:
            return f'{cause.strerror}; check the permissions or choose another --output_dir'
        if isinstance(cause, (google.Forbidden, google.Unauthorized)):
            return (f'access denied ({_short(cause)}); the account needs '
                    'roles/storage.objectAdmin on the bucket')
        if isinstance(cause, google.NotFound):
            return f'the bucket is gone ({_short(cause)}); create it or choose another --output_dir'
    return None


# Local files that no retry can read: a socket (ENXIO), /proc/self/mem (EIO), a link loop, ...
_PERMANENT_ERRNOS = frozenset({errno.ENXIO, errno.EIO, errno.ENODEV, errno.ELOOP,
                               errno.ENAMETOOLONG, errno.EINVAL})


def unreadable_input(exc: BaseException) -> str | None:
    """Why an input file cannot be read, if retrying cannot help (missing, denied, a socket);
    else None."""
    from google.api_core import exceptions as google
    for cause in _causes(exc):
        if isinstance(cause, DamagedInput):
            return str(cause)
        if isinstance(cause, (FileNotFoundError, PermissionError, IsADirectoryError,
                              NotADirectoryError)) or (isinstance(cause, OSError)
                                                       and cause.errno in _PERMANENT_ERRNOS):
            return cause.strerror or type(cause).__name__
        if isinstance(cause, (google.NotFound, google.Forbidden)):
            return _short(cause)
    return None


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__

"""The file system of `gs://` paths, as pipeline/io/fileio.py asks every file system: the
google-cloud-storage client where it does a thing in fewer requests than Beam's FileSystems
(reading an object in one request, composing, creating an object only if absent, uploading a
file with its CRC32C, listing one folder level, checking a bucket), Beam's FileSystems for
streaming a large object in or out and for moves. Both retry transient errors (429/5xx, dropped
connections) with backoff (pipeline/io/gcs.py holds the client and what only Cloud Storage
does)."""
import contextlib
import errno
import io
import posixpath
from typing import Iterator

from pipeline.errors import DatasetError
from pipeline.io.beam_files import filesystems, match
from pipeline.io.failures import TooLarge, _short
from pipeline.io.file_entry import Entry
from pipeline.io.gcs import (delete_objects, list_prefix, split_gcs, storage_client,
                             upload_bytes, write_if_generation)

ONE_REQUEST_BYTES = 8 << 20   # Up to this size a new object is written in one request.


def _retry():
    from google.cloud.storage.retry import DEFAULT_RETRY
    return DEFAULT_RETRY


class GcsFiles:
    """`gs://` paths."""

    def join(self, base: str, *parts: str) -> str:
        for part in parts:
            base = base.rstrip('/') + '/' + part.lstrip('/')
        return base

    def basename(self, path: str) -> str:
        return posixpath.basename(path.rstrip('/'))

    def dirname(self, path: str) -> str:
        return posixpath.dirname(path)

    def _blob(self, path: str):
        bucket, name = split_gcs(path)
        return storage_client().bucket(bucket).blob(name)

    def read_bytes(self, path: str) -> bytes:
        """One media download (FileSystems' reader asks for the object's and the bucket's
        metadata first: three operations per image instead of one)."""
        return self._blob(path).download_as_bytes(retry=_retry())

    def read_input(self, path: str, limit: int) -> bytes:
        """The object, its download stopped past `limit` bytes (TooLarge)."""
        buffer = _Bounded(limit)
        self._blob(path).download_to_file(buffer, retry=_retry())
        return buffer.getvalue()

    def not_regular(self, path: str) -> str | None:
        return None

    def read_range(self, path: str, start: int, length: int) -> bytes:
        try:
            return self._blob(path).download_as_bytes(
                start=start, end=start + length - 1, checksum=None, retry=_retry())
        except Exception as exc:
            if getattr(exc, 'code', None) == 416:   # The range starts at or after the end.
                return b''
            raise

    def open_read(self, path: str):
        from apache_beam.io.filesystem import CompressionTypes
        return filesystems().open(path, compression_type=CompressionTypes.UNCOMPRESSED)

    def create(self, path: str):
        return _NewObject(path)

    def is_untrusted(self, path: str) -> bool:
        return False

    @contextlib.contextmanager
    def writing_atomic(self, path: str, writing):
        """An object appears only once its upload is complete; one that a failure in the block
        ended is deleted."""
        try:
            with writing(path) as stream:
                yield stream
        except BaseException:
            self.delete([path])
            raise

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """An upload with the precondition generation 0."""
        return write_if_generation(path, data, 0)

    def upload(self, local_path: str, destination: str, crc32c) -> tuple[int, str]:
        """Uploads a local file with its CRC32C; (size, CRC32C) the object states."""
        blob = self._blob(destination)
        blob.upload_from_filename(local_path, content_type='application/octet-stream',
                                  checksum='crc32c', retry=_retry())
        return blob.size, blob.crc32c

    def read_if_exists(self, path: str) -> bytes | None:
        from google.api_core.exceptions import NotFound
        try:
            return self.read_bytes(path)
        except NotFound:
            return None

    def file_names(self, folder: str) -> list[str]:
        return [p for p in list_prefix(folder) if '/' not in p[len(folder.rstrip('/')) + 1:]]

    def modified(self, path: str) -> float | None:
        bucket, name = split_gcs(path)
        blob = storage_client().bucket(bucket).get_blob(name)
        return blob.updated.timestamp() if blob is not None and blob.updated else None

    def size(self, path: str) -> int:
        bucket, name = split_gcs(path)
        blob = storage_client().bucket(bucket).get_blob(name, retry=_retry())
        if blob is None:
            raise FileNotFoundError(errno.ENOENT, 'no such object', path)
        return blob.size

    def exists(self, path: str) -> bool:
        """One request (Beam's takes two)."""
        return self._blob(path).exists(retry=_retry())

    def delete(self, paths: list[str]) -> None:
        """In batch requests; an object that does not exist is no error."""
        delete_objects(paths)

    def delete_tree(self, path: str) -> None:
        self.delete(list_prefix(path))

    def rename(self, sources: list[str], destinations: list[str]) -> None:
        """A move is a copy and a delete: after a crash in between both names exist with the
        same bytes; moving again completes it."""
        filesystems().rename(sources, destinations)

    def concatenate(self, sources: list[str], destination: str) -> int:
        """A server-side compose (no bytes pass through here) of at most 32 objects at a time;
        longer lists are composed as a tree of intermediate objects. Each writes a fresh object
        from fixed sources, so retrying one cannot change the result. The size comes with the
        compose's answer."""
        bucket_name, name = split_gcs(destination)
        bucket = storage_client().bucket(bucket_name)
        level, parts, intermediates = 0, [bucket.blob(split_gcs(s)[1]) for s in sources], []
        while len(parts) > 32:
            groups = [parts[i:i + 32] for i in range(0, len(parts), 32)]
            parts = [bucket.blob(f'{name}.compose-{level}-{i}') for i in range(len(groups))]
            for target, group in zip(parts, groups):
                target.compose(group, retry=_retry())
            intermediates += [f'gs://{bucket_name}/{p.name}' for p in parts]
            level += 1
        joined = bucket.blob(name)
        joined.compose(parts, retry=_retry())
        self.delete(intermediates)
        return joined.size

    def list_dir(self, path: str) -> list[Entry]:
        """One folder level: objects and the prefixes below it."""
        bucket, prefix = split_gcs(path)
        prefix = prefix.rstrip('/') + '/' if prefix else ''
        try:
            blobs = storage_client().list_blobs(bucket, prefix=prefix, delimiter='/')
            files = [Entry(f'gs://{bucket}/{b.name}', posixpath.basename(b.name), size=b.size,
                           mtime=b.updated.timestamp() if b.updated else None)
                     for b in blobs if not b.name.endswith('/')]
        except Exception as exc:
            raise DatasetError(f'cannot list {path}: {_short(exc)}') from None
        folders = [Entry(f'gs://{bucket}/{p.rstrip("/")}', posixpath.basename(p.rstrip('/')),
                         is_dir=True) for p in blobs.prefixes]
        return sorted(files + folders, key=lambda e: e.path)

    def walk_files(self, path: str, list_dir) -> Iterator[tuple[str, Entry]]:
        """Every object below `path`, in one listing (`list_dir` is not needed)."""
        base = path.rstrip('/') + '/'
        for meta in match(self.join(path, '**')):
            if not meta.path.endswith('/'):
                yield meta.path[len(base):], Entry(
                    meta.path, posixpath.basename(meta.path), size=meta.size_in_bytes,
                    mtime=meta.last_updated_in_seconds)

    def check_bucket(self, path: str) -> None:
        """A DatasetError naming `path` when its bucket is missing or not accessible."""
        bucket, _ = split_gcs(path)
        try:
            found = storage_client().bucket(bucket).exists()
        except Exception as exc:
            raise DatasetError(f'cannot access bucket gs://{bucket} (for {path}): {_short(exc)}. '
                               'Check the name and that your account may read and write it.'
                               ) from None
        if not found:
            raise DatasetError(f'bucket gs://{bucket} does not exist (for {path}); create it '
                               f'(gcloud storage buckets create gs://{bucket}) or fix the path')


class _Bounded(io.BytesIO):
    """A buffer that refuses to hold more than `limit` bytes (TooLarge)."""

    def __init__(self, limit: int):
        super().__init__()
        self._limit = limit

    def write(self, data) -> int:
        if self.tell() + len(data) > self._limit:
            raise TooLarge('its download holds', self._limit)
        return super().write(data)


class _NewObject:
    """A new Cloud Storage object, for a `with` block: held in memory and written in one request
    at the end while it is at most ONE_REQUEST_BYTES (none is written if the block fails);
    past that, streamed through Beam's writer, a resumable upload (two requests at least)."""

    def __init__(self, path: str):
        self._path, self._held, self._stream = path, io.BytesIO(), None

    def write(self, data: bytes) -> int:
        if self._stream is None and self._held.tell() + len(data) > ONE_REQUEST_BYTES:
            from apache_beam.io.filesystem import CompressionTypes
            self._stream = filesystems().create(self._path, mime_type='application/octet-stream',
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

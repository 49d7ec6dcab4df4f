"""All file I/O of the product, for local paths and `gs://` alike, through Beam's FileSystems.

The google-cloud-storage client is used only where FileSystems has no call: listing the
immediate sub-folders of a prefix and checking that a bucket exists. Beam's GCS layer retries
transient errors (429/5xx, dropped connections) with backoff; permanent ones come out of here as
a DatasetError that names the path.
"""
import os
import posixpath
import shutil
from typing import Iterable

from apache_beam.io.filesystem import CompressionTypes, FileMetadata
from apache_beam.io.filesystems import FileSystems

from transforms.errors import DatasetError


def is_gcs(path: str) -> bool:
    return path.startswith('gs://')


def join(base: str, *parts: str) -> str:
    return FileSystems.join(base, *parts) if parts else base


def basename(path: str) -> str:
    return posixpath.basename(path.rstrip('/')) if is_gcs(path) else os.path.basename(path)


def dirname(path: str) -> str:
    return posixpath.dirname(path) if is_gcs(path) else os.path.dirname(path)


def read_bytes(path: str) -> bytes:
    if not is_gcs(path):  # The hot path for local images: plain open() costs a tenth.
        with open(path, 'rb') as stream:
            return stream.read()
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as stream:
        return stream.read()


def open_read(path: str):
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def create(path: str):
    """Opens `path` for writing (parent folders are created as needed)."""
    if not is_gcs(path):
        os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
    return FileSystems.create(path, mime_type='application/octet-stream',
                              compression_type=CompressionTypes.UNCOMPRESSED)


def write_bytes(path: str, data: bytes) -> None:
    with create(path) as stream:
        stream.write(data)


def match(pattern: str) -> list[FileMetadata]:
    """Files matching a glob (`*`, `**`), with sizes; [] when nothing matches."""
    try:
        result = FileSystems.match([pattern])[0]
    except Exception as exc:  # Beam wraps every backend error in BeamIOError.
        raise DatasetError(f'cannot list {pattern}: {_short(exc)}') from None
    return sorted(result.metadata_list, key=lambda m: m.path)


def exists(path: str) -> bool:
    return FileSystems.exists(path)


def delete(paths: Iterable[str]) -> None:
    paths = list(paths)
    if paths:
        FileSystems.delete(paths)


def delete_tree(path: str) -> None:
    """Deletes a folder and everything below it; nothing happens when it does not exist."""
    if is_gcs(path):
        delete(m.path for m in match(join(path, '**')))
    else:
        shutil.rmtree(path, ignore_errors=True)


def rename(sources: list[str], destinations: list[str]) -> None:
    if sources:
        FileSystems.rename(sources, destinations)


def concatenate(sources: list[str], destination: str) -> None:
    """Joins files in order into `destination` and deletes them.

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
        os.makedirs(os.path.dirname(destination) or '.', exist_ok=True)
        with open(destination, 'wb') as out:
            for source in sources:
                with open(source, 'rb') as stream:
                    remaining = os.fstat(stream.fileno()).st_size
                    while remaining > 0:  # Copied inside the kernel.
                        remaining -= os.copy_file_range(stream.fileno(), out.fileno(), remaining)
    delete(sources)


def list_subdirs(path: str) -> list[str]:
    """The immediate sub-folders of `path`, sorted, as full paths without trailing slash."""
    if not is_gcs(path):
        try:
            return sorted(entry.path for entry in os.scandir(path)
                          if entry.is_dir() and not entry.name.startswith('.'))
        except OSError as exc:
            raise DatasetError(f'cannot list folder {path}: {exc.strerror}') from None
    bucket, prefix = split_gcs(path)
    prefix = prefix.rstrip('/') + '/' if prefix else ''
    try:
        blobs = storage_client().list_blobs(bucket, prefix=prefix, delimiter='/')
        list(blobs)  # The prefixes are known only once the pages are read.
    except Exception as exc:
        raise DatasetError(f'cannot list {path}: {_short(exc)}') from None
    return sorted(f'gs://{bucket}/{p.rstrip("/")}' for p in blobs.prefixes
                  if not posixpath.basename(p.rstrip('/')).startswith('.'))


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


def storage_client():
    """One google-cloud-storage client per process (Application Default Credentials; it talks
    to STORAGE_EMULATOR_HOST, anonymously, when that is set)."""
    global _CLIENT
    if _CLIENT is None:
        from google.cloud import storage
        _CLIENT = storage.Client()
    return _CLIENT


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__

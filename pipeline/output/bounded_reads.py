"""Bounded reads of the files of the output protocol and of a dataset's metadata: only a
regular file is read (a pipe would block, a device never end), at most METADATA_LIMIT bytes of
it, and a JSON one is refused before it is parsed when it can hold more than ITEMS_LIMIT values
(keys, objects and arrays counted too) or CONTAINERS_LIMIT objects and arrays
(pipeline/base/json_size.py; a one-key object is 5 bytes of text and some 200 of memory), so no
file planted in an output folder makes a run or `verify` hold more than that. Deeper nesting
than the decoder's recursion allows is no JSON this tool wrote.
"""
import hashlib
import json
import os
import stat
from typing import Iterator

from pipeline.base import json_size
from pipeline.errors import DatasetError
from pipeline.io import fileio


class NotAFile(Exception):
    """A protocol file's name is taken by something else: str(exc) says what."""


def read_raw(path: str, limit: int | None = None) -> tuple[bytes, float] | None:
    """(bytes, modification time) of a file of the protocol, None when absent; with `limit`, at
    most its first limit + 1 bytes. Locally only a regular file is read (a pipe would block, a
    device never end); anything else is NotAFile."""
    if fileio.is_gcs(path):
        if limit is not None:   # One request: a ranged read, NotFound when absent.
            from google.api_core.exceptions import NotFound
            try:
                return fileio.read_range(path, 0, limit + 1), 0.0
            except NotFound:
                return None
        data = fileio.read_if_exists(path)
        return None if data is None else (data, 0.0)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise NotAFile('a folder' if stat.S_ISDIR(info.st_mode) else 'a pipe or device')
    with os.fdopen(fd, 'rb') as stream:
        return stream.read(-1 if limit is None else limit + 1), info.st_mtime


METADATA_LIMIT = 256 << 20   # Bytes: this tool's metadata for a million shards is ~10 MB.
ITEMS_LIMIT = 8_000_000      # JSON values in one metadata file: 3 splits of a million shards.
CONTAINERS_LIMIT = 100_000   # JSON objects and arrays in one: this tool writes a few per split
# and per feature.


def _too_large(path: str) -> DatasetError:
    return DatasetError(f'{path} holds more than {METADATA_LIMIT >> 20} MiB, more than this '
                        'tool writes there, so it is not a file of this dataset; move it away')


def read_file(path: str, bounded: bool = False) -> bytes | None:
    """The bytes of a file of the protocol, None when absent; a folder, pipe or device in its
    place, or (`bounded`: a journal, metadata) a file of more than METADATA_LIMIT bytes, is a
    DatasetError naming it."""
    try:
        found = read_raw(path, METADATA_LIMIT if bounded else None)
    except NotAFile as exc:
        raise DatasetError(f'{path} is {exc}, not a file of this tool; move it away and '
                           'rerun') from None
    if found is not None and len(found[0]) > METADATA_LIMIT and bounded:
        raise _too_large(path)
    return None if found is None else found[0]


def _excess(data: bytes) -> str | None:
    return json_size.excess(data, CONTAINERS_LIMIT, ITEMS_LIMIT)


def parse_json(path: str, data: bytes):
    """The JSON document of a file of the protocol, None when it is not JSON; one that can hold
    more than ITEMS_LIMIT values or CONTAINERS_LIMIT objects and arrays is a DatasetError naming
    it, refused before parsing."""
    excess = _excess(data)
    if excess:
        raise DatasetError(f'{path} holds {excess}, more than this tool writes there (a million '
                           'shards per split at most), so it is not a file of this dataset; '
                           'move it away')
    return as_json(data)


def load_metadata(output_dir: str, name: str) -> dict | None:
    """For verify: a JSON metadata file of the dataset in `output_dir`, None when absent or
    not a JSON object; too large a file is a DatasetError naming it (read_file, parse_json)."""
    path = fileio.join(output_dir, name)
    data = read_file(path, bounded=True)
    document = None if data is None else parse_json(path, data)
    return document if isinstance(document, dict) else None


def as_json(data: bytes):
    """Parsed JSON, or None when it is not JSON this tool could have written."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def read_metadata(output_dir: str, name: str) -> dict | None:
    """A JSON metadata file of the dataset in `output_dir`; None when it is absent, a folder,
    larger than METADATA_LIMIT, ITEMS_LIMIT or CONTAINERS_LIMIT, or not a JSON object this tool
    could have written."""
    try:
        found = read_raw(fileio.join(output_dir, name), METADATA_LIMIT)
    except NotAFile:
        return None
    if found is None or len(found[0]) > METADATA_LIMIT or _excess(found[0]):
        return None
    document = as_json(found[0])
    return document if isinstance(document, dict) else None


def read_metadata_files(output_dir: str, *names: str) -> list[dict | None]:
    """read_metadata of each of `names`, read at once (one round trip on gs://)."""
    return fileio.at_once(lambda name: read_metadata(output_dir, name), names)


LINE_LIMIT = 1 << 20   # Bytes of one line of a .jsonl report: this tool's lines are far shorter.


def _open_stream(path: str):
    """A binary stream of a file of the dataset, None when absent; not a regular file is a
    DatasetError naming it."""
    if not fileio.is_gcs(path):
        reason = fileio.not_regular(path)
        if reason:
            raise DatasetError(f'{path} is {reason}')
        if not os.path.exists(path):
            return None
    elif not fileio.exists(path):
        return None
    return fileio.open_read(path)


def jsonl_lines(path: str) -> Iterator[tuple[int, object]] | None:
    """(line number, parsed JSON) of each line of a .jsonl file, read a line at a time, None
    when absent; a line that is not JSON, too deeply nested or longer than LINE_LIMIT bytes is
    None and ends the reading (its reader stops at the first bad line)."""
    stream = _open_stream(path)
    return None if stream is None else _lines(stream)


def _lines(stream) -> Iterator[tuple[int, object]]:
    with stream:
        number = 0
        while line := stream.readline(LINE_LIMIT + 1):
            number += 1
            if len(line) > LINE_LIMIT:
                yield number, None
                return
            document = as_json(line)
            yield number, document
            if document is None:
                return


def file_sha256(path: str) -> str | None:
    """The SHA-256 (hex) of a file of the dataset, read a MiB at a time; None when absent."""
    stream = _open_stream(path)
    if stream is None:
        return None
    digest = hashlib.sha256()
    with stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()

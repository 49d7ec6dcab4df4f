"""Tar and zip archives read in place: members indexed from their headers, read by byte range.

An archive is a byte range of a file (the whole file, or a stored member of an outer archive),
so an archive inside an archive is indexed and read the same way, to any depth. Nothing is
unpacked to disk and nothing reads more than it needs:

- a tar is indexed by hopping from header to header (a member's data is skipped, never read);
  reads go through a window of READ_BLOCK bytes, so small members cost one read per window and
  large ones one read per header;
- a zip is indexed from its central directory (one read at its end, and one more if the
  central directory is longer than ZIP_TAIL);
- a member is read with one ranged read (a zip member may need a second for a long local
  header), so the members of one archive can be read by any number of workers at once.

A gzip-compressed tar (`.tar.gz`, `.tgz`) has no byte offsets to jump to: it is read in one
pass, members and their data in order (`stream`).
"""
import bz2
import dataclasses
import gzip
import io
import struct
import tarfile
import zipfile
import zlib
from typing import Iterator

from pipeline.formats import fileio

SUFFIXES = ('.tar.gz', '.tgz', '.tar', '.zip')
READ_BLOCK = 1 << 20                    # Bytes per read while indexing a tar.
ZIP_TAIL = 1 << 16                      # Bytes read at a zip's end: its end record and more.
_BLOCK = 512
_TAR_FILES = (b'0', b'\0', b'7')
_TAR_DIRS = (b'5',)


def suffix(name: str) -> str | None:
    """The archive suffix of a file name (`.tar`, `.tar.gz`, `.tgz`, `.zip`), or None."""
    lower = name.lower()
    return next((s for s in SUFFIXES if lower.endswith(s) and len(name) > len(s)), None)


def folder_name(name: str) -> str:
    """The name of the folder an archive stands for: its name without the suffix."""
    found = suffix(name)
    return name[:-len(found)] if found else name


class DamagedArchive(fileio.DamagedInput):
    """A member that cannot be read because its archive is damaged (CRC, truncation)."""


@dataclasses.dataclass(frozen=True)
class Archive:
    """An archive at bytes [start, start + size) of `file`; `path` is how users name it."""
    path: str
    file: str
    file_size: int
    file_mtime: float | None
    start: int = 0
    size: int | None = None     # None: to the end of the file.

    def __reduce__(self):
        # Every member's ref carries its archive: pickle the values only, not the field names.
        return Archive, tuple(getattr(self, name) for name in _ARCHIVE_FIELDS)

    @classmethod
    def of_file(cls, path: str, size: int, mtime: float | None) -> 'Archive':
        return cls(path, path, size, mtime, 0, size)

    @property
    def kind(self) -> str:
        found = suffix(self.path)
        return {'.zip': 'zip', '.tar': 'tar'}.get(found, 'tar.gz')

    @property
    def streamed(self) -> bool:
        """Whether it can only be read in one pass (gzip)."""
        return self.kind == 'tar.gz'

    @property
    def identity(self) -> tuple:
        """What identifies its bytes without reading them."""
        return self.file, self.file_size, self.file_mtime, self.start


@dataclasses.dataclass(frozen=True)
class Member:
    """One entry of an archive. `offset` is absolute in the archive's file: a tar member's
    data, a zip member's local header, or (streamed) the data's place in the decompressed
    stream. `error` says why it cannot be read (a link, a damaged header)."""
    archive: Archive
    name: str                    # '/'-separated path inside the archive.
    offset: int
    size: int
    is_dir: bool = False
    error: str | None = None
    zip_info: tuple | None = None   # (method, compressed size, CRC-32, local name length).

    def __reduce__(self):
        return Member, tuple(getattr(self, name) for name in _MEMBER_FIELDS)

    @property
    def path(self) -> str:
        return f'{self.archive.path}/{self.name}'

    @property
    def file(self) -> str:
        return self.archive.file

    @property
    def identity(self) -> tuple:
        return self.archive.identity, self.offset

    def nested(self) -> 'Archive | str':
        """The archive this member is, or why it cannot be read as one in place."""
        if self.zip_info is not None and self.zip_info[0] != zipfile.ZIP_STORED:
            return (f'{self.path} is a compressed archive inside a zip; store it uncompressed '
                    '(zip -0) to read it in place')
        start = self.offset
        if self.zip_info is not None:
            start += _zip_data_start(self)
        return Archive(self.path, self.archive.file, self.archive.file_size,
                       self.archive.file_mtime, start, self.size)

    def read(self) -> bytes:
        """The member's bytes (ranged reads of its archive's file)."""
        if self.archive.streamed:
            raise DamagedArchive(f'{self.archive.path} is gzip-compressed and read in one pass')
        if self.zip_info is None:
            data = fileio.read_range(self.file, self.offset, self.size)
            if len(data) != self.size:
                raise DamagedArchive(f'truncated archive: {self.archive.path} ends inside '
                                     f'{self.name}')
            return data
        return _read_zip_member(self)


_ARCHIVE_FIELDS = tuple(f.name for f in dataclasses.fields(Archive))
_MEMBER_FIELDS = tuple(f.name for f in dataclasses.fields(Member))


def members(archive: Archive) -> Iterator[Member]:
    """Every member of a tar or zip archive, in archive order (not for gzip: see `stream`)."""
    if archive.kind == 'zip':
        yield from _zip_members(archive)
    else:
        yield from _tar_members(archive)


class _Window:
    """Bytes [start, end) of a file, read through a window of READ_BLOCK bytes."""

    def __init__(self, archive: Archive):
        self.file, self.start = archive.file, archive.start
        self.size = (archive.size if archive.size is not None
                     else archive.file_size - archive.start)
        self._at, self._block = 0, b''

    def read_tail(self, length: int) -> None:
        """Reads the last `length` bytes ahead, in one read (a zip's index is at its end)."""
        self._at = max(0, self.size - length)
        self._block = fileio.read_range(self.file, self.start + self._at, self.size - self._at)

    def read_at(self, offset: int, length: int) -> bytes:
        """Up to `length` bytes at `offset` (relative to the archive's start)."""
        length = max(0, min(length, self.size - offset))
        inside = offset - self._at
        if 0 <= inside and inside + length <= len(self._block):
            return self._block[inside:inside + length]
        if length > READ_BLOCK:
            return fileio.read_range(self.file, self.start + offset, length)
        self._at = offset
        self._block = fileio.read_range(self.file, self.start + offset,
                                        min(READ_BLOCK, self.size - offset))
        return self._block[:length]


class _WindowFile(io.RawIOBase):
    """A seekable file object over a _Window, for zipfile and gzip."""

    def __init__(self, window: _Window):
        super().__init__()
        self._window, self._pos = window, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._window.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer) -> int:
        data = self._window.read_at(self._pos, len(buffer))
        buffer[:len(data)] = data
        self._pos += len(data)
        return len(data)


def _tar_members(archive: Archive) -> Iterator[Member]:
    """Hops from header to header. A damaged header is reported as a member named after its
    byte offset, and the index resumes at the next valid header (as GNU tar does)."""
    window = _Window(archive)
    position, names, pax = 0, None, {}
    while position + _BLOCK <= window.size:
        header = window.read_at(position, _BLOCK)
        if header == bytes(_BLOCK):
            return
        if not _valid_header(header):
            resumed = _next_header(window, position + _BLOCK)
            yield Member(archive, f'@{position}', archive.start + position, 0,
                         error=f'damaged tar header at byte {position} of {archive.path}: the '
                               f'members in bytes {position}-{resumed} cannot be read')
            position, names, pax = resumed, None, {}
            continue
        kind, size = header[156:157], _number(header[124:136])
        size = int(pax.get('size', size))
        data = position + _BLOCK
        following = data + (size + _BLOCK - 1) // _BLOCK * _BLOCK
        if kind in (b'L', b'x', b'K', b'g'):
            text = window.read_at(data, size)
            if kind == b'L':
                names = text.rstrip(b'\0').decode('utf-8', 'surrogateescape')
            elif kind == b'x':
                pax = _pax_records(text)
            position = following
            continue
        name = pax.get('path') or names or _header_name(header)
        name = name.lstrip('/').removeprefix('./')
        names, pax = None, {}
        member = Member(archive, name.rstrip('/'), archive.start + data, size,
                        is_dir=kind in _TAR_DIRS or name.endswith('/'))
        if data + size > window.size:
            member = dataclasses.replace(member, error=f'truncated archive: {archive.path} ends '
                                                       f'inside {member.name}')
        elif kind not in _TAR_FILES and not member.is_dir:
            what = {b'1': 'hard link', b'2': 'symbolic link'}.get(kind, 'special file')
            member = dataclasses.replace(member, error=f'a {what} inside an archive is not '
                                                       'followed')
        if member.name:
            yield member
        position = following
    if position < window.size and window.read_at(position, _BLOCK) != bytes(window.size - position):
        yield Member(archive, f'@{position}', archive.start + position, 0,
                     error=f'truncated archive: {archive.path} ends inside the header at byte '
                           f'{position}')


def _valid_header(header: bytes) -> bool:
    try:
        stored = int(header[148:156].split(b'\0', 1)[0].strip() or b'-1', 8)
    except ValueError:
        return False
    return stored == sum(header[:148]) + 8 * 32 + sum(header[156:])


def _next_header(window: _Window, position: int) -> int:
    while position + _BLOCK <= window.size and not _valid_header(window.read_at(position, _BLOCK)):
        position += _BLOCK
    return min(position, window.size)


def _number(field: bytes) -> int:
    if field[0] & 0x80:   # Base-256, for sizes of 8 GiB and more.
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], 'big')
    return int(field.split(b'\0', 1)[0].strip() or b'0', 8)


def _header_name(header: bytes) -> str:
    name = header[:100].split(b'\0', 1)[0]
    if header[257:262] == b'ustar' and header[345] != 0:
        name = header[345:500].split(b'\0', 1)[0] + b'/' + name
    return name.decode('utf-8', 'surrogateescape')


def _pax_records(text: bytes) -> dict:
    records, position = {}, 0
    while position < len(text) and text[position:position + 1].isdigit():
        length = int(text[position:text.index(b' ', position)])
        key, _, value = text[text.index(b' ', position) + 1:position + length - 1].partition(b'=')
        records[key.decode()] = value.decode('utf-8', 'surrogateescape')
        position += length
    return records


def _zip_members(archive: Archive) -> Iterator[Member]:
    window = _Window(archive)
    window.read_tail(ZIP_TAIL)
    try:
        with zipfile.ZipFile(_WindowFile(window)) as index:
            infos = index.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        yield Member(archive, '@0', archive.start, 0,
                     error=f'damaged zip {archive.path}: {exc}; none of its members can be read')
        return
    for info in infos:
        encoding = 'utf-8' if info.flag_bits & 0x800 else 'cp437'
        member = Member(archive, info.filename.rstrip('/'), archive.start + info.header_offset,
                        info.file_size, is_dir=info.is_dir(),
                        zip_info=(info.compress_type, info.compress_size, info.CRC,
                                  len(info.filename.encode(encoding, 'replace'))))
        if info.flag_bits & 0x1:
            member = dataclasses.replace(member, error='encrypted zip member')
        elif info.compress_type not in _ZIP_METHODS:
            member = dataclasses.replace(
                member, error=f'zip compression method {info.compress_type} is not supported '
                              '(stored, deflate and bzip2 are)')
        yield member


_ZIP_METHODS = {zipfile.ZIP_STORED: None, zipfile.ZIP_DEFLATED: lambda: zlib.decompressobj(-15),
                zipfile.ZIP_BZIP2: bz2.BZ2Decompressor}
_LOCAL_HEADER = struct.Struct('<4s22xHH')


def _zip_data_start(member: Member) -> int:
    """Where a zip member's data begins, relative to its local header (one small read)."""
    header = fileio.read_range(member.file, member.offset, _LOCAL_HEADER.size)
    if len(header) < _LOCAL_HEADER.size or not header.startswith(b'PK\3\4'):
        raise DamagedArchive(f'damaged zip: no local header for {member.path}')
    _, name_length, extra_length = _LOCAL_HEADER.unpack(header)
    return _LOCAL_HEADER.size + name_length + extra_length


def _read_zip_member(member: Member) -> bytes:
    method, compressed, crc, name_length = member.zip_info
    guess = _LOCAL_HEADER.size + name_length + 256 + compressed
    raw = fileio.read_range(member.file, member.offset, guess)
    if len(raw) < _LOCAL_HEADER.size or not raw.startswith(b'PK\3\4'):
        raise DamagedArchive(f'damaged zip: no local header for {member.name}')
    _, name_length, extra_length = _LOCAL_HEADER.unpack_from(raw)
    start = _LOCAL_HEADER.size + name_length + extra_length
    data = raw[start:start + compressed]
    if len(data) < compressed:
        data += fileio.read_range(member.file, member.offset + start + len(data),
                                  compressed - len(data))
    if len(data) < compressed:
        raise DamagedArchive(f'truncated zip: it ends inside {member.name}')
    if method != zipfile.ZIP_STORED:
        try:
            decompressor = _ZIP_METHODS[method]()
            data = decompressor.decompress(data)
            if hasattr(decompressor, 'flush'):
                data += decompressor.flush()
        except (zlib.error, OSError, ValueError) as exc:
            raise DamagedArchive(f'damaged zip member {member.name}: {exc}') from None
    if zlib.crc32(data) != crc or len(data) != member.size:
        raise DamagedArchive(f'damaged zip member {member.name}: CRC-32 does not match')
    return data


def stream(archive: Archive) -> Iterator[tuple[Member, bytes | None]]:
    """(member, its bytes) of a gzip-compressed tar in one pass, archives inside it expanded in
    the same pass (their members named by their path below `archive`). A directory or a member
    that cannot be read has no bytes; damage ends the pass with a member saying where."""
    source = gzip.GzipFile(fileobj=io.BufferedReader(_WindowFile(_Window(archive)), 1 << 20))
    yield from _stream_tar(archive, source, '')


def _stream_tar(archive: Archive, source, prefix: str) -> Iterator[tuple[Member, bytes | None]]:
    position = 0
    try:
        with tarfile.open(fileobj=source, mode='r|') as tar:
            for info in tar:
                position = info.offset_data
                member = Member(archive, prefix + info.name.lstrip('/').removeprefix('./'),
                                info.offset_data, info.size, is_dir=info.isdir())
                if member.is_dir:
                    yield member, None
                elif not info.isfile():
                    yield dataclasses.replace(
                        member, error='a link or special file inside an archive is not '
                                      'followed'), None
                elif suffix(info.name) in ('.tar', '.tar.gz', '.tgz'):
                    inner = tar.extractfile(info)
                    if suffix(info.name) != '.tar':
                        inner = gzip.GzipFile(fileobj=inner)
                    yield from _stream_tar(archive, inner, member.name + '/')
                elif suffix(info.name) == '.zip':
                    yield from _zip_in_stream(member, tar.extractfile(info).read())
                else:
                    yield member, tar.extractfile(info).read()
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        yield Member(archive, f'{prefix}@{position}', position, 0,
                     error=f'damaged archive {archive.path}{"/" + prefix if prefix else ""}: '
                           f'{exc}; the members after byte {position} of its uncompressed '
                           'data cannot be read'), None


def _zip_in_stream(member: Member, data: bytes) -> Iterator[tuple[Member, bytes | None]]:
    """A zip inside a streamed tar, from its bytes in memory (one member's worth)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as inner:
            for info in inner.infolist():
                entry = Member(member.archive, f'{member.name}/{info.filename.rstrip("/")}',
                               member.offset + info.header_offset, info.file_size,
                               is_dir=info.is_dir())
                if entry.is_dir:
                    yield entry, None
                    continue
                try:
                    yield entry, inner.read(info)
                except (zipfile.BadZipFile, OSError, zlib.error, NotImplementedError) as exc:
                    yield dataclasses.replace(entry, error=f'damaged zip member: {exc}'), None
    except zipfile.BadZipFile as exc:
        yield dataclasses.replace(member, name=f'{member.name}/@0',
                                  error=f'damaged zip {member.path}: {exc}'), None

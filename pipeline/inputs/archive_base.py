"""What every kind of archive shares: Archive and Member, reads through a window of a file,
member names, and the limits.

An archive is a byte range of a file (the whole file, or a stored member of an outer archive),
so an archive inside an archive is read the same way, to any depth (MAX_DEPTH at most: an
archive can hold itself). A Member here is a byte range of its archive's file, read with one
ranged read (a tar member's data, a window of a blob of images); each kind that reads its
members otherwise has its own Member (zip_index.ZipMember, gzip_pass.StreamedMember).

Damage is reported, never raised: a member that cannot be read carries an `error`, and a
stretch of an archive that holds no readable name (a damaged header, a truncated end) or a
member whose name is unsafe (absolute, empty, with a `..` part) is an `unnamed` member named
after the byte its header starts at, `/@BYTE`; no member's name has an empty part, so none can
be that.
"""
import dataclasses
import functools
import io

from pipeline.base import pickling
from pipeline.io import fileio

SUFFIXES = ('.tar.gz', '.tgz', '.tar', '.zip')
READ_BLOCK = 1 << 20                    # Bytes per read through a window.
MAX_DEPTH = 16                          # Archive files hold archives this deep at most.
TAR_BLOCK = 512                         # A tar is blocks of this many bytes.


def suffix(name: str) -> str | None:
    """The archive suffix of a file name (`.tar`, `.tar.gz`, `.tgz`, `.zip`), or None."""
    lower = name.lower()
    for found in SUFFIXES:
        if lower.endswith(found) and len(name) > len(found):
            return found
    return None


def folder_name(name: str) -> str:
    """The name of the folder an archive stands for: its name without the suffix."""
    found = suffix(name)
    return name[:-len(found)] if found else name


class DamagedArchive(fileio.DamagedInput):
    """A member that cannot be read because its archive is damaged (CRC, truncation)."""


@pickling.values_only
@dataclasses.dataclass(frozen=True)
class Archive:
    """An archive at bytes [start, start + size) of `file`; `path` is how users name it."""
    path: str
    file: str
    file_size: int
    file_mtime: float | None
    start: int = 0
    size: int | None = None     # None: to the end of the file.
    depth: int = 1              # 1: an archive file; 2: an archive inside one; and so on.

    @classmethod
    def of_file(cls, path: str, size: int, mtime: float | None) -> 'Archive':
        return cls(path, path, size, mtime, 0, size)

    @functools.cached_property
    def kind(self) -> str:
        """'zip', 'tar.gz', or 'tar': read by byte ranges, as is a file without an archive
        suffix (a blob of images, pipeline/io/image_blobs.py, whose members are its windows)."""
        found = suffix(self.path)
        return {'.zip': 'zip', '.tar.gz': 'tar.gz', '.tgz': 'tar.gz'}.get(found, 'tar')

    @property
    def streamed(self) -> bool:
        """Whether it can only be read in one pass (gzip)."""
        return self.kind == 'tar.gz'

    @property
    def identity(self) -> tuple:
        """What identifies its bytes without reading them."""
        return self.file, self.file_size, self.file_mtime, self.start


@pickling.values_only
@dataclasses.dataclass(frozen=True)
class Member:
    """One entry of an archive, its bytes at [offset, offset + size) of the archive's file.
    `error` says why it cannot be read (a link, a damaged header)."""
    archive: Archive
    name: str                    # '/'-separated path inside the archive.
    offset: int
    size: int
    is_dir: bool = False
    error: str | None = None
    # A member of an archive read in one pass: its place in the order of the pass, which finds
    # it again (name and offset do not: an archive appended twice inside it repeats both).
    index: int | None = None
    # Its error ends what can be read of the archive (a cut-off end, a gzip pass stopped by
    # damage, a zip without its directory): how many members lay behind it is unknown.
    cut: bool = False
    # A member of an archive read in one pass: the indexes of the archive entries of the pass
    # it is inside.
    within: tuple[int, ...] = ()

    @property
    def path(self) -> str:
        return f'{self.archive.path}/{self.name}'

    @property
    def unnamed(self) -> bool:
        """Whether it is an error about bytes of the archive (`/@BYTE`), not a named member."""
        return '//' in f'/{self.name}'

    @property
    def file(self) -> str:
        return self.archive.file

    @property
    def identity(self) -> tuple:
        place = (self.offset,) if self.index is None else (self.offset, self.index)
        return self.archive.identity, *place

    @property
    def header_start(self) -> int:
        """Where its header starts in its archive's file (a tar member's: the block before
        its data)."""
        return self.offset - TAR_BLOCK

    def data_start(self) -> int:
        """Where its bytes begin in its archive's file; DamagedArchive if they cannot be found."""
        return self.offset

    def nested(self) -> 'Archive | str':
        """The archive this member is, or why it cannot be read as one in place."""
        if self.archive.depth >= MAX_DEPTH:
            return (f'{self.path} is an archive nested more than {MAX_DEPTH} deep; archives '
                    'that deep are not read')
        try:
            start = self.data_start()
        except DamagedArchive as exc:
            return str(exc)
        return Archive(self.path, self.archive.file, self.archive.file_size,
                       self.archive.file_mtime, start, self.size, self.archive.depth + 1)

    def read(self, limit: int = fileio.DEFAULT_MAX_INPUT) -> bytes:
        """The member's bytes, one ranged read of its archive's file; fileio.TooLarge, before
        anything is read, if its size is over `limit`."""
        if self.size > limit:
            raise fileio.TooLarge(f'{self.size} bytes in its archive,', limit)
        data = fileio.read_range(self.file, self.offset, self.size)
        if len(data) != self.size:
            raise DamagedArchive(f'truncated archive: {self.archive.path} ends inside '
                                 f'{self.name}')
        return data


def unnamed(archive: Archive, position: int, error: str, cut: bool = False) -> Member:
    """An error about the bytes of `archive` at `position` rather than a named member."""
    return Member(archive, f'/@{position}', archive.start + position, 0, error=error, cut=cut)


def earlier_copy(member: Member, inside: Member | None) -> Member:
    """The error about a member whose name comes again later in the archive `inside` (None: its
    own archive), named after the byte its header starts at in that archive."""
    archive = member.archive
    start = 0 if archive.streamed else archive.start   # A gzip tar's offsets: in its stream.
    if inside is not None and inside.name.lower().endswith('.zip'):
        header = member.offset - inside.offset
    else:
        header = member.header_start - start
    name = f'{inside.name}//@{header}' if inside is not None else f'/@{header}'
    where = f'{archive.path}/{inside.name}' if inside is not None else archive.path
    return dataclasses.replace(
        member, name=name, offset=start + header, size=0, is_dir=False,
        error=f'{member.path} is in {where} again later: the later one is read (as tar '
              'extracts it)')


def safe_name(raw: str) -> str | None:
    """A member's name without `.` and empty parts (`./a//b.jpg` is `a/b.jpg`; '' for the
    archive's root), or None when it is unsafe: absolute, or with a `..` part."""
    parts = raw.split('/')
    if raw.startswith('/') or '..' in parts:
        return None
    return '/'.join(part for part in parts if part not in ('', '.'))


def unsafe_name(raw: str, position: int, archive: Archive | Member) -> str:
    """Why a member named `raw` (its header at byte `position`) is not read."""
    return (f'unsafe member name {raw!r} at byte {position} of {archive.path}: a name that is '
            'absolute, empty or has a .. part is not read')


def unended(path: str, end: int) -> str:
    """Why a tar that ends at byte `end` without its end blocks is reported."""
    return (f'{path} ends at byte {end} without the zero blocks that end a tar: it may have been '
            'cut off there')


class Window:
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


class WindowFile(io.RawIOBase):
    """A seekable file object over a Window, for zipfile and gzip."""

    def __init__(self, window: Window):
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

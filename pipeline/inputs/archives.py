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

A gzip-compressed tar (`.tar.gz`, `.tgz`) has no byte offsets to jump to: it is listed in one
pass (`stream`), and its members' bytes are read by another pass that ends at the last member
wanted (`read_streamed`: a chunk's members at once).

Damage is reported, never raised: a member that cannot be read carries an `error`, and a
stretch of an archive that holds no readable name (a damaged header, a truncated end) or a
member whose name is unsafe (absolute, empty, with a `..` part) is an `unnamed` member named
after the byte its header starts at, `/@BYTE`; no member's name has an empty part, so none can
be that.
Archives nest at most MAX_DEPTH deep (an archive can hold itself).

This module holds what every kind shares (Archive, Member, the window reads, member names);
tar_index.py, zip_index.py and gzip_pass.py read each kind.
"""

import dataclasses
import functools
import io
import zipfile
from typing import Any, Callable, Iterator

from pipeline.base import pickling
from pipeline.io import fileio

SUFFIXES = ('.tar.gz', '.tgz', '.tar', '.zip')
READ_BLOCK = 1 << 20                    # Bytes per read while indexing a tar.
MAX_DEPTH = 16                          # Archive files hold archives this deep at most.
_BLOCK = 512


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
    """One entry of an archive. `offset` is absolute in the archive's file: a tar member's
    data, a zip member's local header, or (streamed) the data's place in the decompressed
    stream. `error` says why it cannot be read (a link, a damaged header)."""
    archive: Archive
    name: str                    # '/'-separated path inside the archive.
    offset: int
    size: int
    is_dir: bool = False
    error: str | None = None
    # A zip member's (method, compressed size, CRC-32, local name length, end): `end` is where
    # the next local header or the central directory begins, which its data must not pass.
    zip_info: tuple | None = None
    # A gzip tar's member: its place in the order of a pass over the archive, which finds it
    # again (name and offset do not: an archive appended twice inside it repeats both).
    index: int | None = None
    # Its error ends what can be read of the archive (a cut-off end, a gzip pass stopped by
    # damage, a zip without its directory): how many members lay behind it is unknown.
    cut: bool = False
    # A gzip tar's member: the indexes of the archive entries of the pass it is inside.
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

    def nested(self) -> 'Archive | str':
        """The archive this member is, or why it cannot be read as one in place."""
        if self.archive.depth >= MAX_DEPTH:
            return (f'{self.path} is an archive nested more than {MAX_DEPTH} deep; archives '
                    'that deep are not read')
        if self.zip_info is not None and self.zip_info[0] != zipfile.ZIP_STORED:
            return (f'{self.path} is a compressed archive inside a zip; store it uncompressed '
                    '(zip -0) to read it in place')
        start = self.offset
        if self.zip_info is not None:
            try:
                start += zip_index._zip_data_start(self)
            except DamagedArchive as exc:
                return str(exc)
        return Archive(self.path, self.archive.file, self.archive.file_size,
                       self.archive.file_mtime, start, self.size, self.archive.depth + 1)

    def read(self, limit: int = fileio.DEFAULT_MAX_INPUT) -> bytes:
        """The member's bytes (ranged reads of its archive's file; a pass over a gzip tar up to
        the member); fileio.TooLarge, before anything is read or inflated, if its size or its
        compressed size is over `limit`."""
        if self.archive.streamed:
            data = gzip_pass.read_streamed([self], limit).get((self.name, self.index),
                                                              gzip_pass.gone(self))
            if isinstance(data, str):
                raise DamagedArchive(data)
            return data
        stored = max(self.size, self.zip_info[1] if self.zip_info else 0)
        if stored > limit:
            raise fileio.TooLarge(f'{stored} bytes in its archive,', limit)
        if self.zip_info is None:
            data = fileio.read_range(self.file, self.offset, self.size)
            if len(data) != self.size:
                raise DamagedArchive(f'truncated archive: {self.archive.path} ends inside '
                                     f'{self.name}')
            return data
        return zip_index._read_zip_member(self)


def members(archive: Archive) -> Iterator[Member]:
    """Every member of an archive, in archive order (a gzip tar's from one pass, `stream`).
    Within each archive, of members with the same name the last wins, as tar extracts them
    (`tar -r` appends a new version): each earlier one is reported as an error about its bytes,
    and an earlier copy of an archive inside a gzip tar hides what it holds."""
    return (member for member, _ in members_read(archive, lambda member: False, None))


def members_read(archive: Archive, keep: Callable[[Member], bool],
                 parse: Callable[[Member, bytes], Any]) -> Iterator[tuple[Member, Any]]:
    """(member, parse(member, its bytes) if `keep(member)` else None) of every member that
    `members` gives, the kept ones read while the archive is indexed: a tar's through the index
    window (a small member costs no read of its own), a gzip tar's in its one pass, a zip's by
    member. Only parsed values are held, never a kept member's bytes; a member with an error
    is not read."""
    if archive.streamed:
        found = [(member, parse(member, data) if data is not None else None)
                 for member, data in gzip_pass.stream(archive, keep)]
    elif archive.kind == 'zip':
        found = [(member, _read_kept(member, keep, parse))
                 for member in zip_index._zip_members(archive)]
    else:
        window = _Window(archive)
        found = [(member, parse(member, window.read_at(member.offset - archive.start, member.size))
                  if keep(member) and member.error is None else None)
                 for member in tar_index._tar_members(archive, window)]
    by_index = {m.index: m for m, _ in found if m.index is not None}
    last = {(m.within, m.name): m.identity for m, _ in found if not m.unnamed and not m.is_dir}
    hidden = set()   # Pass indices of earlier copies of archives inside a gzip tar.
    for member, value in found:
        if hidden.intersection(member.within):
            continue
        if member.unnamed or member.is_dir:
            yield member, value
        elif last[member.within, member.name] != member.identity:
            yield _earlier_copy(member, by_index.get(member.within[-1] if member.within
                                                     else None)), None
            hidden.add(member.index)
        elif not _holds_members(member):
            yield member, value


def _read_kept(member: Member, keep: Callable[[Member], bool],
               parse: Callable[[Member, bytes], Any]) -> Any:
    """parse(member, its bytes) if it is kept and can be read, else None."""
    if not keep(member) or member.error is not None:
        return None
    try:
        return parse(member, member.read())
    except fileio.DamagedInput:
        return None


def _holds_members(member: Member) -> bool:
    """Whether it is the entry of an archive inside a gzip tar, whose members follow it."""
    return member.archive.streamed and bool(suffix(member.name)) and member.error is None


def _earlier_copy(member: Member, inside: Member | None) -> Member:
    """The error about a member whose name comes again later in the archive `inside` (None: its
    own archive), named after the byte its header starts at in that archive."""
    archive = member.archive
    start = 0 if archive.streamed else archive.start   # A gzip tar's offsets: in its stream.
    if inside is not None and inside.name.lower().endswith('.zip'):
        header = member.offset - inside.offset
    else:
        header = member.offset - start - (0 if member.zip_info else _BLOCK)
    name = f'{inside.name}//@{header}' if inside is not None else f'/@{header}'
    where = f'{archive.path}/{inside.name}' if inside is not None else archive.path
    return dataclasses.replace(
        member, name=name, offset=start + header, size=0, is_dir=False,
        zip_info=None, error=f'{member.path} is in {where} again later: the later one is read '
                             '(as tar extracts it)')


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


def _unended(path: str, end: int) -> str:
    return (f'{path} ends at byte {end} without the zero blocks that end a tar: it may have been '
            'cut off there')


def _unnamed(archive: Archive, position: int, error: str, cut: bool = False) -> Member:
    """An error about the bytes of `archive` at `position` rather than a named member."""
    return Member(archive, f'/@{position}', archive.start + position, 0, error=error, cut=cut)


def _safe_name(raw: str) -> str | None:
    """A member's name without `.` and empty parts (`./a//b.jpg` is `a/b.jpg`; '' for the
    archive's root), or None when it is unsafe: absolute, or with a `..` part."""
    parts = raw.split('/')
    if raw.startswith('/') or '..' in parts:
        return None
    return '/'.join(part for part in parts if part not in ('', '.'))


def _unsafe(raw: str, position: int, archive: 'Archive | Member') -> str:
    return (f'unsafe member name {raw!r} at byte {position} of {archive.path}: a name that is '
            'absolute, empty or has a .. part is not read')


# The readers of each kind build on Archive and Member above; members() and Member pick one.
from pipeline.inputs import gzip_pass, tar_index, zip_index  # noqa: E402

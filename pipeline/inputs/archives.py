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
"""
import bz2
import dataclasses
import functools
import io
import struct
import tarfile
import zipfile
import zlib
from typing import Callable, Iterable, Iterator

from pipeline.io import fileio
from pipeline import pickling

SUFFIXES = ('.tar.gz', '.tgz', '.tar', '.zip')
READ_BLOCK = 1 << 20                    # Bytes per read while indexing a tar.
EXTENDED_MAX = 1 << 20                  # Bytes of a tar long-name or pax header, at most.
MAX_DEPTH = 16                          # Archive files hold archives this deep at most.
ZIP_TAIL = 1 << 16                      # Bytes read at a zip's end: its end record and more.
_BLOCK = 512
_TAR_FILES = (b'0', b'\0', b'7')
_TAR_DIRS = (b'5',)
_TAR_EXTENDED = (b'L', b'K', b'x', b'g')


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
                start += _zip_data_start(self)
            except DamagedArchive as exc:
                return str(exc)
        return Archive(self.path, self.archive.file, self.archive.file_size,
                       self.archive.file_mtime, start, self.size, self.archive.depth + 1)

    def read(self, limit: int = fileio.DEFAULT_MAX_INPUT) -> bytes:
        """The member's bytes (ranged reads of its archive's file; a pass over a gzip tar up to
        the member); fileio.TooLarge, before anything is read or inflated, if its size or its
        compressed size is over `limit`."""
        if self.archive.streamed:
            data = read_streamed([self], limit).get((self.name, self.index), gone(self))
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
        return _read_zip_member(self)


def members(archive: Archive) -> Iterator[Member]:
    """Every member of an archive, in archive order (a gzip tar's from one pass, `stream`).
    Within each archive, of members with the same name the last wins, as tar extracts them
    (`tar -r` appends a new version): each earlier one is reported as an error about its bytes,
    and an earlier copy of an archive inside a gzip tar hides what it holds."""
    found = ([member for member, _ in stream(archive)] if archive.streamed
             else list(_zip_members(archive) if archive.kind == 'zip' else _tar_members(archive)))
    by_index = {m.index: m for m in found if m.index is not None}
    last = {(m.within, m.name): m.identity for m in found if not m.unnamed and not m.is_dir}
    hidden = set()   # Pass indices of earlier copies of archives inside a gzip tar.
    for member in found:
        if hidden.intersection(member.within):
            continue
        if member.unnamed or member.is_dir:
            yield member
        elif last[member.within, member.name] != member.identity:
            yield _earlier_copy(member, by_index.get(member.within[-1] if member.within else None))
            hidden.add(member.index)
        elif not _holds_members(member):
            yield member


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


def _tar_members(archive: Archive) -> Iterator[Member]:
    """Hops from header to header. A header that does not parse (its checksum, a size that is
    not a number, an extended header over EXTENDED_MAX) starts a damaged stretch, reported as
    an unnamed member; the index resumes at the next valid header (as GNU tar does). Extended
    headers (long names, pax records) that do not parse make the member they describe an
    error."""
    window = _Window(archive)
    # `start`: where the headers of the next member begin (extended headers come first).
    position, start, extended, damage, resynced = 0, 0, {}, None, False
    while position + _BLOCK <= window.size:
        header = window.read_at(position, _BLOCK)
        if header == bytes(_BLOCK) and position == start:
            if resynced and _data_after(window, position):
                # Resumed inside a tar stored in it, whose end this is, not the archive's.
                yield _unnamed(archive, position, f'damaged tar: zero blocks at byte {position} '
                                                  f'of {archive.path}, after a damaged header, '
                                                  'are followed by more data; the members after '
                                                  'them cannot be read', cut=True)
            return
        kind = header[156:157]
        size = _number(header[124:136]) if _valid_header(header) else None
        if size is None or (kind in _TAR_EXTENDED and size > EXTENDED_MAX):
            resumed = _next_header(window, position + _BLOCK)
            if resumed + _BLOCK > window.size:   # No header after it: damaged to the end,
                ended = window.size % _BLOCK == 0 and not window.read_at(
                    window.size - 2 * _BLOCK, 2 * _BLOCK).strip(b'\0')
                yield _unnamed(archive, start, f'damaged tar header at byte {position} of '
                                               f'{archive.path}: the members after byte {start} '
                                               'cannot be read', cut=not ended)   # or its end.
                return
            resynced = True
            yield _unnamed(archive, start, f'damaged tar header at byte {position} of '
                                           f'{archive.path}: the members in bytes '
                                           f'{start}-{resumed} cannot be read')
            position = start = resumed
            extended, damage = {}, None
            continue
        data = position + _BLOCK
        if kind in _TAR_EXTENDED:
            try:
                extended.update(_extended(kind, window.read_at(data, size)))
            except ValueError as exc:
                damage = f'damaged pax header at byte {position} of {archive.path}: {exc}'
            position = data + _padded(size)
            continue
        size = extended.get('size', size)
        raw = extended.get('path') or _header_name(header)
        name = _safe_name(raw)
        is_dir = kind in _TAR_DIRS or raw.endswith('/')
        if name is None or not (name or is_dir):
            yield _unnamed(archive, start, _unsafe(raw, start, archive))
        elif name:
            error, cut = damage, data + size > window.size
            if cut:
                error = f'truncated archive: {archive.path} ends inside {name}'
            elif error is None and kind not in _TAR_FILES and not is_dir:
                what = {b'1': 'hard link', b'2': 'symbolic link'}.get(kind, 'special file')
                error = f'a {what} inside an archive is not followed'
            yield Member(archive, name, archive.start + data, size, is_dir, error, cut=cut)
            if cut:
                return
        position = start = data + _padded(size)
        extended, damage = {}, None
    if position != start or window.read_at(position, _BLOCK).strip(b'\0'):
        yield _unnamed(archive, start, f'truncated archive: {archive.path} ends inside the '
                                       f'header at byte {start}', cut=True)
    elif position > window.size:
        yield _unnamed(archive, window.size, f'truncated archive: {archive.path} ends at byte '
                                             f'{window.size}, inside the padding after a member',
                       cut=True)
    else:
        yield _unnamed(archive, start, _unended(archive.path, start))


def _data_after(window: '_Window', position: int) -> bool:
    """Whether anything but zeros follows byte `position` of the window (read to the first
    byte that is not zero: an archive's end is zeros to a record's end, a few KB)."""
    while position < window.size:
        length = min(READ_BLOCK, window.size - position)
        if window.read_at(position, length).strip(b'\0'):
            return True
        position += length
    return False


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


def _padded(size: int) -> int:
    return -(-size // _BLOCK) * _BLOCK


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


def _number(field: bytes) -> int | None:
    """A header's number field (octal, or base-256 for 8 GiB and more); None if it is not one."""
    if field[0] == 0x80:
        return int.from_bytes(field[1:], 'big')
    digits = field.split(b'\0', 1)[0].strip()
    if digits.strip(b'01234567'):
        return None
    return int(digits or b'0', 8)


def _header_name(header: bytes) -> str:
    name = header[:100].split(b'\0', 1)[0]
    if header[257:262] == b'ustar' and header[345] != 0:
        name = header[345:500].split(b'\0', 1)[0] + b'/' + name
    return name.decode('utf-8', 'surrogateescape')


def _extended(kind: bytes, text: bytes) -> dict:
    """What an extended header says of the member after it: its `path` and `size`, if it says
    them. ValueError if its records do not parse."""
    if kind == b'L':
        return {'path': text.split(b'\0', 1)[0].decode('utf-8', 'surrogateescape')}
    if kind != b'x':
        return {}   # A long link name, or global pax records: nothing a member needs.
    records = _pax_records(text)
    found = {'path': records['path']} if 'path' in records else {}
    if 'size' in records:
        if not (records['size'].isascii() and records['size'].isdigit()):
            raise ValueError(f'its size {records["size"]!r} is not a number of bytes')
        found['size'] = int(records['size'])
    return found


def _pax_records(text: bytes) -> dict[str, str]:
    """The `LENGTH KEY=VALUE\\n` records of a pax header; ValueError if one does not parse."""
    records, position = {}, 0
    while position < len(text) and text[position] != 0:
        digits, space, _ = text[position:position + 24].partition(b' ')
        length = int(digits) if space and digits.isdigit() else 0
        record = text[position:position + length]
        key, equals, value = record[len(digits) + 1:-1].partition(b'=')
        if length <= len(digits) + 1 or len(record) < length or not record.endswith(b'\n') \
                or not equals:
            raise ValueError(f'its record at byte {position} does not parse')
        records[key.decode('utf-8', 'surrogateescape')] = value.decode('utf-8', 'surrogateescape')
        position += length
    return records


def _zip_members(archive: Archive) -> Iterator[Member]:
    window = _Window(archive)
    window.read_tail(ZIP_TAIL)
    try:
        with zipfile.ZipFile(_WindowFile(window)) as index:
            infos = index.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        yield _unnamed(archive, 0, f'damaged zip {archive.path}: {exc}; none of its members '
                                   'can be read', cut=True)
        return
    if _inner_end_record(window, index.start_dir):
        yield _unnamed(archive, 0, f'damaged zip {archive.path}: it ends inside a member (the '
                                   'last end record in it is that of a zip stored in it); none '
                                   'of its members can be read', cut=True)
        return
    ends = _zip_ends(infos, index.start_dir)
    for info in infos:
        name = _safe_name(info.filename)
        if name is None or not (name or info.is_dir()):
            yield _unnamed(archive, info.header_offset, _unsafe(info.filename,
                                                                info.header_offset, archive))
            continue
        if not name:
            continue   # The archive's root.
        encoding = 'utf-8' if info.flag_bits & 0x800 else 'cp437'
        name_length = len(info.filename.encode(encoding, 'replace'))
        end = ends[id(info)]
        runs_on = info.header_offset + _LOCAL_HEADER.size + name_length + info.compress_size > end
        error = _zip_problem(info) or (f'damaged zip {archive.path}: {name} runs into the member '
                                       'or the central directory after it' if runs_on else None)
        yield Member(archive, name, archive.start + info.header_offset, info.file_size,
                     info.is_dir(), error, (info.compress_type, info.compress_size, info.CRC,
                                            name_length, archive.start + end))


def _inner_end_record(window: _Window, start_dir: int) -> bool:
    """Whether the end record zipfile took for a zip's own is that of a zip stored in it (the
    zip was cut after it): its directory is then shifted to where a stored member's data
    begins, right behind that member's local header."""
    tail = window.read_at(max(0, window.size - ZIP_TAIL), ZIP_TAIL)
    at = tail.rfind(b'PK\5\6')
    if at < 0 or at + 22 > len(tail):
        return False
    shift = start_dir - int.from_bytes(tail[at + 16:at + 20], 'little')
    if shift <= 0:   # The directory is where the record says: it is the zip's own.
        return False
    before = window.read_at(max(0, shift - ZIP_TAIL), min(shift, ZIP_TAIL))
    header = before.rfind(b'PK\3\4')
    while header >= 0:
        local = before[header:header + _LOCAL_HEADER.size]
        if (len(local) == _LOCAL_HEADER.size
                and header + _local_length(local) == len(before)):
            return True
        header = before.rfind(b'PK\3\4', 0, header)
    return False


def _zip_problem(info: zipfile.ZipInfo) -> str | None:
    """Why a zip member cannot be read, if its central directory entry says so."""
    if info.flag_bits & 0x1:
        return 'encrypted zip member'
    if info.compress_type not in _ZIP_METHODS:
        return (f'zip compression method {info.compress_type} is not supported (stored, '
                'deflate and bzip2 are)')
    if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
        return (f'damaged zip member: stored, but its size ({info.file_size} bytes) is not '
                f'its stored size ({info.compress_size})')
    return None


def _zip_ends(infos: list[zipfile.ZipInfo], directory: int) -> dict[int, int]:
    """id(member) -> where the next member's local header or the central directory begins:
    where its data must end, so that no two members (nor a member and the directory the
    members are found in) share bytes, and no stretch of a zip is read twice (a zip made to
    hold itself, or the same bytes many times over, is damaged)."""
    ordered = sorted(infos, key=lambda info: info.header_offset)
    return {id(info): min(after.header_offset if after else directory, directory)
            for info, after in zip(ordered, [*ordered[1:], None])}


_ZIP_METHODS = {zipfile.ZIP_STORED: None, zipfile.ZIP_DEFLATED: lambda: zlib.decompressobj(-15),
                zipfile.ZIP_BZIP2: bz2.BZ2Decompressor}
_LOCAL_HEADER = struct.Struct('<4s22xHH')


def _zip_data_start(member: Member) -> int:
    """Where a zip member's data begins, relative to its local header (one small read).
    DamagedArchive if its data would run past its end (into what follows it)."""
    header = fileio.read_range(member.file, member.offset, _LOCAL_HEADER.size)
    if len(header) < _LOCAL_HEADER.size or not header.startswith(b'PK\3\4'):
        raise DamagedArchive(f'damaged zip: no local header for {member.path}')
    return _checked_start(member, _local_length(header))


def _local_length(header: bytes) -> int:
    """The length of a zip member's local header (and name and extra field) from its start."""
    _, name_length, extra_length = _LOCAL_HEADER.unpack_from(header)
    return _LOCAL_HEADER.size + name_length + extra_length


def _checked_start(member: Member, start: int) -> int:
    if member.offset + start + member.zip_info[1] > member.zip_info[4]:
        raise DamagedArchive(f'damaged zip: {member.path} runs into the member or the central '
                             'directory after it')
    return start


def _read_zip_member(member: Member) -> bytes:
    method, compressed, crc, name_length, _ = member.zip_info
    guess = _LOCAL_HEADER.size + name_length + 256 + compressed
    raw = fileio.read_range(member.file, member.offset, guess)
    if len(raw) < _LOCAL_HEADER.size or not raw.startswith(b'PK\3\4'):
        raise DamagedArchive(f'damaged zip: no local header for {member.name}')
    start = _checked_start(member, _local_length(raw))
    data = raw[start:start + compressed]
    if len(data) < compressed:
        data += fileio.read_range(member.file, member.offset + start + len(data),
                                  compressed - len(data))
    if len(data) < compressed:
        raise DamagedArchive(f'truncated zip: it ends inside {member.name}')
    if method != zipfile.ZIP_STORED:
        try:   # At most one byte more than the member's size: a false size is not inflated.
            data = _ZIP_METHODS[method]().decompress(data, member.size + 1)
        except (zlib.error, OSError, ValueError, EOFError) as exc:
            raise DamagedArchive(f'damaged zip member {member.name}: {exc}') from None
        if len(data) > member.size:
            raise DamagedArchive(f'damaged zip member {member.name}: it inflates to more than '
                                 f'its size, {member.size} bytes')
    if zlib.crc32(data) != crc or len(data) != member.size:
        raise DamagedArchive(f'damaged zip member {member.name}: CRC-32 does not match')
    return data


def stream(archive: Archive, keep: Callable[[Member], bool] = lambda member: False,
           limit: int = fileio.DEFAULT_MAX_INPUT) -> Iterator[tuple[Member, bytes | None]]:
    """(member, its bytes when `keep(member)`) of a gzip-compressed tar in one pass, archives
    inside it expanded in the same pass: an archive's own entry, then its members, named by
    their path below `archive` and `within` it.
    Each member is read to its end whether kept or not (unkept ones in blocks), so damage is
    found the same way either way: a member that cannot be read has an error, and damage that
    ends the pass is a last member saying where. No member over `limit` bytes is held in
    memory: a kept one, or a zip inside (read whole), has an error instead."""
    source = _gunzip(io.BufferedReader(_WindowFile(_Window(archive)), 1 << 20))
    pass_ = _Pass(keep, limit)
    for member, data in _stream_tar(archive, source, '', archive.depth, pass_):
        yield pass_.placed(member), data
        pass_.index += 1


class _Pass:
    """A pass over a gzip tar: which members' bytes to keep, the most bytes it holds of one, the
    index of the next member it yields (a member's place in the pass) and the indexes of the
    archive entries it is in."""

    def __init__(self, keep: Callable[[Member], bool], limit: int):
        self.keep, self.limit, self.index, self.within = keep, limit, 0, ()

    def placed(self, member: Member) -> Member:
        return dataclasses.replace(member, index=self.index, within=self.within)

    def wants(self, member: Member) -> bool:
        return self.keep(self.placed(member))


def read_streamed(wanted: Iterable[Member], limit: int = fileio.DEFAULT_MAX_INPUT
                  ) -> dict[tuple[str, int], bytes | str]:
    """The bytes of members of gzip tars, or why they cannot be read (one over `limit` bytes,
    say), by (name, index): one pass over each archive, ending at the last member wanted. A
    member not found (the archive changed since it was listed) is left out."""
    by_archive: dict[Archive, set] = {}
    for member in wanted:
        by_archive.setdefault(member.archive, set()).add((member.name, member.index))
    found = {}
    for archive, left in by_archive.items():
        for member, data in stream(archive, lambda m: (m.name, m.index) in left, limit):
            key = (member.name, member.index)
            if key in left and not member.is_dir:
                found[key] = member.error if data is None else data
                left.discard(key)
                if not left:
                    break
    return found


def gone(member: Member) -> str:
    """Why a member of a gzip tar was not found when read."""
    return (f'{member.archive.path} no longer holds {member.name} at byte {member.offset} of its '
            'uncompressed data: it changed since it was listed')


def _gunzip(source) -> io.BufferedReader:
    return io.BufferedReader(_Gunzip(source), 1 << 16)


class _Gunzip(io.RawIOBase):
    """The uncompressed bytes of gzip data (of concatenated members too; zeros may pad its
    end). A cut-off end reads as an end once, so that a buffered read returns every byte
    before it (gzip.GzipFile loses its last read's worth), then raises EOFError."""

    def __init__(self, source):
        super().__init__()
        self._source, self._inflate = source, zlib.decompressobj(31)
        self._pending, self._started, self._cut = b'', False, False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while True:
            self._pending = self._pending or self._source.read(1 << 16)
            if self._inflate.eof or not self._started:
                if not self._pending.strip(b'\0'):
                    if not self._pending:
                        return 0
                    self._pending = b''
                    continue
                self._inflate, self._started = zlib.decompressobj(31), True
            if not self._pending:
                if self._cut:
                    raise EOFError('compressed data ends before the end of its gzip stream')
                self._cut = True
                return 0
            data = self._inflate.decompress(self._pending, len(buffer))
            self._pending = (self._inflate.unused_data if self._inflate.eof
                             else self._inflate.unconsumed_tail)
            if data:
                buffer[:len(data)] = data
                return len(data)


class _Unended(Exception):
    """A tar's data ends where a header or the zero blocks that end it should be."""


class _StrictTarInfo(tarfile.TarInfo):
    """tarfile's header, stricter for a one-pass read: a damaged or cut header and a negative
    size are errors (tarfile takes them for the archive's end), so is data that ends without
    the zero blocks (`_Unended`), and an extended header over EXTENDED_MAX is refused before
    it is read into memory."""

    @classmethod
    def fromtarfile(cls, tar):
        try:
            info = super().fromtarfile(tar)
        except (tarfile.InvalidHeaderError, tarfile.TruncatedHeaderError) as exc:
            raise tarfile.ReadError(str(exc)) from None
        except tarfile.EmptyHeaderError:   # Taken for the end by tarfile, or an empty file.
            raise _Unended() from None
        if info.size < 0:
            raise tarfile.ReadError(f'{info.name} has a negative size')
        return info

    def _proc_member(self, tar):
        if self.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE,
                         tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE) and self.size > EXTENDED_MAX:
            raise tarfile.HeaderError(f'an extended header of {self.size} bytes')
        return super()._proc_member(tar)


def _stream_tar(archive: Archive, source, prefix: str, depth: int,
                pass_: _Pass) -> Iterator[tuple[Member, bytes | None]]:
    at, end, pending = 0, 0, None   # `pending`: a member being read, not yet yielded.
    where = f'{archive.path}/{prefix.rstrip("/")}' if prefix else archive.path
    try:
        with tarfile.open(fileobj=source, mode='r|', tarinfo=_StrictTarInfo) as tar:
            for info in tar:
                at, end = info.offset_data, tar.offset
                name = _safe_name(info.name)
                if name is None or not (name or info.isdir()):
                    yield Member(archive, f'{prefix}/@{info.offset}', info.offset, 0,
                                 error=_unsafe(info.name, info.offset, archive)), None
                    continue
                if not name:
                    continue   # The archive's root.
                member = Member(archive, prefix + name, info.offset_data, info.size,
                                is_dir=info.isdir())
                if member.is_dir:
                    yield member, None
                elif not info.isfile():
                    yield dataclasses.replace(
                        member, error='a link or special file inside an archive is not '
                                      'followed'), None
                else:
                    pending = member
                    for item in _stream_member(member, lambda: tar.extractfile(info), depth,
                                               pass_):
                        pending = None
                        yield item
    except _Unended:
        try:
            source.read(1)   # A cut-off gzip stream ends once, then says so when read again.
        except (EOFError, OSError, zlib.error) as exc:
            yield _stream_damage(archive, prefix, where, end, None, exc), None
        else:
            yield Member(archive, f'{prefix}/@{end}', end, 0, error=_unended(where, end)), None
    except (tarfile.TarError, EOFError, OSError, ValueError, zlib.error) as exc:
        yield _stream_damage(archive, prefix, where, at, pending, exc), None


def _stream_damage(archive: Archive, prefix: str, where: str, at: int,
                   pending: Member | None, exc: Exception) -> Member:
    """The error that ends a pass over the gzip tar `archive` or an archive inside it (`where`
    its path, `prefix` its members' names' start): on the member it was reading, else at byte
    `at` of the uncompressed data."""
    error = (f'damaged archive {where}: {exc}; the members after byte {at} of its uncompressed '
             'data cannot be read')
    return (dataclasses.replace(pending, error=error, cut=True) if pending is not None
            else Member(archive, f'{prefix}/@{at}', at, 0, error=error, cut=True))


def _stream_member(member: Member, open_member, depth: int,
                   pass_: _Pass) -> Iterator[tuple[Member, bytes | None]]:
    """(member, its bytes if kept) of a file in a streamed archive, or the members of the
    archive it is; `open_member()` gives a file object of its bytes."""
    kind = suffix(member.name)
    if kind and depth >= MAX_DEPTH:
        yield dataclasses.replace(
            member, error=f'{member.path} is an archive nested more than {MAX_DEPTH} deep; '
                          'archives that deep are not read'), None
    elif member.size > pass_.limit and (kind == '.zip' or (not kind and pass_.wants(member))):
        _skip(open_member())   # A zip inside is read whole, a kept member too: not this one.
        yield dataclasses.replace(member, error=str(fileio.TooLarge(
            f'{member.size} bytes in its archive,', pass_.limit))), None
    elif kind:
        yield member, None   # The archive's own entry; its members follow, inside it.
        pass_.within += (pass_.index - 1,)
        try:
            if kind == '.zip':
                yield from _zip_in_stream(member, open_member().read(), depth + 1, pass_)
            else:
                inner = open_member() if kind == '.tar' else _gunzip(open_member())
                yield from _stream_tar(member.archive, inner, member.name + '/', depth + 1,
                                       pass_)
        finally:
            pass_.within = pass_.within[:-1]
    elif pass_.wants(member):
        yield member, open_member().read()
    else:
        _skip(open_member())
        yield member, None


def _skip(data) -> None:
    """Reads a member's file object to its end in blocks (so damage in it is found)."""
    while data.read(READ_BLOCK):
        pass


def _zip_in_stream(member: Member, data: bytes, depth: int,
                   pass_: _Pass) -> Iterator[tuple[Member, bytes | None]]:
    """A zip inside a streamed tar, from its bytes in memory (one member's worth), archives
    inside it expanded."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as inner:
            infos = inner.infolist()
            ends = _zip_ends(infos, inner.start_dir)
            for info in infos:
                name = _safe_name(info.filename)
                at = member.offset + info.header_offset
                if name is None or not (name or info.is_dir()):
                    yield Member(member.archive, f'{member.name}//@{at}', at, 0,
                                 error=_unsafe(info.filename, info.header_offset, member)), None
                    continue
                entry = Member(member.archive, f'{member.name}/{name}', at, info.file_size,
                               is_dir=info.is_dir())
                local = data[info.header_offset:info.header_offset + _LOCAL_HEADER.size]
                error = _zip_problem(info) or (
                    'damaged zip member: it runs into the member or the central directory '
                    'after it' if len(local) < _LOCAL_HEADER.size or info.header_offset
                    + _local_length(local) + info.compress_size > ends[id(info)] else None)
                if entry.is_dir or error:
                    yield dataclasses.replace(entry, error=error), None
                    continue
                try:
                    yield from _stream_member(entry, lambda: inner.open(info), depth, pass_)
                except (zipfile.BadZipFile, OSError, zlib.error, EOFError, ValueError) as exc:
                    yield dataclasses.replace(entry, error=f'damaged zip member: {exc}'), None
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        yield dataclasses.replace(member, name=f'{member.name}//@0', cut=True,
                                  error=f'damaged zip {member.path}: {exc}'), None

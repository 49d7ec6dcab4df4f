"""A zip indexed from its central directory, read through a window an entry at a time (no
object of each entry is held: a zip of any number of members, up to MAX_ENTRIES), and its
members (ZipMember) read by byte range: one ranged read each (a second for a long local
header)."""
import array
import dataclasses
import struct
import zipfile
import zlib
from typing import Iterator, NamedTuple

import numpy as np

from pipeline.base import pickling
from pipeline.inputs import zip_records
from pipeline.inputs.archive_base import (MAX_DEPTH, Archive, DamagedArchive, Member, Window,
                                          WindowFile, safe_name, unnamed, unsafe_name)
from pipeline.io import fileio

ZIP_TAIL = 1 << 16                      # Bytes read at a zip's end: its end record and more.
MAX_ENTRIES = 100_000_000               # Central directory entries of a zip, at most.
TOO_MANY_FIX = ('; none of its members are read: split it into zips of fewer members (one per '
                'class, say), or use a tar')


@pickling.values_only
@dataclasses.dataclass(frozen=True)
class ZipMember(Member):
    """A member of a zip: `offset` is its local header's. Its data, `stored_size` bytes
    compressed by `method` (CRC-32 `crc`), follows that header and must end by `end`, where
    the next local header or the central directory begins."""
    method: int = zipfile.ZIP_STORED
    stored_size: int = 0
    crc: int = 0
    name_length: int = 0        # Of its name in its local header.
    end: int = 0

    @property
    def header_start(self) -> int:
        return self.offset

    def data_start(self) -> int:
        """Where its data begins (one small read of its local header). DamagedArchive if its
        data would run past its end (into what follows it)."""
        header = fileio.read_range(self.file, self.offset, zip_records.LOCAL_HEADER.size)
        if (len(header) < zip_records.LOCAL_HEADER.size
                or not header.startswith(b'PK\3\4')):
            raise DamagedArchive(f'damaged zip: no local header for {self.path}')
        return self.offset + self._checked_start(zip_records.local_length(header))

    def nested(self) -> 'Archive | str':
        if self.archive.depth < MAX_DEPTH and self.method != zipfile.ZIP_STORED:
            return (f'{self.path} is a compressed archive inside a zip; store it uncompressed '
                    '(zip -0) to read it in place')
        return super().nested()

    def read(self, limit: int = fileio.DEFAULT_MAX_INPUT) -> bytes:
        """Its bytes, inflated and checked against its CRC-32; fileio.TooLarge, before anything
        is read or inflated, if its size or its compressed size is over `limit`."""
        stored = max(self.size, self.stored_size)
        if stored > limit:
            raise fileio.TooLarge(f'{stored} bytes in its archive,', limit)
        data = self._inflated(self._stored_bytes())
        if zlib.crc32(data) != self.crc or len(data) != self.size:
            raise DamagedArchive(f'damaged zip member {self.name}: CRC-32 does not match')
        return data

    def _stored_bytes(self) -> bytes:
        """Its data as stored: one ranged read with room for a local header's extra field, a
        second one if that is longer."""
        guess = zip_records.LOCAL_HEADER.size + self.name_length + 256 + self.stored_size
        raw = fileio.read_range(self.file, self.offset, guess)
        if len(raw) < zip_records.LOCAL_HEADER.size or not raw.startswith(b'PK\3\4'):
            raise DamagedArchive(f'damaged zip: no local header for {self.name}')
        start = self._checked_start(zip_records.local_length(raw))
        data = raw[start:start + self.stored_size]
        if len(data) < self.stored_size:
            data += fileio.read_range(self.file, self.offset + start + len(data),
                                      self.stored_size - len(data))
        if len(data) < self.stored_size:
            raise DamagedArchive(f'truncated zip: it ends inside {self.name}')
        return data

    def _inflated(self, data: bytes) -> bytes:
        if self.method == zipfile.ZIP_STORED:
            return data
        try:   # At most one byte more than the member's size: a false size is not inflated.
            data = zip_records.METHODS[self.method]().decompress(data, self.size + 1)
        except (zlib.error, OSError, ValueError, EOFError) as exc:
            raise DamagedArchive(f'damaged zip member {self.name}: {exc}') from None
        if len(data) > self.size:
            raise DamagedArchive(f'damaged zip member {self.name}: it inflates to more than '
                                 f'its size, {self.size} bytes')
        return data

    def _checked_start(self, start: int) -> int:
        """`start` (from its local header), if its data ends by its end; else DamagedArchive."""
        if self.offset + start + self.stored_size > self.end:
            raise DamagedArchive(f'damaged zip: {self.path} runs into the member or the '
                                 'central directory after it')
        return start


def members(archive: Archive) -> Iterator[ZipMember | Member]:
    """The members of a zip in the order of its central directory; unsafe names, and damage
    that leaves no member readable, as unnamed members. The directory is read once through the
    window, into columns (no object of each entry is held), checked whole before any member is
    given."""
    window = Window(archive)
    window.read_tail(ZIP_TAIL)
    try:
        directory = _directory(window)
        entries = _Entries.read(window, *directory)
    except TooManyEntries as exc:
        yield unnamed(archive, 0, f'zip {archive.path} {exc}{TOO_MANY_FIX}')
        return
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError) as exc:
        yield unnamed(archive, 0, f'damaged zip {archive.path}: {exc}; none of its members '
                                  'can be read', cut=True)
        return
    start_dir = directory[0]
    if _inner_end_record(window, start_dir):
        yield unnamed(archive, 0, f'damaged zip {archive.path}: it ends inside a member (the '
                                  'last end record in it is that of a zip stored in it); none '
                                  'of its members can be read', cut=True)
        return
    ends = zip_records.data_ends(np.frombuffer(entries.offsets, np.int64), start_dir)
    for info, end in zip(entries, ends):
        name = safe_name(info.filename)
        if name is None or not (name or zip_records.is_dir(info)):
            yield unnamed(archive, info.header_offset,
                          unsafe_name(info.filename, info.header_offset, archive))
        elif name:   # Not the archive's root.
            yield _member(archive, info, name, end)


class TooManyEntries(ValueError):
    """A zip's central directory holds more entries than MAX_ENTRIES."""


def over_limit(error: str) -> bool:
    """Whether a zip's error is that it holds more entries than are read (no damage)."""
    return error.endswith(TOO_MANY_FIX)


def _directory(window: Window) -> tuple[int, int, int]:
    """Where a zip's central directory starts, its bytes, and how far its members' offsets are
    shifted (by bytes before the zip), as zipfile finds them; BadZipFile if it cannot."""
    try:
        end = zipfile._EndRecData(WindowFile(window))
    except OSError:
        end = None
    if not end:
        raise zipfile.BadZipFile('File is not a zip file')
    size, offset = end[zipfile._ECD_SIZE], end[zipfile._ECD_OFFSET]
    concat = end[zipfile._ECD_LOCATION] - size - offset
    if end[zipfile._ECD_SIGNATURE] == zipfile.stringEndArchive64:
        concat -= zipfile.sizeEndCentDir64 + zipfile.sizeEndCentDir64Locator
    if offset + concat < 0:
        raise zipfile.BadZipFile('Bad offset for central directory')
    return offset + concat, size, concat


_CENTRAL = struct.Struct(zipfile.structCentralDir)   # An entry's fixed 46 bytes.
_NAME_LENGTH = zipfile._CD_FILENAME_LENGTH
_BLOCK = 1 << 20                                     # Bytes of the directory parsed at a time.


class _Entry(NamedTuple):
    """What a central directory entry says (the fields of a ZipInfo that are read)."""
    filename: str
    header_offset: int
    flag_bits: int
    compress_type: int
    CRC: int
    compress_size: int
    file_size: int
    name_length: int   # Of its name as stored.


@dataclasses.dataclass
class _Entries:
    """A central directory's entries as columns, parsed in one pass with struct."""
    offsets: array.array = dataclasses.field(default_factory=lambda: array.array('q'))
    numbers: array.array = dataclasses.field(default_factory=lambda: array.array('q'))
    names: bytearray = dataclasses.field(default_factory=bytearray)

    @classmethod
    def read(cls, window: Window, start: int, size: int, concat: int) -> '_Entries':
        """The entries of a central directory of `size` bytes at `start`, checked as zipfile
        checks them (signatures, lengths within the directory, versions, zip64 extra fields);
        TooManyEntries after MAX_ENTRIES of them."""
        found = cls()
        size = min(size, window.size - start)   # zipfile reads what there is.
        total, block, block_at = 0, b'', 0
        while total < size:
            fixed_end = min(total + _CENTRAL.size, size)
            if fixed_end > block_at + len(block):
                block_at, block = total, window.read_at(start + total, min(_BLOCK, size - total))
            at = total - block_at
            if fixed_end - total != _CENTRAL.size:
                raise zipfile.BadZipFile('Truncated central directory')
            fields = _CENTRAL.unpack_from(block, at)
            if fields[zipfile._CD_SIGNATURE] != zipfile.stringCentralDir:
                raise zipfile.BadZipFile('Bad magic number for central directory')
            if len(found.offsets) >= MAX_ENTRIES:
                raise TooManyEntries(f'holds more than {MAX_ENTRIES:,} entries, the most read '
                                     'of a zip')
            name_length, extra_length, comment_length = fields[_NAME_LENGTH:_NAME_LENGTH + 3]
            variable = name_length + extra_length + comment_length
            total += _CENTRAL.size
            stop = min(total + variable, size)   # zipfile reads what there is.
            if stop > block_at + len(block):
                block_at, block = total, window.read_at(start + total,
                                                        max(_BLOCK, stop - total))
            at = total - block_at
            name = block[at:at + min(name_length, stop - total)]
            extra = block[at + name_length:min(at + name_length + extra_length,
                                               stop - block_at)]
            found._add(fields, name, extra, concat)
            total += variable
        return found

    def _add(self, fields: tuple, name: bytes, extra: bytes, concat: int) -> None:
        (_, _, _, extract_version, _, flags, method, _, _, crc, stored_size, size,
         *_, offset) = fields
        if extract_version > zipfile.MAX_EXTRACT_VERSION:
            raise NotImplementedError(f'zip file version {extract_version / 10:.1f}')
        size, stored_size, offset = _zip64(extra, size, stored_size, offset)
        if flags & 0x800:   # As zipfile: UnicodeDecodeError (any bytes are cp437).
            name.decode('utf-8')
        self.names += name
        self.offsets.append(offset + concat)
        self.numbers.extend((len(self.names), flags, method, crc, stored_size, size))

    def __iter__(self) -> Iterator[_Entry]:
        numbers, names, start = self.numbers, self.names, 0
        for row, offset in enumerate(self.offsets):
            end, flags, method, crc, stored_size, size = numbers[row * 6:row * 6 + 6]
            name = bytes(names[start:end]).decode('utf-8' if flags & 0x800 else 'cp437')
            yield _Entry(name, offset, flags, method, crc, stored_size, size, end - start)
            start = end


def _zip64(extra: bytes, size: int, stored_size: int, offset: int) -> tuple[int, int, int]:
    """An entry's size, stored size and local header offset, from its zip64 extra field where
    they are 0xFFFFFFFF, as zipfile reads them (its errors too)."""
    while len(extra) >= 4:
        kind, length = struct.unpack_from('<HH', extra)
        if length + 4 > len(extra):
            raise zipfile.BadZipFile(f'Corrupt extra field {kind:04x} (size={length})')
        if kind == 0x0001:
            data = extra[4:length + 4]
            values = []
            for field, value in (('File size', size), ('Compress size', stored_size),
                                 ('Header offset', offset)):
                if value == 0xFFFFFFFF:
                    if len(data) < 8:
                        raise zipfile.BadZipFile(f'Corrupt zip64 extra field. {field} not '
                                                 'found.')
                    value, data = struct.unpack_from('<Q', data)[0], data[8:]
                values.append(value)
            size, stored_size, offset = values
        extra = extra[length + 4:]
    return size, stored_size, offset


def _member(archive: Archive, info: _Entry, name: str, end: int) -> ZipMember:
    """The member a central directory entry describes; `end`: where its data must end."""
    name_length = info.name_length
    runs_on = (info.header_offset + zip_records.LOCAL_HEADER.size + name_length
               + info.compress_size > end)
    error = zip_records.problem(info) or (f'damaged zip {archive.path}: {name} runs into the '
                                          'member or the central directory after it'
                                          if runs_on else None)
    return ZipMember(archive, name, archive.start + info.header_offset, info.file_size,
                     zip_records.is_dir(info), error, method=info.compress_type,
                     stored_size=info.compress_size, crc=info.CRC, name_length=name_length,
                     end=archive.start + end)


def _inner_end_record(window: Window, start_dir: int) -> bool:
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
        local = before[header:header + zip_records.LOCAL_HEADER.size]
        if (len(local) == zip_records.LOCAL_HEADER.size
                and header + zip_records.local_length(local) == len(before)):
            return True
        header = before.rfind(b'PK\3\4', 0, header)
    return False

"""A zip indexed from its central directory, read through a window an entry at a time (no
object of each entry is held: a zip of any number of members, up to MAX_ENTRIES), and its
members (ZipMember) read by byte range: one ranged read each (a second for a long local
header)."""
import dataclasses
import struct
import zipfile
import zlib
from typing import Iterator

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
    that leaves no member readable, as unnamed members. The directory is read twice through the
    window, an entry at a time (no object of each is held): first to check it whole and find
    where each member must end, then to give the members."""
    window = Window(archive)
    window.read_tail(ZIP_TAIL)
    try:
        directory = _directory(window)
        offsets = np.fromiter((info.header_offset for info in _entries(window, *directory)),
                              np.int64)
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
    for info, end in zip(_entries(window, *directory), zip_records.data_ends(offsets, start_dir)):
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


def _entries(window: Window, start: int, size: int, concat: int) -> Iterator[zipfile.ZipInfo]:
    """The entries of a central directory of `size` bytes at `start`, read and checked as
    zipfile reads them (an object of each made, and dropped, as it is read); TooManyEntries
    after MAX_ENTRIES of them."""
    size = min(size, window.size - start)   # zipfile reads what there is.
    total, count = 0, 0
    while total < size:
        fixed = window.read_at(start + total, min(zipfile.sizeCentralDir, size - total))
        if len(fixed) != zipfile.sizeCentralDir:
            raise zipfile.BadZipFile('Truncated central directory')
        fields = struct.unpack(zipfile.structCentralDir, fixed)
        if fields[zipfile._CD_SIGNATURE] != zipfile.stringCentralDir:
            raise zipfile.BadZipFile('Bad magic number for central directory')
        count += 1
        if count > MAX_ENTRIES:
            raise TooManyEntries(f'holds more than {MAX_ENTRIES:,} entries, the most read of '
                                 'a zip')
        lengths = fields[zipfile._CD_FILENAME_LENGTH:zipfile._CD_COMMENT_LENGTH + 1]
        at = start + total + zipfile.sizeCentralDir
        variable = window.read_at(at, min(sum(lengths), size - total - zipfile.sizeCentralDir))
        name, extra = variable[:lengths[0]], variable[lengths[0]:lengths[0] + lengths[1]]
        yield _entry(fields, name, extra, concat)
        total += zipfile.sizeCentralDir + sum(lengths)


def _entry(fields: tuple, name: bytes, extra: bytes, concat: int) -> zipfile.ZipInfo:
    """A central directory entry as zipfile reads it (its checks, its zip64 extra field)."""
    flags = fields[zipfile._CD_FLAG_BITS]
    info = zipfile.ZipInfo(name.decode('utf-8' if flags & 0x800 else 'cp437'))
    info.extra = extra
    info.header_offset = fields[zipfile._CD_LOCAL_HEADER_OFFSET]
    (info.create_version, info.create_system, info.extract_version, info.reserved,
     info.flag_bits, info.compress_type, _, _, info.CRC, info.compress_size,
     info.file_size) = fields[1:12]
    if info.extract_version > zipfile.MAX_EXTRACT_VERSION:
        raise NotImplementedError(f'zip file version {info.extract_version / 10:.1f}')
    info._decodeExtra()
    info.header_offset += concat
    return info


def _member(archive: Archive, info: zipfile.ZipInfo, name: str, end: int) -> ZipMember:
    """The member a central directory entry describes; `end`: where its data must end."""
    encoding = 'utf-8' if info.flag_bits & 0x800 else 'cp437'
    name_length = len(info.filename.encode(encoding, 'replace'))
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

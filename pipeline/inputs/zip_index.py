"""A zip indexed from its central directory (one read at its end, and one more if the central
directory is longer than ZIP_TAIL), and its members (ZipMember) read by byte range: one ranged
read each (a second for a long local header)."""
import dataclasses
import zipfile
import zlib
from typing import Iterator

from pipeline.base import pickling
from pipeline.inputs import zip_records
from pipeline.inputs.archive_base import (MAX_DEPTH, Archive, DamagedArchive, Member, Window,
                                          WindowFile, safe_name, unnamed, unsafe_name)
from pipeline.io import fileio

ZIP_TAIL = 1 << 16                      # Bytes read at a zip's end: its end record and more.


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
    that leaves no member readable, as unnamed members."""
    window = Window(archive)
    window.read_tail(ZIP_TAIL)
    excess = zip_records.directory_excess(WindowFile(window))
    if excess:
        yield unnamed(archive, 0, f'zip {archive.path}: {excess}; none of its members are read: '
                                  'split it into zips of fewer members (one per class, say), or '
                                  'use a tar', cut=True)
        return
    try:
        with zipfile.ZipFile(WindowFile(window)) as index:
            infos = index.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError) as exc:
        yield unnamed(archive, 0, f'damaged zip {archive.path}: {exc}; none of its members '
                                  'can be read', cut=True)
        return
    if _inner_end_record(window, index.start_dir):
        yield unnamed(archive, 0, f'damaged zip {archive.path}: it ends inside a member (the '
                                  'last end record in it is that of a zip stored in it); none '
                                  'of its members can be read', cut=True)
        return
    ends = zip_records.ends(infos, index.start_dir)
    for info in infos:
        name = safe_name(info.filename)
        if name is None or not (name or zip_records.is_dir(info)):
            yield unnamed(archive, info.header_offset,
                          unsafe_name(info.filename, info.header_offset, archive))
        elif name:   # Not the archive's root.
            yield _member(archive, info, name, ends[id(info)])


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

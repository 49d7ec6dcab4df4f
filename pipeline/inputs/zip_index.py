"""A zip indexed from its central directory, and a zip member read by byte range
(pipeline/inputs/archives.py)."""
import bz2
import struct
import zipfile
import zlib
from typing import Iterator

from pipeline.inputs.archives import (Archive, DamagedArchive, Member, _safe_name, _unnamed,
                                      _unsafe, _Window, _WindowFile)
from pipeline.io import fileio

ZIP_TAIL = 1 << 16                      # Bytes read at a zip's end: its end record and more.


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

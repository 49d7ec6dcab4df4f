"""A tar indexed in place by hopping from header to header: a member's data is skipped, never
read; reads go through a window of READ_BLOCK bytes, so small members cost one read per window
and large ones one read per header."""
from typing import Iterator

from pipeline.inputs import tar_records
from pipeline.inputs.archive_base import (READ_BLOCK, TAR_BLOCK, Archive, Member, Window,
                                          safe_name, unended, unnamed, unsafe_name)
from pipeline.inputs.tar_records import EXTENDED_MAX

_TAR_FILES = (b'0', b'\0', b'7')
_TAR_DIRS = (b'5',)


def members(archive: Archive, window: Window | None = None) -> Iterator[Member]:
    """The members of a tar in archive order, hopping from header to header. A header that
    does not parse (its checksum, a size that is not a number, an extended header over
    EXTENDED_MAX) starts a damaged stretch, reported as an unnamed member; the index resumes at
    the next valid header (as GNU tar does). Extended headers (long names, pax records) that do
    not parse make the member they describe an error. `window`: the one to read through (a
    caller may read small members through it between headers at no cost of its own)."""
    window = window or Window(archive)
    # `start`: where the headers of the next member begin (extended headers come first).
    position, start, extended, damage, resynced = 0, 0, {}, None, False
    while position + TAR_BLOCK <= window.size:
        header = window.read_at(position, TAR_BLOCK)
        if header == bytes(TAR_BLOCK) and position == start:
            if resynced and _data_after(window, position):
                # Resumed inside a tar stored in it, whose end this is, not the archive's.
                yield unnamed(archive, position, f'damaged tar: zero blocks at byte {position} '
                                                 f'of {archive.path}, after a damaged header, '
                                                 'are followed by more data; the members after '
                                                 'them cannot be read', cut=True)
            return
        kind = header[156:157]
        size = _number(header[124:136]) if _valid_header(header) else None
        if size is None or (kind in tar_records.EXTENDED and size > EXTENDED_MAX):
            resumed = _next_header(window, position + TAR_BLOCK)
            if resumed + TAR_BLOCK > window.size:   # No header after it: damaged to the end,
                ended = window.size % TAR_BLOCK == 0 and not window.read_at(
                    window.size - 2 * TAR_BLOCK, 2 * TAR_BLOCK).strip(b'\0')
                yield unnamed(archive, start, f'damaged tar header at byte {position} of '
                                              f'{archive.path}: the members after byte {start} '
                                              'cannot be read', cut=not ended)   # or its end.
                return
            resynced = True
            yield unnamed(archive, start, f'damaged tar header at byte {position} of '
                                          f'{archive.path}: the members in bytes '
                                          f'{start}-{resumed} cannot be read')
            position = start = resumed
            extended, damage = {}, None
            continue
        data = position + TAR_BLOCK
        if kind in tar_records.EXTENDED:
            try:
                extended.update(tar_records.extended(kind, window.read_at(data, size)))
            except ValueError as exc:
                damage = f'damaged pax header at byte {position} of {archive.path}: {exc}'
            position = data + _padded(size)
            continue
        size = extended.get('size', size)
        raw = extended.get('path') or _header_name(header)
        name = safe_name(raw)
        is_dir = kind in _TAR_DIRS or raw.endswith('/')
        if name is None or not (name or is_dir):
            yield unnamed(archive, start, unsafe_name(raw, start, archive))
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
    if position != start or window.read_at(position, TAR_BLOCK).strip(b'\0'):
        yield unnamed(archive, start, f'truncated archive: {archive.path} ends inside the '
                                      f'header at byte {start}', cut=True)
    elif position > window.size:
        yield unnamed(archive, window.size, f'truncated archive: {archive.path} ends at byte '
                                            f'{window.size}, inside the padding after a member',
                      cut=True)
    else:
        yield unnamed(archive, start, unended(archive.path, start))


def _data_after(window: Window, position: int) -> bool:
    """Whether anything but zeros follows byte `position` of the window (read to the first
    byte that is not zero: an archive's end is zeros to a record's end, a few KB)."""
    while position < window.size:
        length = min(READ_BLOCK, window.size - position)
        if window.read_at(position, length).strip(b'\0'):
            return True
        position += length
    return False


def _padded(size: int) -> int:
    return -(-size // TAR_BLOCK) * TAR_BLOCK


def _valid_header(header: bytes) -> bool:
    try:
        stored = int(header[148:156].split(b'\0', 1)[0].strip() or b'-1', 8)
    except ValueError:
        return False
    return stored == sum(header[:148]) + 8 * 32 + sum(header[156:])


def _next_header(window: Window, position: int) -> int:
    while (position + TAR_BLOCK <= window.size
           and not _valid_header(window.read_at(position, TAR_BLOCK))):
        position += TAR_BLOCK
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

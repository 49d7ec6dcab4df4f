"""Tar and zip archives of test files, as bytes."""
import io
import struct
import tarfile
import zipfile
import zlib
from typing import Iterable


def tar(files: dict, compression: str = '', form: int = tarfile.PAX_FORMAT) -> bytes:
    """A tar of {member name: bytes} in that order ('gz': gzip-compressed); a name ending in
    '/' is a directory entry. `form`: tarfile's format (GNU_FORMAT writes long names as
    `././@LongLink` entries, PAX_FORMAT as pax records)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=f'w:{compression}', format=form) as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name.rstrip('/'))
            if name.endswith('/'):
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            else:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def zip_(files: dict, compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    """A zip of {member name: bytes}; a name ending in '/' is a directory entry."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, 'w', compression) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return out.getvalue()


def zip64(files: dict) -> bytes:
    """A zip of {member name: bytes} (stored) in its zip64 form: each central directory entry's
    sizes and offset in a zip64 extra field, and a zip64 end record before the end record."""
    local, central = b'', b''
    for name, data in files.items():
        encoded, crc = name.encode(), zlib.crc32(data)
        extra = struct.pack('<2H3Q', 1, 24, len(data), len(data), len(local))
        central += struct.pack('<4s6H3I5H2I', b'PK\1\2', 45, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF,
                               0xFFFFFFFF, len(encoded), len(extra), 0, 0, 0, 0, 0xFFFFFFFF)
        central += encoded + extra
        local += struct.pack('<4s5H3I2H', b'PK\3\4', 45, 0, 0, 0, 0, crc, len(data), len(data),
                             len(encoded), 0) + encoded + data
    count, at = len(files), len(local) + len(central)
    end64 = struct.pack('<4sQ2H2L4Q', b'PK\6\6', 44, 45, 45, 0, 0, count, count, len(central),
                        len(local))
    locator = struct.pack('<4sLQL', b'PK\6\7', 0, at, 1)
    end = struct.pack('<4s4H2IH', b'PK\5\6', 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return local + central + end64 + locator + end


def folder(files: dict, prefix: str) -> dict:
    """The files below `prefix/`, named relative to it."""
    return {k[len(prefix) + 1:]: v for k, v in files.items() if k.startswith(prefix + '/')}


def class_tars(files: dict, prefix: str) -> dict:
    """{CLASS.tar: tar of its files} for the class folders below `prefix/` (ImageNet's layout)."""
    inner = folder(files, prefix)
    classes = sorted({k.split('/')[0] for k in inner})
    return {f'{c}.tar': tar(folder(inner, c)) for c in classes}


def tar_entry(name: str, data: bytes, kind: bytes = b'0', size_field: bytes | None = None) -> bytes:
    """One tar member as raw blocks (a header with a valid checksum, then its data), to build
    damaged archives: `kind` is its type flag, `size_field` replaces its 12-byte size field."""
    info = tarfile.TarInfo(name)
    info.size, info.type = len(data), kind
    header = bytearray(info.tobuf(tarfile.USTAR_FORMAT))
    if size_field is not None:
        header[124:136] = size_field.ljust(12, b'\0')
    header[148:156] = b' ' * 8
    header[148:156] = b'%06o\0 ' % sum(header)
    return bytes(header) + data + bytes(-len(data) % 512)


def pax_record(key: bytes, value: bytes) -> bytes:
    """A pax extended header record, `LENGTH KEY=VALUE\\n` (LENGTH counts itself)."""
    body = b' %s=%s\n' % (key, value)
    length = len(body) + len(str(len(body)))
    length = len(body) + len(str(length))   # 98 bytes and 2 digits make 100, of 3 digits.
    return b'%d%s' % (length, body)


def write_stored_zip(path, items: Iterable[tuple[str, bytes]], claimed: int | None = None) -> None:
    """Writes a zip of (member name, bytes), stored, its structure written directly (200,000
    entries in a few seconds); a name ending in '/' is a directory entry. Its end record (zip64
    past 65,534 entries) claims `claimed` entries (default: as many as it holds)."""
    directory, count = bytearray(), 0
    with open(path, 'wb') as out:
        for name, body in items:
            raw, crc, offset = name.encode(), zlib.crc32(body), out.tell()
            out.write(struct.pack('<IHHHHHIIIHH', 0x04034B50, 20, 0, 0, 0, 0, crc, len(body),
                                  len(body), len(raw), 0) + raw + body)
            directory += struct.pack('<IHHHHHHIIIHHHHHII', 0x02014B50, 20, 20, 0, 0, 0, 0, crc,
                                     len(body), len(body), len(raw), 0, 0, 0, 0,
                                     0x10 if name.endswith('/') else 0, offset) + raw
            count += 1
        count = count if claimed is None else claimed
        start = out.tell()
        out.write(directory)
        if count >= 0xFFFF:
            record = out.tell()
            out.write(struct.pack('<IQHHIIQQQQ', 0x06064B50, 44, 45, 45, 0, 0, count, count,
                                  len(directory), start))
            out.write(struct.pack('<IIQI', 0x07064B50, 0, record, 1))
            out.write(struct.pack('<IHHHHIIH', 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF,
                                  0xFFFFFFFF, 0))
        else:
            out.write(struct.pack('<IHHHHIIH', 0x06054B50, 0, 0, count, count, len(directory),
                                  start, 0))

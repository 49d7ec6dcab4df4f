"""Tar and zip archives of test files, as bytes."""
import io
import tarfile
import zipfile


def tar(files: dict, compression: str = '') -> bytes:
    """A tar of {member name: bytes} in that order ('gz': gzip-compressed); a name ending in
    '/' is a directory entry."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=f'w:{compression}') as archive:
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

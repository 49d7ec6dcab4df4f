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

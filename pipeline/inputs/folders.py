"""Folders of the input layout, real or inside archives: an archive stands for the folder of
its name without the suffix (`train.tar` for `train/`), at any level and to any depth.

A `Place` is a folder: a real one (local or gs://), or one inside an archive (its root or a
folder below it). Every file found has two names: its `path` through the archives
(`/data/train.tar/n01440764.tar/a.JPEG`, what a user reads and what image/source holds) and its
`key`, the path with each archive replaced by the folder it stands for
(`/data/train/n01440764/a.JPEG`), so the same images give the same keys, and so the same
shards, loose or archived.
"""
import array
import dataclasses
import functools
import os
import posixpath
from typing import Iterable, Iterator

from pipeline.errors import DatasetError
from pipeline.inputs import archives
from pipeline.inputs.archives import Archive, Member
from pipeline.inputs.member_table import MemberTable
from pipeline.io import fileio

# Folders directly in one folder inside an archive, at most (ImageNet has 1,000 a split): each
# is an object while its folder is listed; past it, one reported input instead.
MAX_FOLDERS = 100_000
TOO_MANY_FOLDERS_FIX = ('; none of them are read: group them into fewer folders (one per '
                        'class), or extract the archive')


@dataclasses.dataclass(frozen=True)
class Place:
    path: str                       # Through the archives, as users write it.
    key: str                        # With archives named as the folders they stand for.
    archive: Archive | None = None  # The innermost archive holding it; None: a real folder.
    prefix: str = ''                # Its folder inside that archive: '' or 'a/b/'.
    # Those below it, if its archive was indexed: a table (a gzip tar's, read in one pass: the
    # Members).
    members: MemberTable | tuple[Member, ...] | None = None

    @property
    def name(self) -> str:
        return posixpath.basename(self.key)


@dataclasses.dataclass(frozen=True)
class File:
    """A file found below a Place: a real file or an archive member (`member`)."""
    path: str
    key: str
    name: str
    size: int | None
    mtime: float | None = None
    member: Member | None = None
    error: str | None = None
    is_dir: bool = False         # A directory entry of an archive (counted as ignored).


def place_of(path: str) -> Place:
    """The Place a command-line folder names: a folder, an archive file, or a folder inside an
    archive (`/data/flowers.zip/flowers`, through archives inside it too); DatasetError when an
    archive on the way cannot be read in place."""
    path = path.rstrip('/')
    parts = path.split('/')
    for index, part in enumerate(parts):
        if archives.suffix(part):
            archive = _archive_file('/'.join(parts[:index + 1]))
            if archive is not None:
                place = Place(archive.path, _key(archive.path), archive)
                return _folder_in(place, parts[index + 1:])
    return Place(path, path)


def _folder_in(place: Place, rest: list[str]) -> Place:
    """The folder at the path `rest` inside the archive root `place`, through the archives on
    that path."""
    inner = _innermost(place, rest)
    if isinstance(inner, str):
        raise DatasetError(inner)
    place, rest = inner
    if not rest:
        return place
    return Place('/'.join([place.path, *rest]),
                 '/'.join([place.key, *map(archives.folder_name, rest)]), place.archive,
                 '/'.join(rest) + '/')


def _key(path: str) -> str:
    head, tail = posixpath.split(path) if fileio.is_gcs(path) else (fileio.dirname(path),
                                                                     fileio.basename(path))
    return f'{head}/{archives.folder_name(tail)}' if head else archives.folder_name(tail)


@functools.lru_cache(maxsize=256)
def _archive_file(path: str) -> Archive | None:
    """The archive at `path` if it is a file, else None (a folder named like an archive is a
    folder)."""
    found = [m for m in fileio.match(path) if m.path == path]
    if not found or (not fileio.is_gcs(path) and not os.path.isfile(path)):
        return None
    return Archive.of_file(path, found[0].size_in_bytes, found[0].last_updated_in_seconds)


def children(place: Place) -> tuple[list[Place], list[File]]:
    """The folders directly in `place` (real folders and archives), and every other entry."""
    if place.archive is None:
        folders, files = [], []
        for entry in fileio.list_dir(place.path):
            if entry.is_dir:
                folders.append(Place(entry.path, f'{place.key}/{entry.name}'))
            elif archives.suffix(entry.name) and entry.error is None:
                folders.append(Place(entry.path, f'{place.key}/{archives.folder_name(entry.name)}',
                                     Archive.of_file(entry.path, entry.size, entry.mtime)))
            else:
                files.append(File(entry.path, f'{place.key}/{entry.name}', entry.name,
                                  entry.size, entry.mtime, error=entry.error))
        return folders, files
    folders, files, below = [], [], {}
    listed = _listed(place)
    indexed = isinstance(listed, MemberTable)   # Else the Members of a gzip tar's pass.
    if indexed and _folder_count(listed, place.prefix) > MAX_FOLDERS:
        return [], [_too_many_folders(place)]   # Before an object is made of any entry.
    for row, entry in enumerate(listed.names() if indexed else listed):
        if len(below) > MAX_FOLDERS:   # A gzip tar's pass, read once.
            return [], [_too_many_folders(place)]
        name = entry if indexed else entry.name
        unnamed = '//' in f'/{name}'   # An error about the archive's bytes: reported here.
        if not (name.startswith(place.prefix) or unnamed):
            continue
        first, _, rest = name[len(place.prefix):].partition('/')
        if rest and not unnamed:   # Below a folder: no object made of it here.
            below.setdefault(first, array.array('q') if indexed else []).append(
                row if indexed else entry)
            continue
        member = listed.member(row) if indexed else entry
        file = _member_file(place, member)
        if member.unnamed:
            files.append(file)
        elif file.is_dir:
            files.append(file)   # Its own entry; the members below it make the folder.
            below.setdefault(first, array.array('q') if indexed else [])
        elif archives.suffix(first) and file.error is None:
            nested = member.nested()
            if isinstance(nested, str):
                files.append(dataclasses.replace(file, error=nested))
            else:
                folders.append(Place(file.path, _key(file.key), nested))
        else:
            files.append(file)
    folders += [Place(f'{place.path}/{name}', f'{place.key}/{name}', place.archive,
                      f'{place.prefix}{name}/', listed.take(found) if indexed else tuple(found))
                for name, found in below.items()]
    return folders, files


def _folder_count(table: MemberTable, prefix: str) -> int:
    """How many folders lie directly in the folder `prefix` of a table, counted up to one
    past MAX_FOLDERS."""
    seen = set()
    for name, is_dir in zip(table.names(), table.dirs()):
        if name.startswith(prefix):
            first, _, rest = name[len(prefix):].partition('/')
            if rest or is_dir:
                seen.add(first)
                if len(seen) > MAX_FOLDERS:
                    break
    return len(seen)


def _too_many_folders(place: Place) -> File:
    """The one reported input of a folder inside an archive holding more than MAX_FOLDERS
    folders."""
    return File(place.path, place.key, place.name, None,
                error=f'{place.path} holds more than {MAX_FOLDERS:,} folders, the most read '
                      f'in one folder of an archive{TOO_MANY_FOLDERS_FIX}')


def over_limit(file: File) -> bool:
    """Whether a File is that of a folder holding more folders than are read (no damage)."""
    return file.error is not None and file.error.endswith(TOO_MANY_FOLDERS_FIX)


def _listed(place: Place) -> MemberTable | Iterable[Member]:
    """The members of `place`'s archive that lie below it, or more (all its archive holds): a
    table, or the Members of a gzip tar's pass."""
    if place.members is not None:
        return place.members
    if place.archive.streamed:
        return archives.members(place.archive)
    return _table(place.archive)


def walk(place: Place) -> Iterator[tuple[str, File]]:
    """(key relative to `place`, file) of every file below `place`, archives expanded."""
    if place.archive is None:
        for relative, entry in fileio.walk_files(place.path):
            file = File(entry.path, f'{place.key}/{relative}', entry.name, entry.size,
                        entry.mtime, error=entry.error)
            if archives.suffix(entry.name) and entry.error is None:
                inner = Archive.of_file(entry.path, entry.size, entry.mtime)
                yield from _below(place, Place(entry.path, _key(file.key), inner))
            else:
                yield relative, file
        return
    for file in _archive_files(place):
        yield file.key[len(place.key) + 1:], file


def _below(outer: Place, inner: Place) -> Iterator[tuple[str, File]]:
    for _, file in walk(inner):
        yield file.key[len(outer.key) + 1:], file


def _archive_files(place: Place) -> Iterator[File]:
    """The members below `place` (inside its archive) as Files, archives among them replaced
    by their own members, to any depth."""
    for member in _listed(place):
        if not (member.name.startswith(place.prefix) or member.unnamed):
            continue
        file = _member_file(place, member)
        if archives.suffix(member.name) and member.error is None and not member.is_dir:
            nested = member.nested()
            if isinstance(nested, str):
                yield dataclasses.replace(file, error=nested)
            else:
                yield from _archive_files(Place(file.path, _key(file.key), nested))
        else:
            yield file


def _member_file(place: Place, member: Member) -> File:
    """The File of a member below `place`: its key names the archives on its way as folders."""
    relative = member.name.removeprefix(place.prefix)
    *inner, leaf = relative.split('/')
    key = '/'.join([place.key, *map(archives.folder_name, inner), leaf])
    return File(member.path, key, leaf, member.size,
                member.archive.file_mtime, member, member.error, member.is_dir)


def locate(path: str) -> File | None:
    """The archive member a path through archives names (`/data/val.tar/a.JPEG`), or None
    when no archive file is on the path. A missing member is a File with an error."""
    parts = path.split('/')
    for index, part in enumerate(parts[:-1]):
        if archives.suffix(part):
            archive = _archive_file('/'.join(parts[:index + 1]))
            if archive is not None:
                return _find(Place(archive.path, _key(archive.path), archive),
                             parts[index + 1:], path)
    return None


def _find(place: Place, rest: list[str], path: str) -> File:
    inner = _innermost(place, rest[:-1])
    if isinstance(inner, str):
        return File(path, path, rest[-1], None, error=inner)
    place, folder = inner
    if place.archive.streamed:
        return File(path, path, rest[-1], None,
                    error=f'{place.path} is gzip-compressed: its members cannot be read one by '
                          'one; give it as a folder of the layout, or use an uncompressed tar')
    name = '/'.join([*folder, rest[-1]])
    member = _table(place.archive).find(name)
    if member is None or member.is_dir:
        return File(path, path, rest[-1], None, error=f'no file {name} in {place.path}')
    return _member_file(place, member)


def _innermost(place: Place, rest: list[str]) -> tuple[Place, list[str]] | str:
    """The innermost archive on the path `rest` (folders and archives below the archive root
    `place`) as a Place, and the rest of the path inside it; or why an archive on the way
    cannot be read in place. A gzip tar ends the way: its one pass expands the archives inside
    it, so the names of its members pass through them."""
    if place.archive.streamed:
        return place, rest
    for depth in range(1, len(rest) + 1):
        found = (_table(place.archive).find('/'.join(rest[:depth]))
                 if archives.suffix(rest[depth - 1]) else None)
        if found is not None and not found.is_dir:
            nested = found.nested()
            if isinstance(nested, str):
                return nested
            inner = _member_file(place, found)
            return _innermost(Place(inner.path, _key(inner.key), nested), rest[depth:])
    return place, rest


@functools.lru_cache(maxsize=4)
def _table(archive: Archive) -> MemberTable:
    """The members of a tar or a zip, indexed once per process."""
    return archives.table(archive)

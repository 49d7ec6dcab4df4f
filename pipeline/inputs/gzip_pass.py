"""A gzip-compressed tar read in one pass, archives inside it expanded in the same pass: it has
no byte offsets to jump to, so it is listed in one pass (`stream`), and its members' bytes are
read by another pass that ends at the last member wanted: `in_order` gives them one after
another (a conversion writes them into a blob as its listing goes, transforms/grouped_reads.py,
so its chunks read them by byte range), `read_streamed` a few at once. Its members are
StreamedMembers."""
import dataclasses
import io
import tarfile
import zipfile
import zlib
from typing import Callable, Iterable, Iterator

from pipeline.base import pickling
from pipeline.inputs import tar_records, zip_records
from pipeline.inputs.archive_base import (MAX_DEPTH, READ_BLOCK, Archive, DamagedArchive,
                                          Member, Window, WindowFile, safe_name, suffix,
                                          unended, unsafe_name)
from pipeline.inputs.tar_records import EXTENDED_MAX
from pipeline.io import fileio


@pickling.values_only
@dataclasses.dataclass(frozen=True)
class StreamedMember(Member):
    """A member of a gzip tar (or of an archive inside one): `offset` is its data's place in the
    uncompressed stream, `index` its place in the pass."""

    def read(self, limit: int = fileio.DEFAULT_MAX_INPUT) -> bytes:
        """Its bytes, from a pass over its archive up to it; fileio.TooLarge, before it is
        held, if its size is over `limit`."""
        data = read_streamed([self], limit).get((self.name, self.index), gone(self))
        if isinstance(data, str):
            raise DamagedArchive(data)
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
    source = _gunzip(io.BufferedReader(WindowFile(Window(archive)), 1 << 20))
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


def in_order(wanted: list[Member], limit: int = fileio.DEFAULT_MAX_INPUT
             ) -> Iterator[bytes | None]:
    """The bytes of `wanted` (members of one gzip tar, in the order of its pass) one after
    another, None for each that cannot be read (damaged, over `limit` bytes, gone since it was
    listed): one pass over the archive, ending at the last of them; one member held at a time."""
    if not wanted:
        return
    keys = {(m.name, m.index) for m in wanted}
    passed = stream(wanted[0].archive, lambda m: (m.name, m.index) in keys, limit)
    current = next(passed, None)
    for member in wanted:
        while current is not None and current[0].index < member.index:
            current = next(passed, None)
        found = current is not None and (current[0].name, current[0].index) == (member.name,
                                                                                member.index)
        yield current[1] if found and current[0].error is None else None


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
    it is read into memory. Pax records are read by tar_records, as the tar index reads them:
    tarfile's own reading (Python before 3.11.10) searches them with regular expressions that
    take time quadratic in a run of digits (CVE-2024-6232) and expands GNU sparse maps without
    bound; a sparse member (type S) is a special file, its map not read. This class is the
    one use of tarfile's internals (`_proc_member`, `_proc_builtin`, `_block`, and the TarFile's
    `fileobj` and `offset`)."""

    damage = None   # Why the pax records before it do not parse, if they do not.

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
        if self.type in _EXTENDED and self.size > EXTENDED_MAX:
            raise tarfile.HeaderError(f'an extended header of {self.size} bytes')
        if self.type in _PAX:
            return self._described(tar)
        if self.type == tarfile.GNUTYPE_SPARSE:
            return self._proc_builtin(tar)
        return super()._proc_member(tar)

    def _described(self, tar) -> '_StrictTarInfo':
        """The member these pax records describe, given their path and size."""
        text = tar.fileobj.read(self._block(self.size))[:self.size]
        member = self.fromtarfile(tar)
        member.offset = self.offset   # Its headers start at these records.
        try:
            found = tar_records.extended(self.type, text)
        except ValueError as exc:
            member.damage = str(exc)
            return member
        member.name = found.get('path', member.name)
        if 'size' in found:
            member.size = found['size']
            skipped = member.isreg() or member.type not in tarfile.SUPPORTED_TYPES
            tar.offset = member.offset_data + (member._block(member.size) if skipped else 0)
        return member


_PAX = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
_EXTENDED = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, *_PAX)


def _stream_tar(archive: Archive, source, prefix: str, depth: int,
                pass_: _Pass) -> Iterator[tuple[Member, bytes | None]]:
    at, end, pending = 0, 0, None   # `pending`: a member being read, not yet yielded.
    where = f'{archive.path}/{prefix.rstrip("/")}' if prefix else archive.path
    try:
        with tarfile.open(fileobj=source, mode='r|', tarinfo=_StrictTarInfo) as tar:
            for info in tar:
                at, end = info.offset_data, tar.offset
                member = _entry(archive, prefix, where, info)
                if member is None or member.error is not None or member.is_dir:
                    if member is not None:
                        yield member, None
                    _skip_unread(tar, info)
                    continue
                pending = member
                for item in _stream_member(member, lambda: tar.extractfile(info), depth, pass_):
                    pending = None
                    yield item
    except _Unended:
        try:
            source.read(1)   # A cut-off gzip stream ends once, then says so when read again.
        except (EOFError, OSError, zlib.error) as exc:
            yield _stream_damage(archive, prefix, where, end, None, exc), None
        else:
            yield StreamedMember(archive, f'{prefix}/@{end}', end, 0,
                                 error=unended(where, end)), None
    except (tarfile.TarError, EOFError, OSError, ValueError, zlib.error) as exc:
        yield _stream_damage(archive, prefix, where, at, pending, exc), None


def _entry(archive: Archive, prefix: str, where: str, info: tarfile.TarInfo) -> Member | None:
    """The member a tar header (`info`) of the archive `where` describes, with an error if its
    data is not read; None for the archive's root."""
    name = safe_name(info.name)
    if name is None or not (name or info.isdir()):
        return StreamedMember(archive, f'{prefix}/@{info.offset}', info.offset, 0,
                              error=unsafe_name(info.name, info.offset, archive))
    if not name:
        return None
    member = StreamedMember(archive, prefix + name, info.offset_data, info.size,
                            is_dir=info.isdir())
    if info.damage is not None:
        return dataclasses.replace(member, error=f'damaged pax header at byte {info.offset} of '
                                                 f'{where}: {info.damage}')
    if not (member.is_dir or info.isfile()) or info.type == tarfile.GNUTYPE_SPARSE:
        return dataclasses.replace(member, error='a link or special file inside an archive is '
                                                 'not followed')
    return member


def _skip_unread(tar: tarfile.TarFile, info: tarfile.TarInfo) -> None:
    """Reads past the data of a member that is not read, to the end of the data if it is cut:
    tarfile would skip it a block at a time as far as its header says, past that end too."""
    if info.isreg() or info.type not in tarfile.SUPPORTED_TYPES:
        _skip(tar.extractfile(info))


def _stream_damage(archive: Archive, prefix: str, where: str, at: int,
                   pending: Member | None, exc: Exception) -> Member:
    """The error that ends a pass over the gzip tar `archive` or an archive inside it (`where`
    its path, `prefix` its members' names' start): on the member it was reading, else at byte
    `at` of the uncompressed data."""
    error = (f'damaged archive {where}: {exc}; the members after byte {at} of its uncompressed '
             'data cannot be read')
    return (dataclasses.replace(pending, error=error, cut=True) if pending is not None
            else StreamedMember(archive, f'{prefix}/@{at}', at, 0, error=error, cut=True))


def _stream_member(member: Member, open_member, depth: int,
                   pass_: _Pass) -> Iterator[tuple[Member, bytes | None]]:
    """(member, its bytes if kept) of a file in a streamed archive, or the members of the
    archive it is; `open_member()` gives a file object of its bytes."""
    kind = suffix(member.name)
    if kind and depth >= MAX_DEPTH:
        _skip(open_member())
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
                data = open_member()
                inner = data if kind == '.tar' else _gunzip(data)
                yield from _stream_tar(member.archive, inner, member.name + '/', depth + 1,
                                       pass_)
                _skip_rest(data)
        finally:
            pass_.within = pass_.within[:-1]
    elif pass_.wants(member):
        data = open_member().read()
        yield _of_length(member, len(data)), data if len(data) == member.size else None
    else:
        yield _of_length(member, _skip(open_member())), None


def _skip(data) -> int:
    """Reads a member's file object to its end in blocks (so damage in it is found); how many
    bytes it held."""
    length = 0
    while block := data.read(READ_BLOCK):
        length += len(block)
    return length


def _skip_rest(data) -> None:
    """Reads what follows the end of an archive inside a member to the member's end; if the
    member's data ended before the archive did, the pass over its own archive ends there too."""
    try:
        _skip(data)
    except tarfile.StreamError:   # Read again after the end of the data was found.
        raise tarfile.ReadError('unexpected end of data') from None


def _of_length(member: Member, length: int) -> Member:
    """The member, an error if its data held another `length` than its size (a zip member's
    CRC-32 matches what it holds, its size in the central directory does not)."""
    if length == member.size:
        return member
    return dataclasses.replace(member, error=f'damaged archive member: it holds {length} bytes, '
                                             f'not its size ({member.size})')


def _zip_entry_problem(info: zipfile.ZipInfo, data: bytes, end: int) -> str | None:
    """Why a member of the zip `data` cannot be read: what its central directory entry says,
    or its data running past `end` (into what follows it)."""
    local = data[info.header_offset:info.header_offset + zip_records.LOCAL_HEADER.size]
    runs_on = (len(local) < zip_records.LOCAL_HEADER.size or info.header_offset
               + zip_records.local_length(local) + info.compress_size > end)
    return zip_records.problem(info) or ('damaged zip member: it runs into the member or the '
                                         'central directory after it' if runs_on else None)


def _zip_in_stream(member: Member, data: bytes, depth: int,
                   pass_: _Pass) -> Iterator[tuple[Member, bytes | None]]:
    """A zip inside a streamed tar, from its bytes in memory (one member's worth), archives
    inside it expanded."""
    try:
        excess = zip_records.directory_excess(io.BytesIO(data))
        if excess:
            raise ValueError(f'{excess}; none of its members are read')
        with zipfile.ZipFile(io.BytesIO(data)) as inner:
            infos = inner.infolist()
            ends = zip_records.ends(infos, inner.start_dir)
            for info in infos:
                name = safe_name(info.filename)
                at = member.offset + info.header_offset
                if name is None or not (name or zip_records.is_dir(info)):
                    yield StreamedMember(
                        member.archive, f'{member.name}//@{at}', at, 0,
                        error=unsafe_name(info.filename, info.header_offset, member)), None
                    continue
                entry = StreamedMember(member.archive, f'{member.name}/{name}', at,
                                       info.file_size, is_dir=zip_records.is_dir(info))
                error = _zip_entry_problem(info, data, ends[id(info)])
                if entry.is_dir or error:
                    yield dataclasses.replace(entry, error=error), None
                    continue
                try:
                    yield from _stream_member(entry, lambda: inner.open(info), depth, pass_)
                except (zipfile.BadZipFile, OSError, zlib.error, EOFError, ValueError,
                        NotImplementedError) as exc:
                    yield dataclasses.replace(entry, error=f'damaged zip member: {exc}'), None
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError) as exc:
        yield dataclasses.replace(member, name=f'{member.name}//@0', cut=True,
                                  error=f'damaged zip {member.path}: {exc}'), None

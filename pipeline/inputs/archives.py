"""Tar and zip archives read in place: the members of an archive of any kind, indexed from its
headers and read by byte range (or, for a gzip tar, in one pass).

Each kind has its module: tar_index.py (a tar indexed by hopping from header to header),
zip_index.py (a zip indexed from its central directory) and gzip_pass.py (a gzip tar read in
one pass). archive_base.py holds what they share: Archive, Member, the window reads, member
names and the limits (Archive, Member, DamagedArchive, suffix and folder_name are also
importable from here); tar_records.py and zip_records.py what tar headers and zip records say,
read the same way by the index of a kind and by a gzip tar's pass. This module picks the reader
of an archive's kind and applies what holds for every kind: of members with the same name the
last wins.

Nothing is unpacked to disk (but a gzip tar's members, by the conversion: see gzip_pass.py) and
nothing reads more than it needs; a member is read with one ranged read (a zip member may need a
second for a long local header), so the members of one archive can be read by any number of
workers at once.
"""

from typing import Any, Callable, Iterator

from pipeline.inputs import gzip_pass, tar_index, zip_index
from pipeline.inputs.archive_base import (  # noqa: F401 (importable here, as the readers' types)
    Archive, DamagedArchive, Member, Window, earlier_copy, folder_name, suffix)
from pipeline.inputs.member_table import MemberTable
from pipeline.io import fileio


def members(archive: Archive) -> Iterator[Member]:
    """Every member of an archive, in archive order (a gzip tar's from one pass, `stream`).
    Within each archive, of members with the same name the last wins, as tar extracts them
    (`tar -r` appends a new version): each earlier one is reported as an error about its bytes,
    and an earlier copy of an archive inside a gzip tar hides what it holds."""
    return (member for member, _ in members_read(archive, lambda member: False, None))


def table(archive: Archive, keep: Callable[[Member], bool] = lambda member: False,
          parse: Callable[[Member, bytes], Any] = None) -> MemberTable:
    """The members of a tar or a zip (not gzip-compressed) as a MemberTable, with
    parse(member, its bytes) of those `keep` takes: a tar's read through the index window (a
    small member costs no read of its own), a zip's by member. A member with an error is not
    read."""
    found = MemberTable(archive)
    if archive.kind == 'zip':
        for member in zip_index.members(archive):
            found.add(member, _read_kept(member, keep, parse))
    else:
        window = Window(archive)
        for member in tar_index.members(archive, window):
            found.add(member, parse(member, window.read_at(member.offset - archive.start,
                                                           member.size))
                      if keep(member) and member.error is None else None)
    return found.done()


def members_read(archive: Archive, keep: Callable[[Member], bool],
                 parse: Callable[[Member, bytes], Any]) -> Iterator[tuple[Member, Any]]:
    """(member, parse(member, its bytes) if `keep(member)` else None) of every member that
    `members` gives, the kept ones read while the archive is indexed (`table`; a gzip tar's in
    its one pass). Only parsed values are held, never a kept member's bytes; a member with an
    error is not read."""
    if not archive.streamed:
        indexed = table(archive, keep, parse)
        for row, member in enumerate(indexed):
            yield member, indexed.values.get(row)
        return
    found = [(member, parse(member, data) if data is not None else None)
             for member, data in gzip_pass.stream(archive, keep)]
    by_index = {m.index: m for m, _ in found if m.index is not None}
    last = {(m.within, m.name): m.identity for m, _ in found if not m.unnamed and not m.is_dir}
    hidden = set()   # Pass indices of earlier copies of archives inside a gzip tar.
    for member, value in found:
        if hidden.intersection(member.within):
            continue
        if member.unnamed or member.is_dir:
            yield member, value
        elif last[member.within, member.name] != member.identity:
            yield earlier_copy(member, by_index.get(member.within[-1] if member.within
                                                    else None)), None
            hidden.add(member.index)
        elif not _holds_members(member):
            yield member, value


def _read_kept(member: Member, keep: Callable[[Member], bool],
               parse: Callable[[Member, bytes], Any]) -> Any:
    """parse(member, its bytes) if it is kept and can be read, else None."""
    if not keep(member) or member.error is not None:
        return None
    try:
        return parse(member, member.read())
    except fileio.DamagedInput:
        return None


def _holds_members(member: Member) -> bool:
    """Whether it is the entry of an archive inside a gzip tar, whose members follow it."""
    return member.archive.streamed and bool(suffix(member.name)) and member.error is None

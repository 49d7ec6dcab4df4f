"""The members of a tar or a zip held as columns, not as an object each: their names in one
block of bytes, their numbers in one numpy array (some 80 bytes and the name a member), each
Member made as it is read. An archive of ImageNet's 1.3 million members is indexed, split into
its class folders and shipped to the workers this way (a Member object each took some KB).

Of members with the same name the last wins, as tar extracts them (`tar -r` appends a new
version): each earlier one reads as an error about its bytes (archive_base.earlier_copy).
"""
import array
import zlib
from typing import Any, Iterable, Iterator

import numpy as np

from pipeline.inputs.archive_base import Archive, Member, earlier_copy
from pipeline.inputs.zip_index import ZipMember

# Columns of the numbers: where each name ends in the names, then the Member's numbers.
_NAME_END, _OFFSET, _SIZE, _FLAGS, _ERROR, _METHOD, _STORED, _CRC, _NAME_LENGTH, _END = range(10)
_COLUMNS = 10
_DIR, _CUT, _ZIP, _EARLIER = 1, 2, 4, 8   # Bits of the flags.
_CHUNK = 1 << 16                          # Rows whose names are hashed at a time.


class MemberTable:
    """Members of one archive, in archive order: built with `add` and `done`, then read by row
    (`member`), in order (iterating), or by name (`find`); `take` makes the table of some rows
    (a class folder's). `values`: row -> what was parsed of that member while it was indexed."""

    def __init__(self, archive: Archive):
        self.archive = archive
        self.values: dict[int, Any] = {}
        self._names = bytearray()
        self._growing = array.array('q')
        self._numbers = np.zeros((0, _COLUMNS), np.int64)
        self._errors: list[str] = []          # Distinct errors; a row names one by its place.
        self._error_ids: dict[str, int] = {}
        self._by_hash: tuple[np.ndarray, np.ndarray] | None = None

    def add(self, member: Member, value: Any = None) -> None:
        """Adds a Member or ZipMember (a gzip tar's are never held: it is read in one pass)."""
        if value is not None:
            self.values[len(self._growing) // _COLUMNS] = value
        self._names += _encoded(member.name)
        error = -1 if member.error is None else self._error_ids.setdefault(
            member.error, len(self._error_ids))
        if error == len(self._errors):
            self._errors.append(member.error)
        flags = _DIR * member.is_dir | _CUT * member.cut
        if isinstance(member, ZipMember):
            self._growing.extend((len(self._names), member.offset, member.size, flags | _ZIP,
                                  error, member.method, member.stored_size, member.crc,
                                  member.name_length, member.end))
        else:
            self._growing.extend((len(self._names), member.offset, member.size, flags, error,
                                  0, 0, 0, 0, 0))

    def done(self) -> 'MemberTable':
        """Ends the adding: the numbers into one array, and each member whose name comes again
        later marked as an earlier copy (its parsed value dropped)."""
        self._numbers = np.frombuffer(self._growing, np.int64).reshape(-1, _COLUMNS).copy()
        self._growing = array.array('q')
        self._names = bytes(self._names)
        for row in self._earlier_rows():   # Read as an error: what was parsed of it goes.
            self._numbers[row, _FLAGS] |= _EARLIER
            self.values.pop(row, None)
        return self

    def __len__(self) -> int:
        return len(self._numbers)

    def __iter__(self) -> Iterator[Member]:
        return map(self.member, range(len(self)))

    def names(self) -> Iterator[str]:
        """Each member's name (an earlier copy's is `/@BYTE`), in order, without making it."""
        ends = self._numbers[:, _NAME_END].tolist()
        earlier = set(np.flatnonzero(self._numbers[:, _FLAGS] & _EARLIER).tolist())
        for row, (start, end) in enumerate(zip([0, *ends[:-1]], ends)):
            yield (self.member(row).name if row in earlier
                   else self._names[start:end].decode('utf-8', 'surrogateescape'))

    def dirs(self) -> list[bool]:
        """Whether each member is a directory entry, in order."""
        return (self._numbers[:, _FLAGS] & _DIR != 0).tolist()

    def member(self, row: int) -> Member:
        (end, offset, size, flags, error, method, stored, crc, name_length,
         data_end) = self._numbers[row].tolist()
        name = self._name(row)
        error = self._errors[error] if error >= 0 else None
        if flags & _ZIP:
            found = ZipMember(self.archive, name, offset, size, bool(flags & _DIR), error,
                              cut=bool(flags & _CUT), method=method, stored_size=stored,
                              crc=crc, name_length=name_length, end=data_end)
        else:
            found = Member(self.archive, name, offset, size, bool(flags & _DIR), error,
                           cut=bool(flags & _CUT))
        return earlier_copy(found, None) if flags & _EARLIER else found

    def take(self, rows: Iterable[int]) -> 'MemberTable':
        """The table of these rows, in their order (without parsed values)."""
        rows = np.fromiter(rows, np.int64)
        taken = MemberTable(self.archive)
        taken._errors, taken._error_ids = self._errors, self._error_ids
        numbers = self._numbers[rows]
        starts = np.where(rows > 0, self._numbers[rows - 1, _NAME_END], 0)   # Never all rows.
        taken._names = b''.join(self._names[s:e] for s, e in zip(starts.tolist(),
                                                               numbers[:, _NAME_END].tolist()))
        numbers[:, _NAME_END] = np.cumsum(numbers[:, _NAME_END] - starts)
        taken._numbers = numbers
        return taken

    def find(self, name: str) -> Member | None:
        """The member named `name` (the last of that name; no unnamed error), or None."""
        if self._by_hash is None:
            hashes = self._hashes(np.arange(len(self)))
            order = np.argsort(hashes, kind='stable')
            self._by_hash = hashes[order], order
        hashes, order = self._by_hash
        wanted = _encoded(name)
        at = np.searchsorted(hashes, hash(wanted))
        found = None
        while at < len(hashes) and hashes[at] == hash(wanted):
            row = int(order[at])
            if self._names[slice(*self._span(row))] == wanted:
                found = row   # Rows of one hash are in archive order: the last wins.
            at += 1
        if found is None or self._numbers[found, _FLAGS] & _EARLIER:
            return None
        member = self.member(found)
        return None if member.unnamed else member

    def __getstate__(self) -> dict:
        """Its columns compressed (a class folder's table passes through the runner on its
        way to a worker; names and offsets compress some 5 times); not the hashes of its
        names, which differ by process."""
        return {**self.__dict__, '_by_hash': None, '_growing': None,
                '_names': zlib.compress(self._names, 1),
                '_numbers': (zlib.compress(self._numbers.tobytes(), 1), len(self._numbers))}

    def __setstate__(self, state: dict) -> None:
        numbers, rows = state['_numbers']
        self.__dict__.update(state, _growing=array.array('q'),
                             _names=zlib.decompress(state['_names']),
                             _numbers=np.frombuffer(zlib.decompress(numbers), np.int64)
                             .reshape(rows, _COLUMNS))

    def _name(self, row: int) -> str:
        return self._names[slice(*self._span(row))].decode('utf-8', 'surrogateescape')

    def _span(self, row: int) -> tuple[int, int]:
        start = int(self._numbers[row - 1, _NAME_END]) if row else 0
        return start, int(self._numbers[row, _NAME_END])

    def _hashes(self, rows: np.ndarray) -> np.ndarray:
        """The hash of each row's name (taken a chunk of rows at a time: no object per row is
        held)."""
        ends = self._numbers[:, _NAME_END]
        starts = np.concatenate(([0], ends[:-1]))
        found = np.empty(len(rows), np.int64)
        for at in range(0, len(rows), _CHUNK):
            chunk = rows[at:at + _CHUNK]
            found[at:at + len(chunk)] = [hash(self._names[s:e]) for s, e in
                                         zip(starts[chunk].tolist(), ends[chunk].tolist())]
        return found

    def _earlier_rows(self) -> list[int]:
        """The rows of named files whose name comes again later: found among those whose name
        hashes alike (a few), by their names."""
        files = np.flatnonzero(self._numbers[:, _FLAGS] & _DIR == 0)
        if not len(files):
            return []
        hashes = self._hashes(files)
        values, counts = np.unique(hashes, return_counts=True)
        alike = files[np.isin(hashes, values[counts > 1])].tolist()
        last: dict[bytes, int] = {}
        for row in alike:
            last[self._names[slice(*self._span(row))]] = row
        return [row for row in alike if last[self._names[slice(*self._span(row))]] != row
                and not self.member(row).unnamed]


def _encoded(name: str) -> bytes:
    return name.encode('utf-8', 'surrogateescape')

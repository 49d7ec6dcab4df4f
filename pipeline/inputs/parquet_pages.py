"""The pages of a parquet column chunk, from their headers, read before pyarrow reads the chunk.

pyarrow decompresses a page whole, into as many bytes as its header says, and keeps a chunk's
dictionary page while it reads the chunk: a 48 KB file can hold a page of 1 GiB of zstd-packed
zeros, and nothing in the footer bounds it (the column chunk's sizes there are claims pyarrow does
not use to allocate). So before a chunk is read, its page headers are walked, hopping from one to
the next through a window of the file (HEADER_WINDOW locally, CLOUD_WINDOW on gs://, where every
read is a request), and `check_chunk` says how many of the row group's rows lie in pages that
pyarrow can read within a bound: the pages' bytes (compressed, decompressed and the dictionary
page's) at most `limit`. Rows from the first page over it on are not read at all (pyarrow reads a
chunk's pages in order).

A page header is a Thrift struct in the compact protocol (parquet.thrift's PageHeader), read here
with its size bounded (MAX_HEADER bytes, MAX_DEPTH nested structs) and only the fields needed:
type, sizes and the number of values (a row each, for the unnested columns read here).
"""
import dataclasses
from pipeline.io import fileio

HEADER_WINDOW = 64 << 10   # Bytes read at a local header (reads there cost no request).
CLOUD_WINDOW = 8 << 20     # Bytes read at a header on gs:// (the next headers are mostly in it).
MAX_HEADER = 16 << 20      # Bytes of one page header, at most (pyarrow's own bound).
MAX_DEPTH = 16             # Structs inside structs in a page header.
_DATA, _DICTIONARY, _DATA_V2 = 0, 2, 3   # PageType.
_MIB = 1 << 20


class DamagedPages(ValueError):
    """A column chunk whose page headers do not parse or do not fit it; the message says where."""


@dataclasses.dataclass(frozen=True)
class ChunkCheck:
    """What pyarrow can read of one column chunk of a row group within a bound."""
    readable: int          # Rows from the row group's first that lie in pages within the bound.
    widest: int            # The most bytes one page (with the dictionary page) holds.
    reason: str | None     # Why the rows from `readable` on cannot be read.


class Window:
    """Bytes of a file read through a window: a read inside the last one costs nothing."""

    def __init__(self, path: str):
        self.path, self._start, self._data = path, 0, b''
        self.step = CLOUD_WINDOW if fileio.is_gcs(path) else HEADER_WINDOW

    def read_at(self, offset: int, length: int) -> bytes:
        if not (self._start <= offset and offset + length <= self._start + len(self._data)):
            self._start = offset
            self._data = fileio.read_range(self.path, offset, max(length, self.step))
        return self._data[offset - self._start:offset - self._start + length]


def check_chunk(window: Window, chunk, rows: int, first_row: int, limit: int,
                column: str) -> ChunkCheck:
    """How many of a row group's `rows` (the first is the file's row `first_row`, for messages)
    pyarrow can read of column chunk `chunk` (pyarrow's ColumnChunkMetaData of column `column`)
    holding at most `limit` bytes per page (its compressed bytes too, unless it is stored
    uncompressed); DamagedPages when its headers do not parse or run past the chunk."""
    packed = chunk.compression != 'UNCOMPRESSED'
    start = chunk.data_page_offset
    if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
        start = chunk.dictionary_page_offset
    end, position, seen, dictionary, widest = start + chunk.total_compressed_size, start, 0, 0, 0
    while position < end and seen < rows:
        kind, uncompressed, compressed, values, length = _header(window, position, end)
        if compressed < 0 or uncompressed < 0 or values < 0 or position + length + compressed > end:
            raise DamagedPages(f'the page at byte {position} of column {column} runs past its '
                               'column chunk, or has a negative size')
        held = uncompressed + dictionary + (compressed if packed else 0)
        if kind == _DICTIONARY:
            dictionary = uncompressed
        if kind in (_DICTIONARY, _DATA, _DATA_V2) and held > limit:
            what = ('the dictionary page' if kind == _DICTIONARY else
                    f'the page of rows {first_row + seen}-{first_row + seen + values - 1}')
            return ChunkCheck(seen, widest, f'{what} of column {column} takes {held / _MIB:,.0f} '
                                            'MiB to read (decompressed, with its compressed '
                                            f'bytes and dictionary), more than {limit / _MIB:,.0f} '
                                            'MiB')
        if kind in (_DATA, _DATA_V2):
            seen += values
        widest = max(widest, held)
        position += length + compressed
    return ChunkCheck(rows, widest, None)


def _header(window: Window, position: int, end: int) -> tuple[int, int, int, int, int]:
    """(type, uncompressed size, compressed size, number of values, header length) of the page
    header at `position`, read through `window` (more of it when the header is longer)."""
    available = min(end - position, MAX_HEADER)
    size = min(window.step, available)
    while True:
        data = window.read_at(position, size)
        try:
            fields, length = _Compact(data).struct(0)
            break
        except IndexError:   # Cut short: read more, up to MAX_HEADER.
            if size >= available:
                raise DamagedPages(f'the page header at byte {position} does not parse within '
                                   f'{available:,} bytes') from None
            size = min(size * 8, available)
        except ValueError as exc:
            raise DamagedPages(f'the page header at byte {position} does not parse: {exc}') from None
    counts = fields.get(5) or fields.get(8) or fields.get(7) or {}
    sizes = [fields.get(number) for number in (1, 2, 3)] + [counts.get(1) if isinstance(counts, dict) else None]
    if not all(isinstance(value, int) for value in sizes):
        raise DamagedPages(f'the page header at byte {position} lacks its type, sizes or count')
    return (*sizes, length)


class _Compact:
    """A reader of Thrift's compact protocol over `data`: a struct's integer fields and nested
    structs by field id, every other value skipped; IndexError when `data` ends first."""

    def __init__(self, data: bytes):
        self._data, self._at = data, 0

    def struct(self, depth: int) -> tuple[dict, int]:
        """The struct at the start, and where it ends."""
        return self._struct(depth), self._at

    def _struct(self, depth: int) -> dict:
        if depth > MAX_DEPTH:
            raise ValueError(f'structs nested more than {MAX_DEPTH} deep')
        fields, field = {}, 0
        while True:
            byte = self._byte()
            if byte == 0:
                return fields
            delta, kind = byte >> 4, byte & 0x0F
            field = field + delta if delta else _zigzag(self._varint())
            fields[field] = self._value(kind, depth)

    def _value(self, kind: int, depth: int):
        if kind in (1, 2):                 # True, false.
            return kind == 1
        if kind == 3:                      # A byte.
            return self._byte()
        if kind in (4, 5, 6):              # i16, i32, i64.
            return _zigzag(self._varint())
        if kind == 7:                      # A double.
            return self._skip(8)
        if kind == 8:                      # Binary or text.
            return self._skip(self._varint())
        if kind in (9, 10):                # List, set.
            header = self._byte()
            count = header >> 4 if header >> 4 != 15 else self._varint()
            for _ in range(count):
                self._value(header & 0x0F if header & 0x0F not in (1, 2) else 3, depth + 1)
            return None
        if kind == 11:                     # Map.
            count = self._varint()
            types = self._byte() if count else 0
            for _ in range(count):
                self._value(types >> 4, depth + 1)
                self._value(types & 0x0F, depth + 1)
            return None
        if kind == 12:
            return self._struct(depth + 1)
        raise ValueError(f'unknown field type {kind}')

    def _byte(self) -> int:
        byte = self._data[self._at]
        self._at += 1
        return byte

    def _skip(self, length: int) -> None:
        if self._at + length > len(self._data):
            raise IndexError
        self._at += length

    def _varint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self._byte()
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ValueError('a number of more than 64 bits')


def _zigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


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

A page header is a Thrift struct in the compact protocol (parquet.thrift's PageHeader), read
with pipeline/inputs/thrift_compact.py, its size bounded (MAX_HEADER bytes), for the fields
needed: type, sizes and the number of values (a row each, for the unnested columns read here).
"""
import dataclasses

from pipeline.inputs import thrift_compact
from pipeline.io import fileio

HEADER_WINDOW = 64 << 10   # Bytes read at a local header (reads there cost no request).
CLOUD_WINDOW = 8 << 20     # Bytes read at a header on gs:// (the next headers are mostly in it).
MAX_HEADER = 16 << 20      # Bytes of one page header, at most (pyarrow's own bound).
_DATA, _DICTIONARY, _DATA_V2 = 0, 2, 3   # PageType.
_COUNTS = {_DATA: 5, _DATA_V2: 8, _DICTIONARY: 7}   # Where each type's number of values is.
# PageHeader: type, uncompressed and compressed size; the values of a data page (v1, v2) or a
# dictionary page.
_HEADER = {1: thrift_compact.KEEP, 2: thrift_compact.KEEP, 3: thrift_compact.KEEP,
           5: {1: thrift_compact.KEEP}, 7: {1: thrift_compact.KEEP}, 8: {1: thrift_compact.KEEP}}
_MIB = 1 << 20


class DamagedPages(ValueError):
    """A column chunk whose page headers do not parse or do not fit it; the message says where."""


@dataclasses.dataclass(frozen=True)
class ChunkCheck:
    """What pyarrow can read of one column chunk of a row group within a bound."""
    readable: int          # Rows from the row group's first that lie in pages within the bound.
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


def check_chunk(window: Window, chunk, rows: int, first_row: int, limit: int) -> ChunkCheck:
    """How many of a row group's `rows` (the first is the file's row `first_row`, for messages)
    pyarrow can read of column chunk `chunk` (a parquet_footer.Chunk) holding at most `limit`
    bytes per page (its compressed bytes too, unless it is stored uncompressed); DamagedPages
    when its headers do not parse or run past the chunk."""
    column, start, end = chunk.path, chunk.start, chunk.start + chunk.compressed
    position, seen, dictionary = start, 0, 0
    while position < end and seen < rows:
        kind, uncompressed, compressed, values, length = _header(window, position, end)
        if compressed < 0 or uncompressed < 0 or values < 0 or position + length + compressed > end:
            raise DamagedPages(f'the page at byte {position} of column {column} runs past its '
                               'column chunk, or has a negative size')
        held = uncompressed + dictionary + (compressed if chunk.packed else 0)
        if kind == _DICTIONARY:
            dictionary = uncompressed
        if kind in (_DICTIONARY, _DATA, _DATA_V2) and held > limit:
            what = ('the dictionary page' if kind == _DICTIONARY else
                    f'the page of rows {first_row + seen}-{first_row + seen + values - 1}')
            return ChunkCheck(seen, f'{what} of column {column} takes {held / _MIB:,.0f} MiB to '
                                    'read (decompressed, with its compressed bytes and '
                                    f'dictionary), more than {limit / _MIB:,.0f} MiB')
        if kind in (_DATA, _DATA_V2):
            seen += values
        position += length + compressed
    return ChunkCheck(rows, None)


def _header(window: Window, position: int, end: int) -> tuple[int, int, int, int, int]:
    """(type, uncompressed size, compressed size, number of values, header length) of the page
    header at `position`, read through `window` (more of it when the header is longer)."""
    available = min(end - position, MAX_HEADER)
    size = min(window.step, available)
    while True:
        data = window.read_at(position, size)
        try:
            fields, length = thrift_compact.read_struct(data, _HEADER)
            break
        except IndexError:   # Cut short: read more, up to MAX_HEADER.
            if size >= available:
                raise DamagedPages(f'the page header at byte {position} does not parse within '
                                   f'{available:,} bytes') from None
            size = min(size * 8, available)
        except ValueError as exc:
            raise DamagedPages(f'the page header at byte {position} does not parse: {exc}') from None
    kind = fields.get(1)
    where = _COUNTS.get(kind) if type(kind) is int else None
    counts = fields.get(where, {})
    values = (counts.get(1) if isinstance(counts, dict) else None) if where else 0
    found = (kind, fields.get(2), fields.get(3), values)
    if not all(type(value) is int for value in found):
        raise DamagedPages(f'the page header at byte {position} lacks its type, sizes or count')
    return (*found, length)

"""A parquet file's footer: its row groups and where each column chunk lies, read with
pipeline/inputs/thrift_compact.py rather than through pyarrow's metadata objects, some of
which end the process when a footer is malformed (a column chunk's size statistics that do not
fit its column: `terminate called after throwing parquet::ParquetException`); pyarrow's reader,
given the same footer, raises an error instead. The footer's length is checked (MAX_FOOTER)
before it is read.
"""
import dataclasses
import io

import pyarrow.parquet as pq

from pipeline.inputs import thrift_compact

MAX_FOOTER = 64 << 20   # Bytes of a file's footer, at most (parsed, pyarrow takes ~3 times that).
_KEEP = thrift_compact.KEEP
# FileMetaData.row_groups: RowGroup.columns (ColumnChunk.meta_data: path_in_schema, codec,
# total_uncompressed_size, total_compressed_size, data_page_offset, dictionary_page_offset) and
# RowGroup.num_rows.
_COLUMN = {3: [_KEEP], 4: _KEEP, 6: _KEEP, 7: _KEEP, 9: _KEEP, 11: _KEEP}
_FOOTER = {4: [{1: [{3: _COLUMN}], 3: _KEEP}]}


class DamagedFooter(ValueError):
    """A footer that does not parse, or is no footer of a parquet file; the message says why."""


class FooterTooLarge(Exception):
    """A footer of more than MAX_FOOTER bytes; the message says what to do."""


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Where a column chunk's pages lie, and how they are stored."""
    path: str          # The column: `image.bytes`, `label`.
    start: int         # Its first page (the dictionary page, if any).
    compressed: int    # Its bytes in the file.
    uncompressed: int  # Its pages' bytes once decompressed, as the footer claims them.
    packed: bool       # Whether its pages are compressed.


@dataclasses.dataclass(frozen=True)
class Footer:
    rows: tuple[int, ...]                    # Each row group's rows.
    chunks: tuple[dict[str, Chunk], ...]     # Each row group's column chunks, by column.
    arrow: pq.FileMetaData                   # The same footer, for pyarrow's reader.


def read_footer(tail: bytes, size: int, fetch) -> Footer:
    """The footer of a parquet file of `size` bytes whose last 8 bytes are `tail`; `fetch(start,
    length)` reads its bytes. DamagedFooter for a file that is no parquet file or whose footer
    does not parse; FooterTooLarge for a footer over MAX_FOOTER."""
    length = int.from_bytes(tail[:4], 'little')
    if len(tail) != 8 or tail[4:] != b'PAR1' or length + 12 > size:
        raise DamagedFooter('it does not end as a parquet file does')
    if length > MAX_FOOTER:
        raise FooterTooLarge(f'its footer (the parquet metadata) is {length:,} bytes, more than '
                             f'the {MAX_FOOTER:,} read; write the file with fewer row groups or '
                             'columns')
    data = fetch(size - 8 - length, length)
    try:
        fields, _ = thrift_compact.read_struct(data, _FOOTER)
        groups = [(group.get(3), [_chunk(column.get(3) or {}) for column in group.get(1) or []])
                  for group in fields.get(4) or []]
    except (IndexError, KeyError, ValueError, TypeError, AttributeError) as exc:
        raise DamagedFooter(f'its footer does not parse: {exc}') from None
    if not all(isinstance(rows, int) and rows >= 0 for rows, _ in groups):
        raise DamagedFooter('a row group does not say how many rows it holds')
    arrow = pq.ParquetFile(io.BytesIO(b'PAR1' + data + tail)).metadata   # The footer alone.
    return Footer(tuple(rows for rows, _ in groups),
                  tuple({chunk.path: chunk for chunk in chunks} for _, chunks in groups), arrow)


def _chunk(meta: dict) -> Chunk:
    """A column chunk from its ColumnMetaData's fields; ValueError when one is missing or wrong."""
    path = '.'.join(part.decode() for part in meta[3])
    codec, uncompressed, compressed, data, dictionary = (meta.get(n) for n in (4, 6, 7, 9, 11))
    if not all(isinstance(n, int) and n >= 0 for n in (codec, uncompressed, compressed, data)):
        raise ValueError(f'column chunk {path} lacks its sizes or offsets')
    start = dictionary if isinstance(dictionary, int) and 0 < dictionary < data else data
    return Chunk(path, start, compressed, uncompressed, codec != 0)

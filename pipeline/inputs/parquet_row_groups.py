"""The row groups of a parquet file (pipeline/inputs/parquet_files.py), listed and read within
bounds, whatever the file claims.

A file's footer is read once per process (`footer`, a cache of the footers read last): listing
and reading a row group opens the file with it, so a file of 20,000 row groups is not parsed
20,000 times. Its row groups are cut into spans (`spans`: consecutive groups of at least
SPAN_ROWS rows, or SPAN_BYTES of images, each group whole), each one partition, listed by a
worker from its label column (and its images' paths), BATCH_ROWS rows at a time: a generator
over the span's rows, never a list of them. The images are read after the shard plan
(transforms/grouped_reads.py): a span's refs are brought together, and `RowGroupRead.images`
reads its image column one row at a time through a READ_BUFFER window (each a ranged read on
gs://), which the worker writes into one blob that each chunk reads its rows from.

Page headers are walked before pyarrow reads a column chunk (parquet_pages.py): a page of labels
or paths holds at most LISTING_PAGE_BYTES, one of images --max_input_mb (compressed bytes and
dictionary included); the rows of a larger page and the rest of its row group are reported, each
as `FILE:row N`. A row with no image bytes is read from its path under the image root
(parquet_image_paths.py), and so is each row of an image column of text
(`datasets.Value('string')`, named with --image_column).
"""
import contextlib
import dataclasses
import functools
import hashlib
import itertools
import json
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.base import pickling
from pipeline.errors import DatasetError, printable
from pipeline.inputs import label_values, parquet_footer, parquet_image_paths, parquet_pages
from pipeline.inputs.parquet_image_paths import BadPath, ImageRoot
from pipeline.inputs.kinds import Partition
from pipeline.base.refs import ExampleRef
from pipeline.io import fileio
from pipeline.io.ranged_file import RangedFile
from pipeline.base.settings import MAX_LABEL_ID

BATCH_ROWS = 16              # Labels and paths decoded at once: a row group is never held whole.
READ_BUFFER = 8 << 20        # Bytes of images pyarrow reads at a time (one ranged read on gs://).
LISTING_PAGE_BYTES = 16 << 20   # A page of labels or paths (datasets writes about 1 MiB).
SPAN_ROWS = 64               # Rows of a span: at least this many, unless its bytes are many.
SPAN_BYTES = 64 << 20        # Image bytes of a span (as the footer claims them), at least.
MAX_GROUP_ROWS = 100_000     # Rows of a row group, at most: its refs are held together.
MAX_LABEL_TEXT = 64 << 10    # Characters of a class name read from a label column, at most.
FOOTER_CACHE = 64 << 20      # Bytes of the footers a process keeps (the last one at least).
_REWRITE = 'write the file again with smaller pages (datasets writes about 1 MiB a page)'
NOT_UTF8 = object()          # A text value whose bytes are not UTF-8 (pyarrow does not check).
_NAMES: dict[str, tuple[str, ...]] = {}   # Class names by digest, read once per process.


@dataclasses.dataclass(frozen=True)
class ClassNames:
    """A ClassLabel's names in id order, as a sequence; it travels as where they are (a file and
    its label column), their count and digest, and is read there once per process: a partition
    holds no copy of a million names (100 partitions of one file took its launcher past 11 GB)."""
    file: str = dataclasses.field(compare=False)
    size: int = dataclasses.field(compare=False)
    mtime: float | None = dataclasses.field(compare=False)
    column: str = dataclasses.field(compare=False)
    count: int
    digest: str

    @classmethod
    def of(cls, names: tuple[str, ...], file: str, size: int, mtime: float | None,
           column: str) -> 'ClassNames':
        """The names `names`, read from the ClassLabel of `column` in `file`."""
        digest = hashlib.blake2b(json.dumps(names).encode(), digest_size=16).hexdigest()
        _NAMES[digest] = names
        return cls(file, size, mtime, column, len(names), digest)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> str:
        return self.names[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    @property
    def names(self) -> tuple[str, ...]:
        if self.digest not in _NAMES:
            with readable(self.file):
                schema = footer(self.file, self.size, self.mtime).arrow.schema.to_arrow_schema()
            try:
                features = label_values.hub_features(schema.metadata[b'huggingface'])
                names = label_values.class_label_names(features[self.column])
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise DatasetError(f'{self.file}: the ClassLabel of column {self.column} cannot be '
                                   f'read again ({exc}); was the file changed during the run?') from None
            if ClassNames.of(names, self.file, self.size, self.mtime, self.column) != self:
                raise DatasetError(f'{self.file}: the ClassLabel of column {self.column} changed '
                                   'during the run; convert again')
        return _NAMES[self.digest]


@dataclasses.dataclass(frozen=True)
class Columns:
    """Where a file's images and labels are."""
    image: str
    label: str
    classes: ClassNames | None   # The ClassLabel's names in id order; None: as stored.
    path: str | None = None           # The column of the images' paths (`IMAGE.path`), if any.
    struct: bool = False              # Whether images are {bytes, path} structs.
    text: bool = False                # Whether the image column holds paths alone, as text.

    @property
    def image_bytes(self) -> str | None:
        """The column of the images' bytes: `IMAGE.bytes` of a struct, IMAGE of plain bytes,
        None for a column of paths."""
        return None if self.text else f'{self.image}.bytes' if self.struct else self.image

    def label_of(self, value) -> tuple[str | int | None, str | None]:
        """(label, None) for a stored label value, or (None, why it is not one)."""
        if value is NOT_UTF8:
            return None, f'label in column {self.label} is not UTF-8 text'
        if value is None or value == '':
            return None, f'no label (column {self.label} is null)'
        if isinstance(value, bool) or not isinstance(value, (int, str)) or (
                self.classes is not None and isinstance(value, str)):
            return None, (f'label {label_values.excerpt(value)} in column {self.label} is not a '
                          'class id' + ('' if self.classes is not None else ' or a class name'))
        if self.classes is not None and not 0 <= value < len(self.classes):
            return None, (f'label {value} is not a class id: the ClassLabel of column '
                          f'{self.label} has ids 0..{len(self.classes) - 1}')
        if self.classes is not None:
            return self.classes[value], None
        if isinstance(value, int) and not 0 <= value < MAX_LABEL_ID:
            return None, (f'label {value} is not a class id: ids run 0..N-1, below '
                          f'{MAX_LABEL_ID:,}')
        if isinstance(value, str) and len(value) > MAX_LABEL_TEXT:
            return None, (f'label {label_values.excerpt(value)} in column {self.label} is longer '
                          f'than a class name may be ({MAX_LABEL_TEXT:,} characters)')
        return value, None


def opened(path: str, size: int):
    """Parquet file `path` of `size` bytes to read: on gs://, every read pyarrow makes is one
    ranged read of what it asks for."""
    return RangedFile(path, size) if fileio.is_gcs(path) else open(path, 'rb')


@contextlib.contextmanager
def readable(path: str):
    """Turns pyarrow's and the OS's errors reading parquet file `path`, and page headers that do
    not parse, into one DatasetError naming it."""
    try:
        yield
    except (pa.ArrowException, OSError, UnicodeDecodeError, parquet_pages.DamagedPages,
            parquet_footer.DamagedFooter) as exc:   # Names in a schema may not be UTF-8.
        raise DatasetError(f'{path} cannot be read as a parquet file ({printable(str(exc))[:160]}); '
                           'replace it with the file as the Hub serves it, or move it away') from None


_FOOTERS: dict[tuple, parquet_footer.Footer] = {}   # By file; the one read last comes last.


def footer(path: str, size: int, mtime: float | None) -> parquet_footer.Footer:
    """The footer of a parquet file (pipeline/inputs/parquet_footer.py), read once per process
    while it is among the files read last whose footers total FOOTER_CACHE bytes; a DatasetError
    naming the file when it does not parse or is over parquet_footer.MAX_FOOTER bytes."""
    key = path, size, mtime
    found = _FOOTERS.pop(key, None)
    if found is None:
        with readable(path):
            try:
                found = parquet_footer.read_footer(
                    fileio.read_range(path, max(0, size - 8), 8), size,
                    lambda start, length: fileio.read_range(path, start, length))
            except parquet_footer.FooterTooLarge as exc:
                raise DatasetError(f'{path}: {exc}') from None
    _FOOTERS[key] = found
    while len(_FOOTERS) > 1 and sum(f.arrow.serialized_size for f in _FOOTERS.values()) > FOOTER_CACHE:
        del _FOOTERS[next(iter(_FOOTERS))]
    return found


def spans(path: str, found: parquet_footer.Footer,
          image: str) -> Iterator[tuple[int, int, int, int]]:
    """(first group, end group, first row, image bytes per row) of each span of a file's row
    groups: consecutive groups until SPAN_ROWS rows or SPAN_BYTES image bytes (as claimed); a
    DatasetError naming the file when a group claims more than MAX_GROUP_ROWS rows (a span's
    refs are held together while its images are read)."""
    for group, rows in enumerate(found.rows):
        if rows > MAX_GROUP_ROWS:
            raise DatasetError(f'{path}: row group {group} holds {rows:,} rows, more than the '
                               f'{MAX_GROUP_ROWS:,} read together; write the file with smaller '
                               'row groups (datasets writes 100 images a group; pyarrow: '
                               'row_group_size)')
    first, first_row, rows, claimed = 0, 0, 0, 0
    for group, chunks in enumerate(found.chunks):
        rows += found.rows[group]
        claimed += sum(chunk.uncompressed for name, chunk in chunks.items()
                       if name.split('.')[0] == image)
        if rows >= SPAN_ROWS or claimed >= SPAN_BYTES or group + 1 == len(found.rows):
            yield first, group + 1, first_row, claimed // max(1, rows)
            first, first_row, rows, claimed = group + 1, first_row + rows, 0, 0


@dataclasses.dataclass(frozen=True)
class RowGroups(Partition):
    """Consecutive row groups of a parquet file, listed from their label column (and their
    images' paths): a ref per row, with the span's mean image size and a RowGroupRead for its
    images, or why it cannot be read."""
    split: str
    path: str
    name: str          # The file's path below --input_dir, which starts its examples' keys.
    size: int
    mtime: float | None
    columns: Columns
    limit: int         # --max_input_mb, in bytes.
    first_group: int
    end_group: int
    first_row: int
    row_bytes: int
    image_root: ImageRoot   # Where the images its rows name by path are read.
    sizes_known = True

    def examples(self) -> Iterator[ExampleRef]:
        read = RowGroupRead(self.path, self.size, self.mtime, self.first_group, self.end_group,
                            self.first_row, self.columns.image_bytes, self.columns.path,
                            self.limit, self.image_root)
        listed = [self.columns.label] + ([self.columns.path] if self.columns.path else [])
        files = _Opened(self.path, self.size, self.mtime)
        row = self.first_row
        for group in range(self.first_group, self.end_group):
            check = files.check(group, row, listed, LISTING_PAGE_BYTES)
            values = files.rows(group, self.columns.label, self.columns.path, check.readable,
                                BATCH_ROWS if check.reason is None else 1)
            for value, path in values:
                yield self._ref(row, value, path, read)
                row += 1
            for _ in range(check.readable, files.footer.rows[group]):
                yield self._ref(row, None, None, read, _not_read(check, row, _REWRITE))
                row += 1

    def _ref(self, row: int, value, path: 'str | BadPath | None', read: 'RowGroupRead',
             problem: str | None = None) -> ExampleRef:
        key = f'{self.name}:row {row}'
        label, problem = (None, problem) if problem else self.columns.label_of(value)
        filename = fileio.basename(path if isinstance(path, str) else key)
        return ExampleRef(self.split, key, f'{self.path}:row {row}', filename, label,
                          self.row_bytes, problem=problem, mtime=self.mtime,
                          group=None if problem else read)


def _not_read(check: parquet_pages.ChunkCheck, row: int, fix: str) -> str:
    return f'row {row} is not read: {check.reason}, and pages are read in order; {fix}'


class _Opened:
    """A parquet file's footer and a window on its bytes, to check and read its row groups."""

    def __init__(self, path: str, size: int, mtime: float | None):
        self.path, self.size = path, size
        self.footer = footer(path, size, mtime)
        self._window = parquet_pages.Window(path)

    def check(self, group: int, first_row: int, columns: list[str],
              limit: int) -> parquet_pages.ChunkCheck:
        """The rows of row group `group` (whose first is the file's row `first_row`) that
        pyarrow can read of all `columns` within `limit` bytes a page: the check that stops
        first."""
        with readable(self.path):
            chunks = sorted((self._chunk(group, name) for name in columns),
                            key=lambda chunk: chunk.start)   # In file order: one window.
            return min((parquet_pages.check_chunk(self._window, chunk, self.footer.rows[group],
                                                  first_row, limit) for chunk in chunks),
                       key=lambda check: check.readable)

    def _chunk(self, group: int, column: str) -> parquet_footer.Chunk:
        found = self.footer.chunks[group].get(column)
        if found is None:
            raise parquet_footer.DamagedFooter(f'row group {group} has no column {column}')
        return found

    def rows(self, group: int, label: str | None, path: str | None, count: int,
             batch_rows: int) -> Iterator[tuple]:
        """(label value, path: text or None) of the first `count` rows of row group `group`,
        read `batch_rows` at a time, of the columns named (a None column gives Nones)."""
        columns = [name for name in (label, path) if name]
        if count == 0 or not columns:
            return
        with readable(self.path):
            together = sum(self._chunk(group, name).compressed
                           for name in columns) <= READ_BUFFER   # At once, else each by window.
        with opened(self.path, self.size) as stream, readable(self.path):
            parquet = pq.ParquetFile(stream, metadata=self.footer.arrow, pre_buffer=together,
                                     buffer_size=0 if together else READ_BUFFER)
            for batch in parquet.iter_batches(batch_rows, row_groups=[group], columns=columns,
                                              use_threads=False):
                if batch.num_rows == 0:
                    break
                batch = batch.slice(0, count)
                nones = [None] * batch.num_rows
                yield from zip(_values(_field(batch, label)) if label else nones,
                               parquet_image_paths.paths(_field(batch, path)) if path else nones)
                count -= batch.num_rows
                if count == 0:
                    return
            raise _fewer(group, columns)

    def images(self, group: int, column: str, count: int) -> Iterator[memoryview | None]:
        """The image bytes of the first `count` rows of row group `group`, one at a time, each
        a view of pyarrow's buffer, valid until the next (None: a null)."""
        if count == 0:
            return
        with opened(self.path, self.size) as stream, readable(self.path):
            parquet = pq.ParquetFile(stream, metadata=self.footer.arrow, pre_buffer=False,
                                     buffer_size=READ_BUFFER)
            for batch in parquet.iter_batches(1, row_groups=[group], columns=[column],
                                              use_threads=False):
                if batch.num_rows != 1:
                    break
                yield _view(_field(batch, column))
                count -= 1
                if count == 0:
                    return
            raise _fewer(group, [column])


def _fewer(group: int, columns: list[str]) -> parquet_pages.DamagedPages:
    return parquet_pages.DamagedPages(f'row group {group} holds fewer rows of {", ".join(columns)} '
                                      'than its footer says')


def _field(batch: pa.RecordBatch, column: str) -> pa.Array:
    """Column `column` of `batch`, a struct's field (`image.path`) with the struct's nulls."""
    top, _, field = column.partition('.')
    values = batch.column(top)
    return values.flatten()[values.type.get_field_index(field)] if field else values


def _view(values: pa.Array) -> memoryview | None:
    """The one value of binary array `values` as a view of its buffer (a scalar would be a
    copy), None for a null."""
    if values.null_count:
        return None
    offsets = np.frombuffer(values.buffers()[1], np.int64 if pa.types.is_large_binary(
        values.type) else np.int32)
    return memoryview(values.buffers()[2])[offsets[values.offset]:offsets[values.offset + 1]]


def _values(values: pa.Array) -> list:
    """A column's values, text decoded here (NOT_UTF8 for text that is not UTF-8)."""
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return _texts(values.cast(pa.large_binary()))
    return values.to_pylist()


def _texts(raw: pa.Array) -> list:
    texts = []
    for data in raw.to_pylist():
        try:
            texts.append(None if data is None else data.decode('utf-8'))
        except UnicodeDecodeError:
            texts.append(NOT_UTF8)
    return texts


@pickling.values_only
@dataclasses.dataclass(frozen=True)
class RowGroupRead:
    """How the images of a span's refs are read: in one pass over its image column, a row at a
    time, up to the last row wanted (transforms/grouped_reads.py brings the refs together)."""
    path: str
    size: int
    mtime: float | None
    first_group: int
    end_group: int
    first_row: int
    column: str | None  # `image.bytes` of a struct column, the column of plain bytes, or None
    path_column: str | None   # for a column of paths (this one).
    limit: int          # --max_input_mb, in bytes: a page's, and an image read from its path.
    image_root: ImageRoot

    @property
    def key(self) -> str:
        return f'{self.path}#{self.first_group}'

    def read(self, refs: list[ExampleRef]) -> Iterator[ExampleRef]:
        """Each of `refs` (rows of this span), in row order, with its image bytes or why it
        has none."""
        refs = self.in_order(refs)
        for ref, data in zip(refs, self.images(refs)):
            yield (self.without_bytes(ref) if data is None else
                   dataclasses.replace(ref, group=None, data=bytes(data), size=len(data)))

    def images(self, refs: list[ExampleRef]) -> Iterator[memoryview | bytes | None]:
        """The image (None: the row has none) of each of `refs`, rows of this span in row order
        (`in_order`), one at a time: its bytes, or the file its path names."""
        wanted = [_row(ref) for ref in refs]
        files, at, first = self._opened, 0, self.first_row
        for group in range(self.first_group, self.end_group):
            rows = files.footer.rows[group]
            mine = [row - first for row in wanted[at:at + rows] if row < first + rows]
            if mine:
                readable, chosen = self._checks[group].readable, set(mine)
                paths = _Paths(files, group, self.path_column)
                count = min(readable, mine[-1] + 1)
                found = (files.images(group, self.column, count) if self.column
                         else itertools.repeat(None, count))   # A column of paths alone.
                for offset, data in enumerate(found):
                    if offset in chosen:
                        path = paths.at(offset) if data is None else None
                        yield self._image_paths.read(path) if isinstance(path, str) else data
                yield from [None] * sum(1 for offset in mine if offset >= readable)
            at, first = at + len(mine), first + rows

    @staticmethod
    def in_order(refs: list[ExampleRef]) -> list[ExampleRef]:
        """Refs of rows of this span in the order they are read: by row."""
        return sorted(refs, key=_row)

    def without_bytes(self, ref: ExampleRef) -> ExampleRef:
        """`ref`, a row with no image to read, as the input error it is."""
        return dataclasses.replace(ref, group=None, problem=self._why_not(_row(ref)))

    @functools.cached_property
    def _opened(self) -> _Opened:
        return _Opened(self.path, self.size, self.mtime)

    @functools.cached_property
    def _checks(self) -> dict[int, parquet_pages.ChunkCheck]:
        """Each row group's check of its image (and path) column's pages."""
        columns = [name for name in (self.column, self.path_column) if name]
        checks, first = {}, self.first_row
        for group in range(self.first_group, self.end_group):
            checks[group] = self._opened.check(group, first, columns, self.limit)
            first += self._opened.footer.rows[group]
        return checks

    @functools.cached_property
    def _image_paths(self) -> parquet_image_paths.ImagePaths:
        return parquet_image_paths.ImagePaths(self.column, self.path_column, self.limit,
                                              self.image_root)

    def _why_not(self, row: int) -> str:
        """Why row `row` has no image: its page, its path, or a null image without a path."""
        first = self.first_row
        for group in range(self.first_group, self.end_group):
            rows = self._opened.footer.rows[group]
            if row < first + rows:
                break
            first += rows
        check = self._checks[group]
        if row - first >= check.readable:
            return _not_read(check, row, f'{_REWRITE}, or raise --max_input_mb')
        return self._image_paths.why_not(self._path(group, row - first))

    def _path(self, group: int, offset: int) -> 'str | BadPath | None':
        """The path of a row, read on from the row asked before where it can be (rows without
        an image are asked in order: a read from the group's first row each was quadratic)."""
        paths = self._paths_read.get(group)
        if paths is None or paths.asked > offset:
            paths = self._paths_read[group] = _Paths(self._opened, group, self.path_column)
        return paths.at(offset)

    @functools.cached_property
    def _paths_read(self) -> dict[int, '_Paths']:
        return {}


class _Paths:
    """The images' paths of a row group, read a row at a time as far as asked (not at all
    unless asked; never into a page past the rows asked for)."""

    def __init__(self, files: _Opened, group: int, column: str | None):
        self._rows = files.rows(group, None, column, files.footer.rows[group],
                                1) if column else iter(())
        self._next, self._path = 0, None

    @property
    def asked(self) -> int:
        """The rows read so far."""
        return self._next

    def at(self, offset: int) -> 'str | BadPath | None':
        """The path of the row `offset` rows into the group (at or after the last asked)."""
        for _, self._path in itertools.islice(self._rows, offset + 1 - self._next):
            self._next += 1
        return self._path if self._next == offset + 1 else None


def _row(ref: ExampleRef) -> int:
    return int(ref.key.rpartition(':row ')[2])

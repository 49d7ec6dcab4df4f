"""CSV files, `--csv_<split> FILE` of `uri,label` lines: their InputKind and partitions. Each
data row becomes one ref (converted or reported); a CSV is cut into byte ranges listed by
workers of their own.
"""
import csv
import dataclasses
import io
from typing import Callable, Iterator

from pipeline.errors import DatasetError
from pipeline.inputs import label_values
from pipeline.inputs.kinds import InputKind, Partition, Source, check_regular, path_ref
from pipeline.base.refs import ExampleRef
from pipeline.io import fileio
from pipeline.output import records
from pipeline.base.splits import SPLITS
from pipeline.base.settings import LabelSettings

CSV_CHUNK_BYTES = 8 << 20
MAX_CHUNK_BYTES = 64 << 20   # Of a chunk read whole: a longer one is a record that long.
MAX_SIZE_DIGITS = 18         # Of a `size` field: more is no size of a file.
_HEADER_URIS = {'uri', 'path', 'image', 'image_path', 'file', 'filename', 'url'}


@dataclasses.dataclass(frozen=True)
class CsvFile(Partition):
    """A `uri,label` CSV, read as the csv module reads it (UTF-8 with or without a byte-order
    mark, quoted fields, any line ending). A header line may name further columns: `size`
    (bytes of the image) and any other name, which becomes a text feature of every record.

    One worker scans the file once for record boundaries (a newline outside quotes: in CSV a
    position is inside quotes exactly when an odd number of quote characters precede it) and
    cuts it into chunks of about CSV_CHUNK_BYTES, each then parsed by its own worker.
    """
    split: str
    path: str

    def split_further(self) -> list[Partition]:
        with fileio.open_read(self.path) as stream:
            cuts = _record_boundaries(stream, CSV_CHUNK_BYTES)
        columns = _header(self.path)
        return [CsvChunk(self.split, self.path, start, end, line, columns)
                for (start, line), (end, _) in zip(cuts, cuts[1:])]


def _record_boundaries(stream, every: int) -> list[tuple[int, int]]:
    """(byte offset, line number) of record starts about `every` bytes apart, then of the end."""
    cuts, offset, lines, inside, target = [(0, 1)], 0, 1, False, every
    while block := stream.read(1 << 20):
        position = 0  # `inside` is the quote state at this position of the block.
        while (search := max(target - offset, position)) < len(block):
            inside ^= block.count(b'"', position, search) % 2 == 1
            newline = block.find(b'\n', search)
            if newline < 0:
                position = search
                break
            inside ^= block.count(b'"', search, newline) % 2 == 1
            position = newline + 1
            if inside:  # A newline inside a quoted field: look on.
                target = offset + position
                continue
            cuts.append((offset + position, lines + block.count(b'\n', 0, position)))
            target = offset + position + every
        inside ^= block.count(b'"', position) % 2 == 1
        lines += block.count(b'\n')
        offset += len(block)
    if cuts[-1][0] != offset:
        cuts.append((offset, lines))
    return cuts


def _header(path: str) -> tuple[str, ...] | None:
    """The column names if the CSV starts with a header line (`uri,label[,...]`), else None."""
    with fileio.open_read(path) as stream:
        head = stream.read(1 << 16).decode('utf-8-sig', 'replace')
    row = next(csv.reader(io.StringIO(head, newline='')), [])
    names = tuple(name.strip() for name in row)
    if len(names) < 2 or names[0].lower() not in _HEADER_URIS or names[1].lower() != 'label':
        return None
    seen = set(names[:2])
    for name in names[2:]:
        if not name or name in records.IMAGE_FEATURES or name in seen:
            raise DatasetError(f'{path} line 1: column {name!r} cannot be a feature name; name '
                               'each further column once, not after a record key')
        seen.add(name)
    return names


@dataclasses.dataclass(frozen=True)
class CsvChunk(Partition):
    """The records of a CSV that start in bytes [start, end) (both record boundaries)."""
    split: str
    path: str
    start: int
    end: int
    first_line: int = 1
    columns: tuple[str, ...] | None = None
    listed_together = True

    def examples(self) -> Iterator[ExampleRef]:
        """Its records' refs. A chunk over MAX_CHUNK_BYTES holds a record that long (no line
        break outside quotes follows its first CSV_CHUNK_BYTES): only those are read, and the
        record they end in (the last, or the first that does not parse) is reported."""
        cut = self.end - self.start > MAX_CHUNK_BYTES
        with fileio.open_read(self.path) as stream:
            stream.seek(self.start)
            data = stream.read(CSV_CHUNK_BYTES if cut else self.end - self.start)
        text = data.decode('utf-8-sig' if self.start == 0 else 'utf-8', 'replace')
        held = None   # When cut: the last record read, held back.
        for line, ref, parsed in self._records(text):
            if not cut:
                yield ref
                continue
            if held is not None:
                yield held
            held = ref
            if not parsed:
                break
        if held is not None:
            yield self._problem(line, f'this record runs past {MAX_CHUNK_BYTES >> 20} MiB (more '
                                'than is read at once) with no line break outside quotes: a '
                                'quote that is never closed? Close it')

    def _records(self, text: str) -> Iterator[tuple[int, ExampleRef, bool]]:
        """(line, ref, whether it parsed) of each record of `text`, the chunk's text."""
        reader = csv.reader(io.StringIO(text, newline=''))
        base = fileio.dirname(self.path)
        while True:
            line = self.first_line + reader.line_num
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                yield line, self._problem(line, f'cannot parse: {exc}'), False
                continue
            if not row or (self.columns and self.start == 0 and reader.line_num == 1):
                continue  # A blank line, or the header.
            yield line, self._parse(row, line, base), True

    def _problem(self, line: int, reason: str) -> ExampleRef:
        return ExampleRef(self.split, f'{self.path}:{line}', '', '', None,
                          problem=f'{self.path} line {line}: {reason}')

    def _parse(self, row: list[str], line: int, base: str) -> ExampleRef:
        names = self.columns or ('uri', 'label')
        if len(row) != len(names):
            hint = ('' if len(row) < len(names) else '; name further columns in the header line '
                    'to make them features' if self.columns else '; a header line '
                    '(uri,label,NAME...) makes further columns features')
            return self._problem(line, f'{len(row)} fields, expected {len(names)} '
                                 f'({",".join(names)}){hint}')
        uri, label = row[0].strip(), row[1].strip()
        if not uri:
            return self._problem(line, 'no uri')
        if not (fileio.is_gcs(uri) or uri.startswith('/')):
            uri = fileio.join(base, uri)
        if not label:
            return ExampleRef(self.split, uri, '', fileio.basename(uri), None,
                              problem=f'{self.path} line {line}: no label')
        size, extras = None, []
        for name, value in zip(names[2:], row[2:]):
            if name == 'size':
                digits = value.strip()
                if not (digits.isascii() and digits.isdigit() and len(digits) <= MAX_SIZE_DIGITS):
                    return self._problem(line, f'size {label_values.excerpt(value)} is not a '
                                               'whole number of bytes')
                size = int(digits)
            else:
                extras.append((name, value))
        return path_ref(self.split, uri, label, size, tuple(sorted(extras)))


def _csv_source(csvs: dict, labels: LabelSettings) -> Source:
    partitions = []
    for split, path in csvs.items():
        check_regular(path, f'--csv_{split}')
        if not fileio.exists(path):
            raise DatasetError(f'--csv_{split} {path} does not exist; give the path of a CSV '
                               'file with uri,label lines')
        partitions.append(CsvFile(split, path))
    return Source(partitions, tuple(s for s in SPLITS if s in csvs), labels,
                  identity=f'csv {sorted(csvs.items())}')


class CsvKind(InputKind):
    """`--csv_<split>`: a CSV file per split (local or gs://)."""

    usage = '--csv_<split>'
    given_as = '--csv_*'
    combines = True

    def add_flags(self, flag: Callable[..., None]) -> None:
        for split in SPLITS:
            flag(f'csv_{split}', metavar='CSV', help=f'CSV of uri,label lines for the {split} split '
                 '(header line allowed; relative uris are relative to the CSV).')

    def given(self, opts, config) -> bool:
        return bool(_csvs(opts))

    def paths(self, opts) -> list[str]:
        return [getattr(opts, f'csv_{split}') for split in SPLITS]

    def split_flag(self, split: str) -> str:
        return f'--csv_{split}'

    def source(self, opts, labels: LabelSettings, config, alone: bool) -> Source:
        return _csv_source(_csvs(opts), labels)


def _csvs(opts) -> dict:
    return {split: getattr(opts, f'csv_{split}') for split in SPLITS if getattr(opts, f'csv_{split}')}


CSV = CsvKind()

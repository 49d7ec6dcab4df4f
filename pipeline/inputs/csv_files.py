"""CSV files, `--csv_<split> FILE` of `uri,label` lines: their InputKind and partitions. Each
data row becomes one ref (converted or reported); a CSV is cut into byte ranges listed by
workers of their own.
"""
import csv
import dataclasses
import io
import re
from typing import Callable, Iterator

from pipeline.errors import DatasetError, printable
from pipeline.inputs import label_values
from pipeline.inputs.kinds import (
    InputKind, Partition, Source, check_regular, path_ref, real_location)
from pipeline.base.refs import ExampleRef
from pipeline.io import fileio
from pipeline.output import records
from pipeline.base.splits import SPLITS
from pipeline.base.settings import LabelSettings

CSV_CHUNK_BYTES = 8 << 20
MAX_RECORD_BYTES = 8 << 20   # Of a record: a longer one is reported without being read (its
# fields, read whole, take the csv module 4 bytes a character and Python 1 to 4 more).
MAX_SIZE_DIGITS = 18         # Of a `size` field: more is no size of a file.
FIELD_LIMIT = 131_072        # Characters of a field, at most (the csv module's default bound).
_HEADER_URIS = {'uri', 'path', 'image', 'image_path', 'file', 'filename', 'url'}
_BLOCK = 1 << 20             # Bytes the boundary scan reads at a time.
_BOM = b'\xef\xbb\xbf'
_LINE_END_OR_OPENING = re.compile(rb'[\r\n]|,"')   # A quote after a comma opens a quoted field.
_NOT_QUOTE = re.compile(rb'[^"]')
_NOT_UTF8 = re.compile('[\udc80-\udcff]')   # A byte that is not UTF-8, as surrogateescape keeps it.


@dataclasses.dataclass(frozen=True)
class CsvFile(Partition):
    """A `uri,label` CSV, read as the csv module reads it (UTF-8 with or without a byte-order
    mark, quoted fields, any line ending). A header line may name further columns: `size`
    (bytes of the image) and any other name, which becomes a text feature of every record.

    One worker scans the file once for record boundaries (`_record_boundaries`: a line end
    outside quotes, as the csv module's own reading decides what is inside quotes) and cuts it
    into chunks of about CSV_CHUNK_BYTES, each then parsed by its own worker; a record of more
    than MAX_RECORD_BYTES is a chunk of its own, reported without being read.
    """
    split: str
    path: str

    def split_further(self) -> list[Partition]:
        with fileio.open_read(self.path) as stream:
            cuts = _record_boundaries(stream, CSV_CHUNK_BYTES)
        columns = _header(self.path)
        return [CsvChunk(self.split, self.path, start, end, line, columns, runaway)
                for (start, line, runaway), (end, _, _) in zip(cuts, cuts[1:])]


def _record_boundaries(stream, every: int) -> list[tuple[int, int, bool]]:
    """(byte offset, line number, whether it starts a record of more than MAX_RECORD_BYTES) of
    record starts about `every` bytes apart, then (the end, its line, False).

    A record ends at a line end (CR, LF or CRLF) outside quotes, and a quote opens a quoted
    field only at a field's start (a record's first byte, or after a comma): elsewhere it is a
    character of the field, as the csv module reads `12" vinyl`. In a quoted field two quotes
    are one, and one ends it (what follows up to the next comma belongs to the field). Runs of
    records that hold no other quotes are matched in C (_REGULAR); any other record is read a
    step per quote run. The file is read a block at a time."""
    scan = _Scan(every)
    buf, base, p, state = b'', 0, 0, _RECORD
    while True:
        block = stream.read(_BLOCK)
        eof = not block
        buf, base, p = buf[p:] + block, base + p, 0
        if base == 0 and buf.startswith(_BOM):
            p = len(_BOM)
        safe = len(buf) if eof else len(buf) - 2   # Two bytes are kept to look ahead.
        while p < safe:
            if state == _RECORD:   # At a record's start.
                regular = _REGULAR.match(buf, p, max(p, min(safe, scan.target - base)))
                if regular and regular.end() > p:
                    p = regular.end()
                    if buf[p - 1:p + 1] == b'\r\n':   # Cut short before its LF by the bound.
                        p += 1
                    scan.record_end(buf, base, base + p)
                elif buf[p] == ord('"'):
                    state, p = _QUOTED, p + 1
                else:
                    state = _UNQUOTED
            elif state == _UNQUOTED:
                event = _LINE_END_OR_OPENING.search(buf, p, safe + 1)
                if event is None or event.start() >= safe:
                    p = safe
                elif event.group() == b',"':
                    state, p = _QUOTED, event.end()
                else:
                    stop = event.start()
                    p = stop + (2 if buf[stop:stop + 2] == b'\r\n' else 1)
                    state = _RECORD
                    scan.record_end(buf, base, base + p)
            else:
                quote = buf.find(b'"', p, safe)
                if quote < 0:
                    p = safe
                    continue
                run = _NOT_QUOTE.search(buf, quote)
                end = run.start() if run else len(buf)
                if end == len(buf) and not eof:   # The run may go on: keep its pairs read.
                    p = quote + (end - quote) // 2 * 2
                    break
                p = end   # Pairs are quotes in the field; one more ends it.
                state = _QUOTED if (end - quote) % 2 == 0 else _UNQUOTED
        scan.settle(buf, base, base + p)
        if eof:
            scan.finish(base + len(buf))
            return scan.cuts


_RECORD, _UNQUOTED, _QUOTED = range(3)
# Records whose quotes all enclose whole fields ("a,b", not a"b or "a""b"), each ended by a
# line end. A field's two forms start differently, so a record that does not match costs a
# step back per byte at most. (Not possessive: Python 3.11.2's possessive quantifiers matched
# `c,12"` here.)
_REGULAR = re.compile(rb'(?:(?:"[^"]*"|[^",\r\n]*)(?:,(?:"[^"]*"|[^",\r\n]*))*(?:\r\n?|\n))+')


class _Scan:
    """What `_record_boundaries` knows as it goes: the cuts so far, where the next one is due,
    where the record being read started, and the line ends before a position."""

    def __init__(self, every: int):
        self.every = every
        self.cuts: list[tuple[int, int, bool]] = [(0, 1, False)]
        self.target = every           # The next cut: at the first record end from here.
        self.record, self.record_line = 0, 1   # Where the record being read starts.
        self.runaway = False          # Whether that record is cut out as over MAX_RECORD_BYTES.
        self.counted, self.lines = 0, 0        # Line ends before byte `counted`.

    def count_lines(self, buf: bytes, base: int, upto: int) -> None:
        """Counts the line ends up to byte `upto` (a CR LF once, at its LF)."""
        if upto > self.counted:
            start, end = self.counted - base, upto - base
            self.lines += (buf.count(b'\n', start, end) + buf.count(b'\r', start, end)
                           - buf.count(b'\r\n', start, end + 1))
            self.counted = upto

    def record_end(self, buf: bytes, base: int, offset: int) -> None:
        """A record ends at `offset`: a cut if one is due, and the next record starts."""
        if offset >= self.target and offset > self.cuts[-1][0]:
            self.count_lines(buf, base, offset)
            self.cuts.append((offset, self.lines + 1, False))
            self.target = offset + self.every
        self.record, self.runaway = offset, False

    def settle(self, buf: bytes, base: int, upto: int) -> None:
        """At the end of a block read up to `upto`: the line ends counted (the record's line
        first, while its block is held), and a record of more than MAX_RECORD_BYTES made a chunk
        of its own (cut at its start, and at its end, the next record end)."""
        if self.record >= self.counted:
            self.count_lines(buf, base, self.record)
            self.record_line = self.lines + 1
        self.count_lines(buf, base, upto)
        if self.runaway or upto - self.record <= MAX_RECORD_BYTES:
            return
        self.runaway = True
        if self.cuts[-1][0] == self.record:
            self.cuts[-1] = (self.record, self.record_line, True)
        else:
            self.cuts.append((self.record, self.record_line, True))
        self.target = self.record + 1

    def finish(self, size: int) -> None:
        if self.cuts[-1][0] != size:
            self.cuts.append((size, self.lines + 1, False))


def _header(path: str) -> tuple[str, ...] | None:
    """The column names if the CSV starts with a header line (`uri,label[,...]`), else None."""
    with fileio.open_read(path) as stream:
        head = stream.read(1 << 16).decode('utf-8-sig', 'surrogateescape')
    row = next(csv.reader(io.StringIO(head, newline='')), [])
    names = tuple(name.strip() for name in row)
    if len(names) < 2 or names[0].lower() not in _HEADER_URIS or names[1].lower() != 'label':
        return None
    seen = set(names[:2])
    for name in names[2:]:
        if _NOT_UTF8.search(name):
            raise DatasetError(f'{path} line 1: column name {_escaped(name)} is not UTF-8 text '
                               '(shown with its stray bytes escaped); save the CSV as UTF-8 '
                               '(e.g. iconv -f latin1 -t utf-8)')
        if not name or name in records.IMAGE_FEATURES or name in seen:
            raise DatasetError(f'{path} line 1: column {name!r} cannot be a feature name; name '
                               'each further column once, not after a record key')
        seen.add(name)
    return names


def _escaped(text: str) -> str:
    """Text read with surrogateescape, as a message shows it: each byte that is not UTF-8 as
    \\xNN, cut to label_values.SHOWN characters."""
    shown = printable(text.encode('utf-8', 'surrogateescape').decode('utf-8', 'backslashreplace'))
    return label_values.excerpt(shown)


@dataclasses.dataclass(frozen=True)
class CsvChunk(Partition):
    """The records of a CSV that start in bytes [start, end) (both record boundaries); a
    `runaway` chunk is one record of more than MAX_RECORD_BYTES."""
    split: str
    path: str
    start: int
    end: int
    first_line: int = 1
    columns: tuple[str, ...] | None = None
    runaway: bool = False
    listed_together = True

    def examples(self) -> Iterator[ExampleRef]:
        """Its records' refs: each row, a reported problem or a path with a label. A runaway
        chunk is reported as one record without being read."""
        if self.runaway:
            yield self._problem(self.first_line, f'this record runs past {MAX_RECORD_BYTES >> 20} '
                                'MiB (more than is read at once) with no line break outside '
                                'quotes: a quote that is never closed? Close it')
            return
        with fileio.open_read(self.path) as stream:
            stream.seek(self.start)
            data = stream.read(self.end - self.start)
        # surrogateescape keeps a byte that is not UTF-8 as itself: its row is reported, never
        # read as U+FFFD (two names in Latin-1 would become one class).
        yield from self._records(data.decode('utf-8-sig' if self.start == 0 else 'utf-8',
                                             'surrogateescape'))

    def _records(self, text: str) -> Iterator[ExampleRef]:
        """A ref for each record of `text`, the chunk's text."""
        _lift_field_limit()
        reader = csv.reader(io.StringIO(text, newline=''))
        base = fileio.dirname(self.path)
        header = self.columns is not None and self.start == 0   # The first record, if any.
        while True:
            line = self.first_line + reader.line_num
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                yield self._problem(line, f'cannot parse: {exc}')
                continue
            if header or not row:
                header = False
                continue  # The header (a quoted line break may make it two lines), or a blank line.
            yield self._checked(row, line) or self._parse(row, line, base)

    def _checked(self, row: list[str], line: int) -> ExampleRef | None:
        """A problem for a row holding a field that is not UTF-8 or is over FIELD_LIMIT."""
        for field in row:
            if len(field) > FIELD_LIMIT:
                return self._problem(line, f'cannot parse: a field of {len(field):,} characters, '
                                     f'more than the {FIELD_LIMIT:,} a field may hold')
            if _NOT_UTF8.search(field):
                return self._problem(line, f'{_escaped(field)} is not UTF-8 text (shown with its '
                                     'stray bytes escaped); save the CSV as UTF-8 (e.g. iconv -f '
                                     'latin1 -t utf-8)')
        return None

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


def _lift_field_limit() -> None:
    """Lets the csv module read a field as long as a chunk: its own bound (FIELD_LIMIT) drops the
    rest of the line at a longer field and reads on from the next line, inside what the boundary
    scan reads as one quoted field, so chunks would not cut the file where its records end. A
    longer field is reported by `_checked` instead."""
    if csv.field_size_limit() < 1 << 30:
        csv.field_size_limit(1 << 30)


def _csv_source(csvs: dict, labels: LabelSettings) -> Source:
    """The CSVs' partitions, each CSV by its real location (kinds.real_location), which keeps
    its name in its folder: its relative uris name the files they named."""
    partitions, real = [], {}
    for split, path in csvs.items():
        check_regular(path, f'--csv_{split}')
        if not fileio.exists(path):
            raise DatasetError(f'--csv_{split} {path} does not exist; give the path of a CSV '
                               'file with uri,label lines')
        real[split] = real_location(path)
        partitions.append(CsvFile(split, real[split]))
    return Source(partitions, tuple(s for s in SPLITS if s in csvs), labels,
                  identity=f'csv {sorted(real.items())}')


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

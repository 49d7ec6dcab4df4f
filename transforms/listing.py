"""Partitions of the input and how each turns into ExampleRefs, on the workers.

A source is described by a few partitions made on the launcher without listing anything big:
a folder split splits further into one partition per class folder or class archive, a CSV into
byte ranges, a user config into the partitions it offers. Each partition is listed on a worker.
Archives are folders (pipeline/inputs/folders.py): their members are listed like files.

Every input is accounted for: each file below a split folder, each data row of a CSV and each
dict a generator yields becomes one ref, which is either converted, reported as an error, or
(hidden files and folders; in archives also directory entries and `__MACOSX/`) counted as
ignored.
"""
import csv
import dataclasses
import hashlib
import io
from typing import Any, Iterator

import apache_beam as beam
import cloudpickle

from pipeline.inputs import archives, folders
from pipeline.io import fileio
from pipeline.output import records
from pipeline.errors import DatasetError
from pipeline.inputs.refs import ExampleRef

CSV_CHUNK_BYTES = 8 << 20
_HEADER_URIS = {'uri', 'path', 'image', 'image_path', 'file', 'filename', 'url'}


class Partition:
    """A piece of input that one worker lists."""

    sizes_known = False   # Whether listing gives every input's size (else it is measured).

    def split_further(self) -> list['Partition']:
        return [self]

    def examples(self) -> Iterator[ExampleRef]:
        raise NotImplementedError


SIZE_SAMPLE = 64   # With measure_sizes, one in this many inputs of unknown size is measured.


class ListExamples(beam.PTransform):
    """Partitions -> every ExampleRef the input holds (ignored ones included), listed on the
    workers. With `measure_sizes`, a deterministic sample (by key hash, one in SIZE_SAMPLE) of
    the inputs whose size the listing did not give is measured, to estimate a split's bytes
    without a metadata request per input."""

    def __init__(self, partitions: list[Partition], measure_sizes: bool):
        super().__init__()
        self._partitions, self._measure_sizes = partitions, measure_sizes

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        refs = (pbegin
                | 'Create Partitions' >> beam.Create(self._partitions)
                | 'Split Partitions' >> beam.FlatMap(_split_further)
                | 'Spread Partitions' >> beam.Reshuffle()
                | 'List Partitions' >> beam.FlatMap(_examples))
        if not self._measure_sizes:
            return refs
        return (refs
                | 'Spread Examples' >> beam.Reshuffle()
                | 'Measure Sizes' >> beam.Map(_measure_size))


def _split_further(partition: Partition) -> list[Partition]:
    return partition.split_further()


def _examples(partition: Partition) -> Iterator[ExampleRef]:
    return partition.examples()


def _measure_size(ref: ExampleRef) -> ExampleRef:
    if (ref.size is not None or ref.problem is not None or ref.ignored or not ref.source
            or ref.key_hash % SIZE_SAMPLE):
        return ref
    found = fileio.match(ref.source)
    return dataclasses.replace(ref, size=found[0].size_in_bytes if found else 0,
                               mtime=found[0].last_updated_in_seconds if found else None)


def is_input(ref: ExampleRef) -> bool:
    """Whether a listed ref is an input (to convert or report), not an ignored hidden file."""
    return not ref.ignored


def _is_hidden(relative: str) -> bool:
    return any(part.startswith('.') for part in relative.split('/'))


def _ignored_in_archive(relative: str, file: folders.File) -> bool:
    """Directory entries and macOS resource forks (`__MACOSX/`) of an archive."""
    return file.member is not None and (file.is_dir or '__MACOSX' in relative.split('/'))


NOT_UTF8 = ('its path is not valid UTF-8 (written in another encoding, shown here with the bytes '
            'escaped): rename it, e.g. convmv -f latin1 -t utf8 -r --notest FOLDER')


def _not_utf8(text: str | None) -> bool:
    """Whether a name listed from disk holds bytes that are not UTF-8 (Python keeps them as
    lone surrogates, which no later step could encode)."""
    try:
        (text or '').encode()
    except UnicodeEncodeError:
        return True
    return False


def _escaped(text: str) -> str:
    """A name that is not valid UTF-8 as printable text: each stray byte as \\xNN."""
    return text.encode('utf-8', 'surrogateescape').decode('utf-8', 'backslashreplace')


def _utf8_named(file: folders.File, label: str | None) -> tuple[folders.File, str | None]:
    """The file and label as listed; a file whose name (or class folder's) is not UTF-8 becomes
    a problem under its escaped name, without a class."""
    if not (_not_utf8(file.key) or _not_utf8(label)):
        return file, label
    return dataclasses.replace(file, path=_escaped(file.path), key=_escaped(file.key),
                               name=_escaped(file.name), error=file.error or NOT_UTF8), None


def _file_ref(split: str, file: folders.File, label: str | None, hidden: bool) -> ExampleRef:
    """The ref of a listed file or archive member: ignored when hidden, a problem when
    unreadable or not named in UTF-8 (damage that ends its archive too, hidden or not)."""
    file, label = _utf8_named(file, label)
    if hidden and not _ends_archive(file):
        return ExampleRef(split, file.key, file.path, file.name, None, ignored=True)
    if file.error is not None:   # Reported under the path through the archive, if any.
        return ExampleRef(split, file.key, file.path if file.member else '', file.name, label,
                          problem=file.error, member=file.member)
    return ExampleRef(split, file.key, file.path, file.name, label, file.size,
                      mtime=file.mtime, member=file.member)


def _ends_archive(file: folders.File) -> bool:
    """Whether it is damage that ends what can be read of its archive (archives.Member.cut),
    unless the archive is itself a hidden file (macOS leaves `._NAME.tar` beside `NAME.tar`)."""
    return (file.member is not None and file.member.cut
            and not fileio.basename(file.member.archive.path).startswith('.'))


def _walked_ref(split: str, relative: str, file: folders.File, label: str | None) -> ExampleRef:
    hidden = _is_hidden(relative) or _ignored_in_archive(relative, file)
    return _file_ref(split, file, label, hidden)


@dataclasses.dataclass(frozen=True)
class FolderSplit(Partition):
    """`ROOT/<split>/` (a folder or an archive): one partition per class folder or archive
    below it, and one for anything else. A gzip-compressed split is one partition: it can only
    be read in one pass."""
    split: str
    place: folders.Place
    sizes_known = True

    def split_further(self) -> list[Partition]:
        if self.place.archive is not None and self.place.archive.streamed:
            return [StreamedSplit(self.split, self.place)]
        places, files = folders.children(self.place)
        classes = [p for p in places if not p.name.startswith('.')
                   and not (p.archive is not None and p.name == '__MACOSX')]
        others = tuple(p for p in places if p not in classes)
        return ([ClassFolder(self.split, p) for p in classes]
                + ([SplitFolderFiles(self.split, self.place, tuple(files), others)]
                   if files or others else []))


@dataclasses.dataclass(frozen=True)
class SplitFolderFiles(Partition):
    """What lies directly in `ROOT/<split>/` besides class folders: files there have no class
    (each is reported); hidden files and folders, and in archives directory entries and
    `__MACOSX/`, are ignored (and counted)."""
    split: str
    place: folders.Place
    files: tuple[folders.File, ...]
    hidden_folders: tuple[folders.Place, ...] = ()

    def examples(self) -> Iterator[ExampleRef]:
        for folder in self.hidden_folders:  # Everything below it is ignored (__MACOSX too).
            for _, inner in folders.walk(folder):
                yield _file_ref(self.split, inner, None, hidden=True)
        for file in self.files:
            yield _unclassified(self.split, self.place, file.name, file)


def _unclassified(split: str, place: folders.Place, relative: str,
                  file: folders.File) -> ExampleRef:
    file, _ = _utf8_named(file, None)
    if (_is_hidden(relative) or _ignored_in_archive(relative, file)) and not _ends_archive(file):
        return _file_ref(split, file, None, hidden=True)
    return ExampleRef(split, file.key, file.path if file.member else '', file.name, None,
                      problem=file.error or f'not in a class folder: move it to '
                      f'{place.path}/<class>/{file.name}', member=file.member)


@dataclasses.dataclass(frozen=True)
class ClassFolder(Partition):
    """`ROOT/<split>/<class>/` (a folder or an archive): every file below it has that label;
    hidden files and folders are ignored (and counted)."""
    split: str
    place: folders.Place

    def examples(self) -> Iterator[ExampleRef]:
        label = self.place.name
        for relative, file in folders.walk(self.place):
            yield _walked_ref(self.split, relative, file, label)


@dataclasses.dataclass(frozen=True)
class StreamedSplit(Partition):
    """A gzip-compressed split, read in one pass: the first folder of each member's path is
    its class."""
    split: str
    place: folders.Place

    def examples(self) -> Iterator[ExampleRef]:
        for relative, file in folders.walk(self.place):
            label, _, rest = relative.partition('/')
            if rest and label and not _is_hidden(label) and label != '__MACOSX':
                yield _walked_ref(self.split, rest, file, label)
            else:
                yield _unclassified(self.split, self.place, relative, file)


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
    for name in names[2:]:
        if not name or name in records.IMAGE_FEATURES or names.count(name) > 1:
            raise DatasetError(f'{path} line 1: column {name!r} cannot be a feature name; name '
                               'each further column once, not after a record key')
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

    def examples(self) -> Iterator[ExampleRef]:
        with fileio.open_read(self.path) as stream:
            stream.seek(self.start)
            data = stream.read(self.end - self.start)
        text = data.decode('utf-8-sig' if self.start == 0 else 'utf-8', 'replace')
        reader = csv.reader(io.StringIO(text, newline=''))
        base = fileio.dirname(self.path)
        while True:
            line = self.first_line + reader.line_num
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                yield self._problem(line, f'cannot parse: {exc}')
                continue
            if not row or (self.columns and self.start == 0 and reader.line_num == 1):
                continue  # A blank line, or the header.
            yield self._parse(row, line, base)

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
                if not value.strip().isdigit():
                    return self._problem(line, f'size {value!r} is not a whole number of bytes')
                size = int(value)
            else:
                extras.append((name, value))
        return _path_ref(self.split, uri, label, size, tuple(sorted(extras)))


@dataclasses.dataclass(frozen=True)
class ConfigPartition(Partition):
    """One partition of a user config's `example_generator(mode[, partition])`.

    The config travels by value (cloudpickle), so a config class defined in a script's
    `__main__` or inside a function works on every worker without save_main_session.
    """
    split: str
    pickled_config: bytes
    partition: Any = None
    partitioned: bool = False

    @classmethod
    def of(cls, split: str, config: Any, *partition) -> 'ConfigPartition':
        return cls(split, cloudpickle.dumps(config), *partition, *([True] if partition else []))

    def examples(self) -> Iterator[ExampleRef]:
        config = cloudpickle.loads(self.pickled_config)
        generator = (config.example_generator(self.split, self.partition) if self.partitioned
                     else config.example_generator(self.split))
        for example in generator:
            yield example_to_ref(self.split, example, type(config).__name__)


def example_to_ref(split: str, example: Any, origin: str) -> ExampleRef:
    """Turns a dict yielded by an example_generator into an ExampleRef (see docs/inputs.md)."""
    where = f"{origin}.example_generator('{split}')"
    if not isinstance(example, dict):
        raise DatasetError(f'{where} yielded a {type(example).__name__}, not a dict; yield '
                           "{'image_fobj': <file object>, 'label': <str>}")
    if 'label' not in example or not any(k in example for k in ('image_fobj', 'image_path', 'image_bytes')):
        raise DatasetError(f'{where} yielded a dict with keys {sorted(example)}; it needs '
                           "'label' and one of 'image_fobj', 'image_path' or 'image_bytes' + 'filename'")
    extras = {k: v for k, v in example.items()
              if k not in ('image_fobj', 'image_path', 'image_bytes', 'filename', 'label')}
    for name, value in extras.items():
        if name in records.IMAGE_FEATURES:
            raise DatasetError(f"{where} yielded extra key '{name}', which is a reserved feature name")
        try:
            records.value_kind(value)
        except ValueError as exc:
            raise DatasetError(f"{where}: extra key '{name}': {exc}") from None
    label = example['label']
    if not isinstance(label, (str, int)) or isinstance(label, bool):
        raise DatasetError(f'{where} yielded label {label!r}; labels must be str or int')
    extras_t = tuple(sorted(extras.items()))
    path, data = _image_location(example, where)
    if path is not None:
        return _path_ref(split, path, label, None, extras_t, example.get('filename'))
    digest = hashlib.sha256(data).hexdigest()
    name = example.get('filename') or digest[:16]
    return ExampleRef(split, f'{name}#{digest}', '', name, label, len(data), data, extras_t)


def _path_ref(split: str, path: str, label: str | int, size: int | None, extras: tuple,
              name: str | None = None) -> ExampleRef:
    """The ref of an image a worker reads from `path`, which may pass through archives
    (`val.tar/a.JPEG`): then its key names the archive as a folder (`val/a.JPEG`)."""
    member = folders.locate(path) if any(map(archives.suffix, path.split('/')[:-1])) else None
    if member is None:
        return ExampleRef(split, path, path, name or fileio.basename(path), label, size,
                          extras=extras)
    if member.error is not None:
        return ExampleRef(split, member.key, path, name or member.name, label, extras=extras,
                          problem=member.error)   # One row, one input: its loss is counted.
    return ExampleRef(split, member.key, path, name or member.name, label, member.size,
                      extras=extras, mtime=member.mtime, member=member.member)


def _image_location(example: dict, where: str) -> tuple[str | None, bytes | None]:
    """(path, None) for images a worker can open itself, else (None, bytes)."""
    if 'image_path' in example:
        return str(example['image_path']), None
    if 'image_bytes' in example:
        if 'filename' not in example:
            raise DatasetError(f"{where} yielded 'image_bytes' without 'filename'")
        return None, bytes(example['image_bytes'])
    fobj = example['image_fobj']
    name = getattr(fobj, 'name', None)
    if isinstance(name, str) and name:
        if hasattr(fobj, 'close'):
            fobj.close()
        return name, None
    return None, fobj.read()

"""Partitions of the input and how each turns into ExampleRefs, on the workers.

A source is described by a few partitions made on the launcher without listing anything big:
a folder split splits further into one partition per class folder, a CSV into byte ranges, a
user config into the partitions it offers. Each partition is listed on a worker.
"""
import csv
import dataclasses
import hashlib
import io
from typing import Any, Iterator

import cloudpickle

from transforms import fileio, records
from transforms.errors import DatasetError
from transforms.refs import ExampleRef

CSV_CHUNK_BYTES = 8 << 20
_HEADER_URIS = {'uri', 'path', 'image', 'image_path', 'file', 'filename', 'url'}


class Partition:
    """A piece of input that one worker lists."""

    def split_further(self) -> list['Partition']:
        return [self]

    def examples(self) -> Iterator[ExampleRef]:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class FolderSplit(Partition):
    """`ROOT/<split>/`: one partition per class folder below it."""
    split: str
    path: str

    def split_further(self) -> list[Partition]:
        return [ClassFolder(self.split, d) for d in fileio.list_subdirs(self.path)]


@dataclasses.dataclass(frozen=True)
class ClassFolder(Partition):
    """`ROOT/<split>/<class>/`: every file below it (hidden files skipped) has that label."""
    split: str
    path: str

    def examples(self) -> Iterator[ExampleRef]:
        label = fileio.basename(self.path)
        for meta in fileio.match(fileio.join(self.path, '**')):
            name = fileio.basename(meta.path)
            if not name.startswith('.'):
                yield ExampleRef(self.split, meta.path, meta.path, name, label, meta.size_in_bytes)


@dataclasses.dataclass(frozen=True)
class CsvChunk(Partition):
    """The lines of a `uri,label` CSV that start in bytes [start, end)."""
    split: str
    path: str
    start: int
    end: int

    @classmethod
    def cover(cls, split: str, path: str, size: int) -> list['CsvChunk']:
        bounds = list(range(0, size, CSV_CHUNK_BYTES)) + [size]
        return [cls(split, path, a, b) for a, b in zip(bounds, bounds[1:])] or [cls(split, path, 0, 0)]

    def examples(self) -> Iterator[ExampleRef]:
        base = fileio.dirname(self.path)
        with fileio.open_read(self.path) as stream:
            if self.start:
                stream.seek(self.start - 1)
                stream.readline()  # The line that began before this chunk belongs to another.
            position = stream.tell()
            while position < self.end:
                raw = stream.readline()
                if not raw:
                    break
                ref = self._parse(raw.decode('utf-8', 'replace'), position, base)
                if ref is not None:
                    yield ref
                position += len(raw)

    def _parse(self, line: str, offset: int, base: str) -> ExampleRef | None:
        if not line.strip():
            return None
        fields = next(csv.reader(io.StringIO(line)))
        where = f'{self.path} at byte {offset}'
        if len(fields) < 2 or not fields[0].strip():
            return ExampleRef(self.split, where, '', '', None,
                              problem=f'bad CSV line {line.strip()[:80]!r}: expected uri,label')
        uri, label = fields[0].strip(), fields[1].strip()
        if offset == 0 and label.lower() == 'label' and uri.lower() in _HEADER_URIS:
            return None
        if not (fileio.is_gcs(uri) or uri.startswith('/')):
            uri = fileio.join(base, uri)
        if not label:
            return ExampleRef(self.split, uri, uri, fileio.basename(uri), None,
                              problem=f'no label ({where})')
        return ExampleRef(self.split, uri, uri, fileio.basename(uri), label)


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
    """Turns a dict yielded by an example_generator into an ExampleRef (see README)."""
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
        name = example.get('filename') or fileio.basename(path)
        return ExampleRef(split, path, path, name, label, extras=extras_t)
    digest = hashlib.sha256(data).hexdigest()
    name = example.get('filename') or digest[:16]
    return ExampleRef(split, f'{name}#{digest}', '', name, label, len(data), data, extras_t)


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

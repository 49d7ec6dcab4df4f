"""WebDataset shards, `--webdataset SPLIT=PATTERN`: their InputKind and partitions.

A shard is a tar (or `.tar.gz`) of samples. Members are grouped into samples as webdataset
groups them (webdataset/tariterators.py): a member's key is its path up to the first dot of
its base name and its extension the rest, lower-cased (`a/n0144_7.seg.png` is key
`a/n0144_7`, extension `seg.png`); consecutive members with the same key are one sample. A
sample is an image (`.jpg`, `.jpeg`, `.png` or `.webp`) and a label: the first of LABELS it
holds, a `.cls` class id, the `--label_field` field of a `.json` (an id or a class name) or a
`.txt` class name; its other members are not read.

Each shard is one partition, indexed by a worker as any tar is (pipeline/inputs/archives.py),
hopping from header to header; its label members are read through the same window while it is
indexed (so they cost no read of their own), a `.tar.gz`'s in its one pass. Each image is then read by whichever
worker converts it, with one ranged read (a gzip shard's through a pass, as archives are).
A sample is one input, its key the shard's path and the sample's key
(`/data/train-000000.tar/n0144_7`), so keys are unique and the same on every run; one that
cannot become a record (no image, two, no label or one that does not parse, members that are
not together, a key that is not UTF-8) is reported under that key. Members with no key (no dot
in the base name, hidden names), directories and webdataset's `__meta__` entries are ignored
and counted.
"""
import collections
import dataclasses
import re
from typing import Any, Callable, Iterator

from pipeline.errors import DatasetError
from pipeline.inputs import archives, brace_patterns, label_values
from pipeline.inputs.archives import Archive, Member
from pipeline.inputs.folder_layout import NOT_UTF8, _escaped, _not_utf8
from pipeline.inputs.kinds import InputKind, Partition, Source, real_location
from pipeline.base.refs import ExampleRef
from pipeline.io import fileio
from pipeline.base.splits import SPLITS
from pipeline.base.settings import LabelSettings

IMAGES = ('jpg', 'jpeg', 'png', 'webp')
LABELS = ('cls', 'json', 'txt')          # In order of priority.
LABEL_MAX = 64 << 10                     # Bytes of a label member, at most.
SHARD_SUFFIXES = ('.tar', '.tar.gz', '.tgz')
_META = re.compile(r'__[^/]*__($|/)')                # webdataset's skip_meta.


def key_and_extension(name: str) -> tuple[str, str] | None:
    """(key, lower-cased extension) of a member's name, None when it has no key: what
    webdataset's base_plus_ext, `re.match(r'^((?:.*/|)[^.]+)[.]([^/]*)$', name)`, finds, in
    time linear in the name (that regex backtracks over every slash: a name of 8,000 slashes
    took a second, a pax name of 1 MiB would take hours)."""
    if _META.match(name):
        return None
    last_slash = name.rfind('/')
    dot = name.find('.', last_slash + 1)
    if dot < 0 or not _has_key_before(name, last_slash, dot):
        return None
    return name[:dot], name[dot + 1:].lower()


def _has_key_before(name: str, last_slash: int, dot: int) -> bool:
    """Whether the regex's `(?:.*/|)[^.]+` matches `name[:dot]`: a prefix that is empty or
    ends with a slash (with no newline before that slash: `.` stops at one), then at least one
    character, none a dot."""
    last_dot = name.rfind('.', 0, last_slash + 1)
    newline = name.find('\n')
    bound = min(dot - 2, last_slash if newline < 0 else min(last_slash, newline - 1))
    slash = name.rfind('/', 0, bound + 1) if bound >= 0 else -1
    return slash > last_dot or (last_dot < 0 and dot >= 1)


@dataclasses.dataclass(frozen=True)
class Shard(Partition):
    """One WebDataset shard, listed by one worker into a ref per sample. `classes`: how many
    class ids a label may name (from --labels_file), None for any."""
    split: str
    archive: Archive
    label_field: str = 'label'
    classes: int | None = None
    sizes_known = True

    def examples(self) -> Iterator[ExampleRef]:
        key, sample = None, []   # The sample being read: (member, extension, parsed label)s.
        seen: set[str] = set()   # Keys of the samples read.
        for member, label in archives.members_read(self.archive, _holds_label, self._label):
            named = None if member.unnamed or member.is_dir else key_and_extension(member.name)
            if member.unnamed:
                yield ExampleRef(self.split, member.path, member.path, member.name, None,
                                 problem=member.error, member=member)
            elif named is None:
                path = _escaped(member.path)
                yield ExampleRef(self.split, path, path, fileio.basename(path), None,
                                 ignored=True)
            else:
                if sample and named[0] != key:
                    yield self._sample(key, sample, seen)
                    sample = []
                key = named[0]
                sample.append((member, named[1], label))
        if sample:
            yield self._sample(key, sample, seen)

    def _sample(self, key: str, sample: list[tuple[Member, str, Any]],
                seen: set[str]) -> ExampleRef:
        """The ref of one sample: its image, or why it is not converted."""
        first = sample[0][0]
        shard = self.archive.path
        images = [m for m, extension, _ in sample if extension in IMAGES]
        image = images[0] if images else None
        ref_key = f'{shard}/{key}'
        if key in seen:   # Separate runs of one key are separate samples to webdataset.
            ref_key = f'{shard}/{key}//@{first.offset}'
        seen.add(key)
        if _not_utf8(key):
            return ExampleRef(self.split, _escaped(ref_key), '', _escaped(fileio.basename(key)),
                              None, problem=NOT_UTF8)

        def problem(reason: str, member: Member | None = image) -> ExampleRef:
            return ExampleRef(self.split, ref_key, '', fileio.basename(key), None,
                              problem=f'{shard}: sample {key} {reason}', member=member)

        broken = next((m for m, _, _ in sample if m.error is not None), None)
        if broken is not None:
            return problem(f'cannot be read: {broken.error}', broken)
        counts = collections.Counter(extension for _, extension, _ in sample)
        twice = next((e for e, count in counts.items() if count > 1), None)
        if twice is not None:
            names = ', '.join(m.name for m, extension, _ in sample if extension == twice)
            return problem(f'has two .{twice} members ({names}): keep one')
        if ref_key != f'{shard}/{key}':
            return problem(f'has members apart from its others ({first.name} follows another '
                           "sample's; webdataset reads them as two samples): write the members "
                           'of a sample one after another')
        if not images:
            return problem(f'has no image: give it a {_listed(IMAGES)} member')
        if len(images) > 1:
            return problem(f'has {len(images)} images ({", ".join(m.name for m in images)}): '
                           'keep one')
        labels = {extension: (m, label) for m, extension, label in sample}
        found = next((extension for extension in LABELS if extension in labels), None)
        if found is None:
            return problem(f'has no label: give it a .cls (class id), .json (field '
                           f'{self.label_field!r}) or .txt (class name) member')
        member, label = labels[found]
        if label is None:
            return problem(f'has a label member of {member.size} bytes ({member.name}); one of '
                           f'at most {LABEL_MAX} bytes is read')
        if isinstance(label, ValueError):
            return problem(f'has a label that does not parse: {member.name} {label}')
        return ExampleRef(self.split, ref_key, image.path, fileio.basename(image.name), label,
                          image.size, mtime=self.archive.file_mtime, member=image)

    def _label(self, member: Member, data: bytes) -> int | str | ValueError:
        """The label a label member holds: a class id or name, or a ValueError saying why not."""
        try:
            return self._parsed(key_and_extension(member.name)[1], data.decode('utf-8'))
        except UnicodeDecodeError:
            return ValueError('is not UTF-8 text')
        except ValueError as exc:
            return exc

    def _parsed(self, extension: str, text: str) -> int | str:
        if extension == 'cls':
            return self._class_id(text.strip())
        if extension == 'txt':
            return label_values.class_name(text)
        document = label_values.json_value(text)
        if not isinstance(document, dict) or self.label_field not in document:
            raise ValueError(f'has no field {self.label_field!r}; --label_field names the field '
                             'that holds the label')
        value = document[self.label_field]
        if isinstance(value, int) and not isinstance(value, bool):
            return self._class_id(str(value))
        if isinstance(value, str):
            return label_values.class_name(value)
        raise ValueError(f'field {self.label_field!r} holds {label_values.excerpt(value)}, '
                         'neither a class id nor a class name')

    def _class_id(self, text: str) -> int:
        found = label_values.class_id(text)
        if self.classes is not None and found >= self.classes:
            raise ValueError(f'holds class id {found}, but --labels_file names {self.classes} '
                             f'classes (ids 0-{self.classes - 1})')
        return found


def _holds_label(member: Member) -> bool:
    named = key_and_extension(member.name)
    return (named is not None and named[1] in LABELS and not member.is_dir
            and member.size <= LABEL_MAX)


def _listed(extensions: tuple[str, ...]) -> str:
    dotted = [f'.{e}' for e in extensions]
    return f'{", ".join(dotted[:-1])} or {dotted[-1]}'


def shard_lists(given: list[str]) -> dict[str, list[tuple[str, str]]]:
    """Split -> (shard path, the flag's value that gives it), in the order given, from
    `--webdataset SPLIT=PATTERN` values; a DatasetError for a value that is no such pair, a
    split that is none, a shard that is no tar or given twice."""
    shards: dict[str, list[tuple[str, str]]] = {}
    where: dict[str, str] = {}
    for item in given:
        split, equals, pattern = item.partition('=')
        if not equals or not pattern:
            raise DatasetError(f'--webdataset {item}: expected SPLIT=PATTERN, e.g. '
                               'train=/data/train-{000000..000146}.tar')
        if split not in SPLITS:
            raise DatasetError(f'--webdataset {item}: {split!r} is no split; splits are '
                               f'{", ".join(SPLITS)}')
        try:
            paths = brace_patterns.expand(pattern)
        except ValueError as exc:
            raise DatasetError(f'--webdataset {item}: {exc}') from None
        for path in paths:
            if archives.suffix(path) not in SHARD_SUFFIXES:
                raise DatasetError(f'--webdataset {item}: {path} is not a .tar, .tar.gz or .tgz '
                                   'file; a WebDataset shard is a tar')
            if path in where:
                raise DatasetError(f'--webdataset {item}: shard {path} is given again (first by '
                                   f'--webdataset {where[path]}); give each shard once')
            where[path] = item
            shards.setdefault(split, []).append((path, item))
    return shards


def _archives(shards: list[tuple[str, str]]) -> list[Archive]:
    """The shard files of (path, flag value)s, each folder listed once (not a request per
    shard); a DatasetError naming the first that is missing or not a regular file."""
    folders: dict[str, dict[str, fileio.Entry]] = {}
    found = []
    for path, item in shards:
        folder = fileio.dirname(path) or '.'
        if folder not in folders:
            try:
                folders[folder] = {e.name: e for e in fileio.list_dir(folder)}
            except DatasetError:
                folders[folder] = {}
        entry = folders[folder].get(fileio.basename(path))
        if entry is None or entry.is_dir:
            raise DatasetError(f'--webdataset {item}: shard {path} does not exist; fix the '
                               'pattern or its range')
        if entry.error is not None:
            raise DatasetError(f'--webdataset {item}: shard {path}: {entry.error}')
        found.append(Archive.of_file(path, entry.size, entry.mtime))
    return found


class WebDatasetKind(InputKind):
    """`--webdataset SPLIT=PATTERN`: WebDataset tar shards per split (local or gs://)."""

    usage = '--webdataset SPLIT=PATTERN'
    given_as = '--webdataset'
    combines = True
    template = {
        'webdataset': ('WebDataset shards (split=pattern, e.g. train=gs://b/train-{000..146}.tar)',
                       'TEXT', [r'^(train|validation|test)=gs:\/\/[^\n\r]+$']),
        'label_field': ('Label field of WebDataset .json members', 'TEXT', []),
    }

    def add_flags(self, flag: Callable[..., None]) -> None:
        flag('webdataset', action='append', default=[], metavar='SPLIT=PATTERN',
             help='WebDataset shards of a split, local or gs://, e.g. '
             'train=/data/train-{000000..000146}.tar (brace ranges as webdataset expands them; '
             '.tar or .tar.gz); repeat it for more patterns and splits. A sample is an image '
             '(.jpg, .jpeg, .png, .webp) and a label: .cls (class id), .json (--label_field) or '
             '.txt (class name), the first of those it holds.')
        flag('label_field', default='label', help='The field of a WebDataset sample\'s .json '
             'member that holds its label, a class id or name (default label).')

    def given(self, opts, config) -> bool:
        return bool(opts.webdataset)

    def paths(self, opts) -> list[str]:
        return [item.partition('=')[2] for item in opts.webdataset]

    def split_flag(self, split: str) -> str:
        return f'--webdataset {split}=...'

    def source(self, opts, labels: LabelSettings, config, alone: bool) -> Source:
        shards = {split: [(real_location(path), item) for path, item in given]
                  for split, given in shard_lists(opts.webdataset).items()}
        classes = (None if labels.label_names is None
                   else labels.label_offset + len(labels.label_names))
        partitions = [Shard(split, archive, opts.label_field, classes)
                      for split, given in shards.items() for archive in _archives(given)]
        paths = sorted((split, path) for split, given in shards.items() for path, _ in given)
        return Source(partitions, tuple(s for s in SPLITS if s in shards), labels,
                      identity=f'webdataset {paths} {opts.label_field}')


WEBDATASET = WebDatasetKind()

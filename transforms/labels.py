"""Label ids that do not depend on listing order, worker count or runner.

The facts of a dataset (examples per split, label texts, extra feature types) are combined over
all ExampleRefs before any image is read; `resolve_labels` then fixes the ids: the config's
`text_label_map` if given, else the labels file, else the sorted set of label texts over all
splits (plus `--label_offset`). Integer labels are ids already.
"""
import dataclasses
import functools
import unicodedata
from typing import Iterable

from pipeline.output import records
from pipeline.errors import DatasetError, shown
from pipeline.base.refs import ExampleRef, listing_hash
from pipeline.base.settings import MAX_LABEL_ID, LabelSettings

_SHOW = 5


@dataclasses.dataclass
class DatasetFacts:
    split_counts: dict = dataclasses.field(default_factory=dict)       # split -> inputs
    ignored: dict = dataclasses.field(default_factory=dict)            # split -> hidden files
    streamed: dict = dataclasses.field(default_factory=dict)   # split -> {gzip archive paths}
    cut: dict = dataclasses.field(default_factory=dict)   # split -> {archives ending in damage}
    known_bad: int = 0                 # Inputs with a problem found by listing (no features).
    texts: dict = dataclasses.field(default_factory=dict)              # label text -> {splits}
    int_labels: set = dataclasses.field(default_factory=set)
    extras: dict = dataclasses.field(default_factory=dict)   # name -> {'kind','is_list','count'}
    problems: list = dataclasses.field(default_factory=list)
    listing: dict = dataclasses.field(default_factory=dict)   # split -> sum of listing_hash

    def add(self, ref: ExampleRef) -> None:
        if ref.member is not None and ref.member.archive.streamed:
            self.streamed.setdefault(ref.split, set()).add(ref.member.archive.path)
        if ref.member is not None and ref.member.cut:
            self.cut.setdefault(ref.split, set()).add(ref.member.archive.path)
        if ref.ignored:
            self.ignored[ref.split] = self.ignored.get(ref.split, 0) + 1
            return
        self.split_counts[ref.split] = self.split_counts.get(ref.split, 0) + 1
        self.listing[ref.split] = (self.listing.get(ref.split, 0) + listing_hash(ref)) % 2**64
        if isinstance(ref.label, int):
            self.int_labels.add(ref.label)
        elif ref.label is not None:  # A class folder is a label even if its files are broken.
            self.texts.setdefault(ref.label, set()).add(ref.split)
        if ref.problem is not None:
            self.known_bad += 1
            return
        for name, value in ref.extras:
            self._add_extra(name, {'kind': records.value_kind(value),
                                   'is_list': isinstance(value, (list, tuple)), 'count': 1})

    def merge(self, other: 'DatasetFacts') -> None:
        for split, n in other.split_counts.items():
            self.split_counts[split] = self.split_counts.get(split, 0) + n
        for split, n in other.ignored.items():
            self.ignored[split] = self.ignored.get(split, 0) + n
        for split, n in other.listing.items():
            self.listing[split] = (self.listing.get(split, 0) + n) % 2**64
        for split, paths in other.streamed.items():
            self.streamed.setdefault(split, set()).update(paths)
        for split, paths in other.cut.items():
            self.cut.setdefault(split, set()).update(paths)
        for text, splits in other.texts.items():
            self.texts.setdefault(text, set()).update(splits)
        self.int_labels |= other.int_labels
        self.known_bad += other.known_bad
        for name, info in other.extras.items():
            self._add_extra(name, info)
        for problem in other.problems:
            self._problem(problem)

    def listing_fingerprint(self, split: str) -> str:
        """What listing saw of a split's inputs, as 16 hex digits (see refs.listing_hash)."""
        return f'{self.listing.get(split, 0):016x}'

    def _add_extra(self, name: str, info: dict) -> None:
        """Counts `info['count']` examples with extra feature `name` of the given type."""
        seen = self.extras.setdefault(name, dict(info, count=0))
        if (seen['kind'], seen['is_list']) != (info['kind'], info['is_list']):
            first, second = sorted([_describe(seen), _describe(info)])
            self._problem(f"extra feature '{name}' is {first} in some examples and {second} in "
                          'others; yield one type')
        seen['count'] += info['count']

    def _problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)


def _describe(info: dict) -> str:
    return f"a list of {info['kind']}" if info['is_list'] else f"a single {info['kind']}"


def combined_facts(found: Iterable[DatasetFacts]) -> DatasetFacts:
    """The facts of bundles of listing, merged."""
    merged = DatasetFacts()
    for facts in found:
        merged.merge(facts)
    return merged


@dataclasses.dataclass(frozen=True)
class LabelMap:
    names: tuple[str, ...]          # Class name of every id, index = id.
    ids: tuple[tuple[str, int], ...]

    def id_of(self, label: str | int) -> int:
        return label if isinstance(label, int) else self._id_by_name[label]

    @functools.cached_property
    def _id_by_name(self) -> dict[str, int]:
        """`ids` as a dict, made once per map (not per record: ImageNet has 1,000 classes)."""
        return dict(self.ids)

    def text_of(self, label: str | int) -> str:
        return self.names[label] if isinstance(label, int) else label


def label_map_of(facts: DatasetFacts, splits: tuple[str, ...], labels: LabelSettings) -> LabelMap:
    """The label ids of a dataset of these facts, once they are checked (check_facts)."""
    check_facts(facts, splits)
    return resolve_labels(facts, labels)


def unlisted_classes(labels: LabelSettings, facts: DatasetFacts) -> list[str]:
    """The classes --labels_file or a config's text_label_map names that no input holds: each is
    a class of every split, with no record (empty_classes)."""
    if facts.int_labels:   # Names of ids, which the ids' records count.
        return []
    given = (labels.label_names if labels.label_names is not None
             else [text for text, _ in labels.text_label_map or ()])
    return [name for name in given if name not in facts.texts]


def check_facts(facts: DatasetFacts, splits: tuple[str, ...]) -> None:
    """Raises a DatasetError for empty splits and inconsistent extra features."""
    if facts.problems:
        raise DatasetError(facts.problems[0])
    empty = [s for s in splits if not facts.split_counts.get(s)]
    if empty:
        raise DatasetError(f'split {empty[0]!r} has no examples; add images for it or leave the '
                           'split out of the input')
    total = sum(facts.split_counts.values()) - facts.known_bad
    for name, info in sorted(facts.extras.items()):
        if info['count'] != total:
            raise DatasetError(f"extra feature '{name}' is in {info['count']} of {total} examples; "
                               'yield it in every example (every record needs the same features)')


def resolve_labels(facts: DatasetFacts, settings: LabelSettings) -> LabelMap:
    """Fixes the label ids of a dataset, or raises a DatasetError naming the offending labels."""
    texts = sorted(facts.texts)
    if texts and facts.int_labels:
        raise DatasetError(f'labels mix integers ({_preview(sorted(facts.int_labels))}) and texts '
                           f'({_preview(texts)}); use one kind')
    if settings.text_label_map is not None:
        mapping = dict(settings.text_label_map)
        _check_known(facts, mapping, settings.names_origin)
        size = max(mapping.values(), default=-1) + 1
        names = [f'class_{i}' for i in range(size)]
        for text, label_id in mapping.items():
            names[label_id] = text
    else:
        base = list(settings.label_names) if settings.label_names is not None else texts
        if settings.label_names is not None:
            _check_known(facts, {t: i for i, t in enumerate(base)}, settings.names_origin)
        names = ['background'] * settings.label_offset + base
        mapping = {text: i for i, text in enumerate(names) if i >= settings.label_offset}
    if facts.int_labels:
        if max(facts.int_labels) >= MAX_LABEL_ID:
            raise DatasetError(f'integer label {shown(max(facts.int_labels))} is not a class id: ids run '
                               f'0..N-1, and this tool takes ids below {MAX_LABEL_ID:,}; fix the '
                               'label, or give names with --labels_file')
        size = max(len(names), max(facts.int_labels) + 1, settings.num_labels or 0)
        names += [str(i) for i in range(len(names), size)]
        bad = [i for i in facts.int_labels if i < 0]
        if bad:
            raise DatasetError(f'negative integer label {shown(bad[0])}; labels are ids 0..N-1')
    _check_one_line(names, facts, settings.names_origin)
    limit = settings.num_labels
    if limit is not None:
        used = len(facts.texts) or len(facts.int_labels)
        if used > limit or (facts.int_labels and max(facts.int_labels) >= limit + settings.label_offset):
            found = texts or sorted(facts.int_labels)
            raise DatasetError(f'found {used} distinct labels ({_preview(found)}), more than '
                               f'num_labels = {limit}; raise num_labels or fix the labels')
    return LabelMap(tuple(names), tuple(sorted(mapping.items())))


def _check_one_line(names: list[str], facts: DatasetFacts, origin: str) -> None:
    """Refuses a class name that labels.txt (one name per line) cannot hold."""
    for name in names:
        if any(unicodedata.category(c) in ('Cc', 'Zl', 'Zp') for c in name):
            where = (f'split {", ".join(sorted(facts.texts[name]))}' if name in facts.texts
                     else origin)
            raise DatasetError(f'class name {shown(name)} ({where}) holds a line break or control '
                               'character; labels.txt keeps one name per line, so rename the '
                               'class folder or fix the label')


def _check_known(facts: DatasetFacts, mapping: dict, origin: str) -> None:
    unknown = [t for t in sorted(facts.texts) if t not in mapping]
    if unknown:
        where = ', '.join(sorted(facts.texts[unknown[0]]))
        raise DatasetError(f'label {shown(unknown[0])} (split {where}) is not in {origin}'
                           + (f'; {len(unknown)} unknown labels: {_preview(unknown)}' if len(unknown) > 1 else '')
                           + '; add it there or fix the input')


def _preview(items: list) -> str:
    listed = ', '.join(shown(i) for i in items[:_SHOW])
    return listed + (f', ... ({len(items) - _SHOW} more)' if len(items) > _SHOW else '')


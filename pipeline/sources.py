"""Turns the input flags into partitions and label settings, through the input kinds
(pipeline/inputs/registry.py): the one given, or a folder layout with CSVs for other splits.

This runs on the launcher and lists only what is small: the split folders, the CSV files, the
config's partitions. Everything large is listed on the workers (transforms/listing.py).
"""
import dataclasses
import unicodedata

from pipeline.inputs.classic_config import ImageClassificationConfig
from pipeline.errors import DatasetError, printable
from pipeline.inputs import registry
from pipeline.inputs.kinds import InputKind, Source, check_regular
from pipeline.io import fileio
from pipeline.options import ConverterOptions
from pipeline.base.splits import SPLITS
from pipeline.base.settings import MAX_LABEL_ID, LabelSettings


def resolve_source(opts: ConverterOptions, config: ImageClassificationConfig | None = None) -> Source:
    """The partitions and label settings for the input the flags (or `config`) describe."""
    with fileio.listing_once():
        return _resolve_source(opts, config)


def _resolve_source(opts: ConverterOptions, config: ImageClassificationConfig | None) -> Source:
    kinds = registry.kinds()
    given = [kind for kind in kinds if kind.given(opts, config)]
    if not given or (len(given) > 1 and not all(kind.combines for kind in given)):
        usages = [kind.usage for kind in kinds if kind.usage]
        raise DatasetError(f'give one input: {", ".join(usages[:-1])} or {usages[-1]} '
                           f'(got {", ".join(k.given_as for k in given) or "none"})')
    names = _read_labels_file(opts.labels_file) if opts.labels_file else None
    labels = LabelSettings(label_names=names, names_origin=f'--labels_file {opts.labels_file}',
                           num_labels=opts.num_labels, label_offset=opts.label_offset)
    source = given[0].source(opts, labels, config, alone=len(given) == 1)
    for kind in given[1:]:
        source = _beside(source, given[0], kind.source(opts, labels, config, alone=False), kind)
    return source


def input_given(opts: ConverterOptions, config: ImageClassificationConfig | None = None) -> bool:
    """Whether the flags (or `config`) give any input."""
    with fileio.listing_once():
        return any(kind.given(opts, config) for kind in registry.kinds())


def input_paths(opts: ConverterOptions) -> list[str | None]:
    """Every file and folder the input flags name, --labels_file too (None when unset)."""
    return [*registry.input_paths(opts), opts.labels_file]


def input_root(opts: ConverterOptions) -> str | None:
    """The input folder an output folder must not be inside, if any."""
    return next((root for kind in registry.kinds() if (root := kind.root(opts))), None)


def _beside(first: Source, first_kind: InputKind, other: Source, kind: InputKind) -> Source:
    """A source whose other splits come from another kind (ImageNet: train.tar and a CSV of
    validation labels)."""
    both = [s for s in other.splits if s in first.splits]
    if both:
        raise DatasetError(f'split {both[0]} is given twice: by {first_kind.split_flag(both[0])} '
                           f'and by {kind.split_flag(both[0])}; give each split once')
    return dataclasses.replace(
        first, partitions=first.partitions + other.partitions,
        splits=tuple(s for s in SPLITS if s in first.splits + other.splits),
        identity=f'{first.identity} {other.identity}')

MAX_LABELS_BYTES = 64 << 20   # Of --labels_file (a million names of 60 characters fit).


def _read_labels_file(path: str) -> tuple[str, ...]:
    """The class names of --labels_file, line i (from 0) naming id i: at most MAX_LABELS_BYTES
    read, fewer than MAX_LABEL_ID names. Lines end at LF (CRLF too) and nowhere else: a name
    holding another line break or control character (a form feed, U+2028, NEL, a lone CR) is
    refused in one line naming its line, as is a blank line before the last name (either would
    shift every later id's name); blank lines at the end are ignored, and so is a byte-order mark."""
    check_regular(path, '--labels_file')
    try:
        data = fileio.read_input(path, MAX_LABELS_BYTES)
    except fileio.TooLarge:
        raise DatasetError(f'--labels_file {path} is larger than {MAX_LABELS_BYTES >> 20} MiB; '
                           'it holds one class name a line') from None
    except Exception as exc:
        raise DatasetError(f'--labels_file {path} cannot be read: {str(exc).splitlines()[0]}') from None
    try:
        text = data.decode('utf-8-sig')
    except UnicodeDecodeError as exc:
        line = data.count(b'\n', 0, exc.start) + 1
        raise DatasetError(f'--labels_file {path} line {line} is not UTF-8 text (byte '
                           f'{data[exc.start]:#04x}); save it as UTF-8') from None
    text = text.rstrip(' \t\r\n')   # A final line break, and blank lines after the last name.
    count = text.count('\n') + 1 if text else 0
    if count >= MAX_LABEL_ID:   # Counted before a line is made.
        raise DatasetError(f'--labels_file {path} names {count:,} classes; class ids run '
                           f'below {MAX_LABEL_ID:,}')
    names = []
    for number, line in enumerate(text.split('\n') if text else (), 1):
        name = (line[:-1] if line.endswith('\r') else line).strip(' \t')
        if not name:
            raise DatasetError(f'--labels_file {path} line {number} is blank, but line i names '
                               'id i: remove it (or name its class), or every later id would '
                               'take the name of the line after its own')
        if any(unicodedata.category(c) in ('Cc', 'Zl', 'Zp') for c in name):
            raise DatasetError(f'--labels_file {path} line {number} holds a line break or control '
                               f'character ({printable(name)[:80]}); a class name is one line of '
                               'text: remove it')
        names.append(name.strip())
    if len(set(names)) != len(names):
        raise DatasetError(f'--labels_file {path} lists a class name twice')
    return tuple(names)

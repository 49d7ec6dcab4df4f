"""Hugging Face parquet files, `--input_dir DIR` in one of the Hub's layouts: its InputKind and
partitions.

    DIR/data/SPLIT-00000-of-00004.parquet     a dataset repository (push_to_hub)
    DIR/CONFIG/SPLIT/0000.parquet             the Hub's parquet conversion (one CONFIG)
    DIR/SPLIT/0000.parquet                    one CONFIG folder of it
    DIR/SPLIT-00000-of-00004.parquet          the files alone

The image column is the one whose feature is an `Image` in the schema's `huggingface` metadata
(values `{bytes, path}`), the label column the `ClassLabel` one; `--image_column` and
`--label_column` choose others (an image column of plain bytes, or of text: the images' paths). An
image a row names by path is read only from under --image_root (parquet_image_paths.py). Label
ids are the ClassLabel's ids and names its names (through
LabelSettings.label_names, as --labels_file fixes them); an integer label column without a
ClassLabel gives ids as stored, a text column sorted names, as any other input.

Each file is one partition, which splits further into spans of its row groups, each listed
and read as pipeline/inputs/parquet_row_groups.py says. Every row is an input: a record or a
reported error named `FILE:row N` (N counts from 0, as `datasets` indexes the file).
"""
import dataclasses
import itertools
import os
from typing import Callable

import pyarrow as pa

from pipeline.base.runners import runner_kind, runner_name
from pipeline.errors import DatasetError, printable
from pipeline.inputs import archives, label_values
from pipeline.inputs.kinds import InputKind, Partition, Source, real_location
from pipeline.inputs.parquet_image_paths import NO_IMAGE_ROOT, ImageRoot
from pipeline.inputs.parquet_row_groups import ClassNames, Columns, RowGroups, footer, readable, spans
from pipeline.base.splits import SPLITS, split_of
from pipeline.io import fileio
from pipeline.base.settings import LabelSettings

PARQUET = '.parquet'


def find_layout(root: str) -> dict[str, list[fileio.Entry]] | None:
    """Split name as the files spell it -> its parquet files, if `root` is a folder in one of
    the Hub's layouts; else None (a folder of classes, say). Several configs are an error."""
    if archives.suffix(fileio.basename(root)):
        return None
    entries = _listed(root)
    if _parquet_in(entries):
        return _by_name_prefix(_parquet_in(entries))
    folders = {e.name: e for e in entries if e.is_dir and not e.hidden}
    if 'data' in folders and (inside := _parquet_in(_listed(folders['data'].path))):
        return _by_name_prefix(inside)
    if any(split_of(name) for name in folders):
        return _split_folders(folders)
    listed = fileio.at_once(_listed, [e.path for e in folders.values()])
    configs = {name: found for name, entries in zip(folders, listed)
               if (found := _split_folders({f.name: f for f in entries if f.is_dir}))}
    if len(configs) > 1:
        raise DatasetError(f'{root} holds the parquet files of configs {", ".join(sorted(configs))}'
                           f'; give one: --input_dir {root.rstrip("/")}/{min(configs)}')
    return next(iter(configs.values()), None)


def _listed(path: str) -> list[fileio.Entry]:
    try:
        return fileio.list_dir(path)
    except DatasetError:   # Not a folder, or gone: the folder layout says what is wrong.
        return []


def _parquet_in(entries: list[fileio.Entry]) -> list[fileio.Entry]:
    return [e for e in entries if not e.is_dir and not e.hidden and e.name.endswith(PARQUET)]


def _by_name_prefix(files: list[fileio.Entry]) -> dict[str, list[fileio.Entry]]:
    """`SPLIT-00000-of-00004.parquet` (or `SPLIT.parquet`) files by SPLIT."""
    found: dict[str, list[fileio.Entry]] = {}
    for file in files:
        found.setdefault(file.name[:-len(PARQUET)].partition('-')[0], []).append(file)
    return found


def _split_folders(folders: dict[str, fileio.Entry]) -> dict[str, list[fileio.Entry]] | None:
    """`SPLIT/*.parquet` by SPLIT, for the folders named as splits that hold parquet files."""
    splits = [(name, e.path) for name, e in folders.items() if split_of(name)]
    listed = fileio.at_once(_listed, [path for _, path in splits])
    found = {name: files for (name, _), entries in zip(splits, listed)
             if (files := _parquet_in(entries))}
    return found or None


def read_columns(path: str, size: int, image: str | None = None, label: str | None = None,
                 mtime: float | None = None) -> Columns:
    """The image and label columns of parquet file `path` (those named, else those its
    `huggingface` metadata gives the Image and ClassLabel features), or a DatasetError naming the
    file, the columns it has and the flag that chooses. The schema is the footer's, read as
    every footer is (parquet_row_groups.footer: over parquet_footer.MAX_FOOTER bytes, refused
    before it is parsed)."""
    found = footer(path, size, mtime)
    with readable(path):
        schema = found.arrow.schema.to_arrow_schema()
    return _columns((path, size, mtime), schema, image, label)


def _columns(file: tuple[str, int, float | None], schema: pa.Schema, image: str | None,
             label: str | None) -> Columns:
    """The columns of parquet file `file` (path, size, modification time), whose schema is
    `schema`, as `read_columns` says."""
    path = file[0]
    features = _features(path, (schema.metadata or {}).get(b'huggingface', b'{}'))
    image = image or _typed(path, schema, features, 'Image', '--image_column')
    label = label or _typed(path, schema, features, 'ClassLabel', '--label_column')
    for name, flag in ((image, '--image_column'), (label, '--label_column')):
        if name not in schema.names:
            raise DatasetError(f'{flag} {name}: {path} has no such column (columns: '
                               f'{", ".join(schema.names)})')
    kind = schema.field(image).type
    if not (_binary(kind) or _text(kind) or pa.types.is_struct(kind)
            and kind.get_field_index('bytes') >= 0 and _binary(kind.field('bytes').type)):
        raise DatasetError(f'{path}: column {image} holds {kind}, not images (binary, a '
                           '{bytes, path} struct, or text: their paths); name the image column '
                           'with --image_column')
    feature = features.get(label, {})
    if not isinstance(feature, dict):
        raise DatasetError(f'{path}: the feature of column {label} in its huggingface schema '
                           f'metadata is {label_values.excerpt(feature)}, not an object; write '
                           'the file again with datasets, or name the columns with '
                           '--image_column and --label_column')
    if feature.get('_type') == 'ClassLabel':
        try:
            classes = ClassNames.of(label_values.class_label_names(feature), *file, label)
        except ValueError as exc:
            raise DatasetError(f'{path}: the ClassLabel of column {label} {exc}') from None
        return _image_columns(image, label, classes, kind)
    found = schema.field(label).type
    if not (pa.types.is_integer(found) or _text(found)):
        raise DatasetError(f'{path}: column {label} holds {found}, not labels (integer ids or '
                           'class names); name the label column with --label_column')
    return _image_columns(image, label, None, kind)


def _image_columns(image: str, label: str, classes: ClassNames | None,
                   kind: pa.DataType) -> Columns:
    """The Columns of image column `image` of type `kind`: a text column holds paths alone."""
    if _text(kind):
        return Columns(image, label, classes, image, text=True)
    return Columns(image, label, classes, _path_column(image, kind), pa.types.is_struct(kind))


def _path_column(image: str, kind: pa.DataType) -> str | None:
    """`IMAGE.path` when the image column is a struct with one text field `path` (as `datasets`
    writes it); None when its images have no usable path (plain bytes; a path that is missing,
    a number or a struct)."""
    if not pa.types.is_struct(kind) or kind.get_field_index('path') < 0:
        return None
    return f'{image}.path' if _text(kind.field('path').type) else None


def _text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _features(path: str, metadata: bytes) -> dict:
    """The features of the schema's `huggingface` metadata, or a DatasetError naming the file
    when that is not what `datasets` writes."""
    try:
        return label_values.hub_features(metadata)
    except ValueError as exc:
        raise DatasetError(f'{path}: its huggingface schema metadata is not what the datasets '
                           f'library writes ({printable(str(exc))[:120]}); rewrite the file with '
                           'datasets, or name the columns with --image_column and --label_column') from None


def _binary(kind: pa.DataType) -> bool:
    return pa.types.is_binary(kind) or pa.types.is_large_binary(kind)


def _typed(path: str, schema: pa.Schema, features: dict, type_name: str, flag: str) -> str:
    """The one column whose feature is a `type_name`, or a DatasetError."""
    found = [name for name, f in features.items()
             if isinstance(f, dict) and f.get('_type') == type_name and name in schema.names]
    if len(found) != 1:
        what = (f'columns {", ".join(found)} are all {type_name} features' if found
                else f'no column is {"an" if type_name[0] in "AEIOU" else "a"} {type_name} '
                f'feature (columns: {", ".join(schema.names)})')
        raise DatasetError(f'{path}: {what}; choose one with {flag}')
    return found[0]


@dataclasses.dataclass(frozen=True)
class ParquetFile(Partition):
    """One parquet file of a split: one partition per span of its row groups. Its columns must
    be those of the input's first file, with the same ClassLabel names."""
    split: str
    path: str
    name: str          # The file's path below --input_dir, which starts its examples' keys.
    size: int
    mtime: float | None
    columns: Columns
    limit: int         # --max_input_mb, in bytes.
    image_root: ImageRoot = NO_IMAGE_ROOT   # Where the images its rows name by path are read.

    def split_further(self) -> list[Partition]:
        found_footer = footer(self.path, self.size, self.mtime)
        with readable(self.path):
            schema = found_footer.arrow.schema.to_arrow_schema()
        found = _columns((self.path, self.size, self.mtime), schema, self.columns.image,
                         self.columns.label)
        if found != self.columns:
            raise DatasetError(f'{self.path}: the labels of column {found.label} are not those of '
                               f'the first file: {_difference(found, self.columns)}; convert the '
                               'files of one dataset together')
        return [RowGroups(self.split, self.path, self.name, self.size, self.mtime, self.columns,
                          self.limit, *span, image_root=self.image_root)
                for span in spans(self.path, found_footer, self.columns.image)]


def _difference(found: Columns, first: Columns) -> str:
    if found.classes is None or first.classes is None:
        return ('a ClassLabel here, none there' if found.classes is not None
                else 'no ClassLabel here, one there')
    for index, (here, there) in enumerate(itertools.zip_longest(found.classes, first.classes)):
        if here != there:
            return f'id {index} is {here!r} here, {there!r} there'
    return ''


def _parquet_source(root: str, opts, labels: LabelSettings) -> Source:
    by_split: dict[str, tuple[str, list[fileio.Entry]]] = {}
    layout = find_layout(root) or {}
    for name, files in sorted(layout.items()):
        split = split_of(name)
        if split in by_split:
            raise DatasetError(f'{root}: splits {by_split[split][0]} and {name} both stand for '
                               f'{split}; keep one')
        if split is not None:
            by_split[split] = name, sorted(files, key=lambda e: e.path)
    splits = tuple(s for s in SPLITS if s in by_split)
    if not splits:
        raise DatasetError(f'{root} holds parquet files of splits {", ".join(sorted(layout))}, '
                           f'none of {", ".join(SPLITS)}; rename the files of a split')
    for _, files in by_split.values():
        for entry in files:
            if entry.error:   # A pipe, a device, a broken link or a link loop.
                fix = '' if 'remove it' in entry.error else '; replace it with the parquet file'
                raise DatasetError(f'{entry.path}: {entry.error}{fix}')
    first = by_split[splits[0]][1][0]
    columns = read_columns(first.path, first.size, opts.image_column, opts.label_column,
                           first.mtime)
    if columns.classes is not None and labels.label_names is None and labels.text_label_map is None:
        labels = dataclasses.replace(labels, label_names=tuple(columns.classes), names_origin=(
            f'the ClassLabel of column {columns.label} in {first.path}'))
    image_root = _image_root(opts) if columns.path else NO_IMAGE_ROOT
    partitions = [ParquetFile(split, e.path, e.path[len(root) + 1:], e.size, e.mtime, columns,
                              opts.max_input_mb << 20, image_root)
                  for split in splits for e in by_split[split][1]]
    # The root decides which images are read: another is another input.
    images = f' images under {image_root.path}' if columns.path else ''
    return Source(partitions, splits, labels,
                  identity=f'parquet {root} {columns.image} {columns.label}{images}')


def _image_root(opts) -> ImageRoot:
    """The folder the images that rows name by path are read under: --image_root, else the
    folder this command was started in where the workers can read it (not on a runner whose
    workers run elsewhere: Dataflow, a job service). A local one is made absolute with its links
    followed, as every path checked against it is."""
    if opts.image_root:
        given = opts.image_root.rstrip('/') or '/'
        if fileio.is_gcs(given):
            return ImageRoot(given, given=True)
        if not os.path.isdir(given):
            raise DatasetError(f'--image_root {printable(given)} is not a folder; give the folder '
                               'the images of the parquet rows are in')
        return ImageRoot(os.path.realpath(given), given=True)
    default = 'the folder the command was started in (the default --image_root)'
    if runner_kind(opts).remote:
        return ImageRoot(None, why_not=f'is not read on {runner_name(opts)}, whose workers '
                         f'cannot see {default}; pass --image_root=gs://BUCKET/FOLDER holding '
                         'the images')
    try:
        return ImageRoot(os.path.realpath(os.getcwd()))
    except OSError:   # The folder was removed while the command ran in it.
        return ImageRoot(None, why_not=f'is not read: {default} was removed; pass '
                         '--image_root=FOLDER holding the images')


class ParquetKind(InputKind):
    """`--input_dir` holding Hugging Face parquet files (local or gs://); it has no usage of its
    own: the folder layout's names --input_dir."""

    given_as = '--input_dir'
    combines = True
    template = {'image_root': ('Parquet input: the folder of the images rows name by path',
                               'GCS_READ_FOLDER', [r'^gs:\/\/[^\n\r]+$'])}

    def add_flags(self, flag: Callable[..., None]) -> None:
        flag('image_column', help='Parquet input: the column of images (default: the one whose '
             'Hugging Face feature is an Image).')
        flag('label_column', help='Parquet input: the column of labels (default: the one whose '
             'Hugging Face feature is a ClassLabel).')
        flag('image_root', help='Parquet input: the folder, local or gs://, that images stored '
             'by their paths are read under; a relative path is relative to it, and a row whose '
             'path leads outside it (absolute, through .. or a link) is reported, not read '
             '(default: the folder the command was started in).')

    def given(self, opts, config) -> bool:
        return bool(opts.input_dir) and find_layout(opts.input_dir.rstrip('/')) is not None

    def check(self, opts) -> None:
        root = opts.image_root
        if root and fileio.is_gcs(root) and {'.', '..'} & set(root[len('gs://'):].split('/')):
            raise DatasetError(f'--image_root {printable(root)}: a gs:// folder is named without '
                               '. or .. (Cloud Storage does not resolve them); name it plainly')

    def paths(self, opts) -> list[str]:
        return [opts.image_root] if opts.image_root else []

    def split_flag(self, split: str) -> str:
        return '--input_dir'

    def source(self, opts, labels: LabelSettings, config, alone: bool) -> Source:
        return _parquet_source(real_location(opts.input_dir), opts, labels)


PARQUET_KIND = ParquetKind()

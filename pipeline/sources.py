"""Turns the input flags (folder, CSVs or a config class) into partitions and label settings.

This runs on the launcher and lists only what is small: the split folders, the CSV files, the
config's partitions. Everything large is listed on the workers (transforms/listing.py).
"""
import ast
import dataclasses
import importlib

from pipeline.classic.config import ImageClassificationConfig
from pipeline.io import fileio
from pipeline.inputs import folders
from pipeline.errors import DatasetError
from pipeline.options import ConverterOptions
from transforms.listing import ConfigPartition, CsvFile, FolderSplit, Partition
from pipeline.output.metadata import SPLITS
from transforms.settings import LabelSettings


@dataclasses.dataclass
class Source:
    partitions: list[Partition]
    splits: tuple[str, ...]
    labels: LabelSettings
    name: str = 'dataset'
    description: str = ''
    version: str = '1.0.0'
    identity: str = ''      # What the input is (part of the run id): folder, CSVs or config.


def resolve_source(opts: ConverterOptions, config: ImageClassificationConfig | None = None) -> Source:
    """The partitions and label settings for the input the flags (or `config`) describe."""
    csvs = {split: getattr(opts, f'csv_{split}') for split in SPLITS if getattr(opts, f'csv_{split}')}
    given = [name for name, value in (('--input_dir', opts.input_dir), ('--csv_*', csvs),
                                      ('--config', opts.config or config)) if value]
    if len(given) != 1 and given != ['--input_dir', '--csv_*']:
        raise DatasetError(f'give one input: --input_dir (with --csv_<split> for splits it '
                           f'does not hold), --csv_<split> or --config '
                           f'(got {", ".join(given) or "none"})')
    names = _read_labels_file(opts.labels_file) if opts.labels_file else None
    labels = LabelSettings(label_names=names, names_origin=f'--labels_file {opts.labels_file}',
                           num_labels=opts.num_labels, label_offset=opts.label_offset)
    if opts.input_dir:
        folder = _folder_source(opts.input_dir.rstrip('/'), labels, bool(csvs),
                                accept_cut=opts.max_error_ratio >= 1)
        return _with_csvs(folder, _csv_source(csvs, labels)) if csvs else folder
    if csvs:
        return _csv_source(csvs, labels)
    if config is None:
        return dataclasses.replace(
            config_source(load_config(opts.config, opts.config_arg), labels),
            identity=f'config {opts.config} {sorted(opts.config_arg)}')
    return config_source(config, labels)


def _with_csvs(folder: Source, csvs: Source) -> Source:
    """A folder layout whose other splits come from CSVs (ImageNet: train.tar and a CSV of
    validation labels)."""
    both = [s for s in csvs.splits if s in folder.splits]
    if both:
        raise DatasetError(f'split {both[0]} is given twice: by --input_dir and by '
                           f'--csv_{both[0]}; give each split once')
    return dataclasses.replace(
        folder, partitions=folder.partitions + csvs.partitions,
        splits=tuple(s for s in SPLITS if s in folder.splits + csvs.splits),
        identity=f'{folder.identity} {csvs.identity}')


def _folder_source(root: str, labels: LabelSettings, optional: bool = False,
                   accept_cut: bool = False) -> Source:
    place = folders.place_of(root)
    places, files = folders.children(place)
    damage = [f for f in files if f.member is not None and f.member.unnamed]
    if damage and not accept_cut:   # Above the split folders: no split can count what it hides.
        raise DatasetError(f'{root} is damaged above its split folders ({damage[0].error}): a '
                           'split or some of its images may be missing and how many cannot be '
                           'known. Fetch the archive again, or pass --max_error_ratio=1 to '
                           'convert what it holds')
    found = [p for p in places if p.name in SPLITS]
    for split in SPLITS:
        twins = [p.path for p in found if p.name == split]
        if len(twins) > 1:
            raise DatasetError(f'{" and ".join(twins)} both stand for split {split}; keep one')
    splits = tuple(s for s in SPLITS if s in {p.name for p in found})
    if not splits and not optional:
        raise DatasetError(f'{root} has no split folders; expected {root}/train/<class>/<image> '
                           '(and/or validation/, test/; each may be a .tar, .tar.gz or .zip)')
    by_name = {p.name: p for p in found}
    return Source([FolderSplit(s, by_name[s]) for s in splits], splits, labels,
                  identity=f'folder {root}')


def _csv_source(csvs: dict, labels: LabelSettings) -> Source:
    partitions = []
    for split, path in csvs.items():
        _check_regular(path, f'--csv_{split}')
        if not fileio.exists(path):
            raise DatasetError(f'--csv_{split} {path} does not exist; give the path of a CSV '
                               'file with uri,label lines')
        partitions.append(CsvFile(split, path))
    return Source(partitions, tuple(s for s in SPLITS if s in csvs), labels,
                  identity=f'csv {sorted(csvs.items())}')


def config_source(config: ImageClassificationConfig, labels: LabelSettings) -> Source:
    """Partitions of a user config, with its label map and num_labels."""
    origin = type(config).__name__
    modes = list(config.supported_modes)
    unknown = [m for m in modes if m not in SPLITS]
    if unknown or not modes:
        raise DatasetError(f'{origin}.supported_modes has {unknown or "no modes"}; use some of '
                           f'{", ".join(SPLITS)}')
    label_map = config.text_label_map
    labels = dataclasses.replace(
        labels, num_labels=labels.num_labels or config.num_labels,
        text_label_map=tuple(sorted(label_map.items())) if label_map else None,
        names_origin=f'{origin}.text_label_map' if label_map else labels.names_origin)
    partitions = []
    for mode in modes:
        parts = config.partitions(mode)
        partitions += ([ConfigPartition.of(mode, config, p) for p in parts]
                       if parts is not None else [ConfigPartition.of(mode, config)])
    splits = tuple(s for s in SPLITS if s in modes)
    name = getattr(config, 'name', '') or 'dataset'
    return Source(partitions, splits, labels, name if name != 'default' else 'dataset',
                  getattr(config, 'description', ''), getattr(config, 'version', '1.0.0'),
                  f'config {type(config).__module__}.{type(config).__qualname__} {name}')


def load_config(spec: str, args: list[str]) -> ImageClassificationConfig:
    """Imports `module:Class` and instantiates it with `key=value` arguments."""
    module_name, _, class_name = spec.partition(':')
    if not class_name:
        raise DatasetError(f'--config {spec}: expected module:Class, e.g. my_data:MyConfig')
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise DatasetError(f'--config {spec}: cannot import it ({exc}); is the module on '
                           'PYTHONPATH?') from None
    kwargs = {}
    for arg in args:
        key, sep, value = arg.partition('=')
        if not sep:
            raise DatasetError(f'--config_arg {arg}: expected key=value')
        kwargs[key] = _literal(value)
    try:
        config = cls(**kwargs)
    except TypeError as exc:
        raise DatasetError(f'--config {spec}: {exc}; pass its arguments with --config_arg key=value') from None
    if not isinstance(config, ImageClassificationConfig):
        raise DatasetError(f'--config {spec} is not an ImageClassificationConfig subclass')
    dropped = [key for key in kwargs if key in getattr(config, 'ignored_arguments', ())]
    if dropped:
        raise DatasetError(f'--config_arg {dropped[0]}: {spec} does not take a {dropped[0]!r} '
                           'argument (its __init__ passes it on unused); use one of the keywords '
                           'its __init__ names')
    return config


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _read_labels_file(path: str) -> tuple[str, ...]:
    _check_regular(path, '--labels_file')
    try:
        text = fileio.read_bytes(path).decode('utf-8')
    except Exception as exc:
        raise DatasetError(f'--labels_file {path} cannot be read: {str(exc).splitlines()[0]}') from None
    names = tuple(line.strip() for line in text.splitlines() if line.strip())
    if len(set(names)) != len(names):
        raise DatasetError(f'--labels_file {path} lists a class name twice')
    return names


def _check_regular(path: str, flag: str) -> None:
    why = fileio.not_regular(path)
    if why:
        raise DatasetError(f'{flag} {path}: {why}')

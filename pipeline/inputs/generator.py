"""A config class, `--config MODULE:CLASS` (an ImageClassificationConfig, or one passed to the job
API): its InputKind and partitions. Each dict its example_generator yields becomes one ref.
"""
import ast
import dataclasses
import hashlib
import importlib
from typing import Any, Callable, Iterator

import cloudpickle

from pipeline.inputs.classic_config import ImageClassificationConfig
from pipeline.errors import DatasetError, shown
from pipeline.inputs.kinds import InputKind, Partition, Source, path_ref
from pipeline.base.refs import ExampleRef
from pipeline.output import records
from pipeline.base.splits import SPLITS
from pipeline.base.settings import MAX_LABEL_ID, LabelSettings


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
        raise DatasetError(f'{where} yielded label {shown(label)}; labels must be str or int')
    if isinstance(label, int) and not 0 <= label < MAX_LABEL_ID:
        raise DatasetError(f'{where} yielded label {shown(label)}; an integer label is a class id '
                           f'0..{MAX_LABEL_ID - 1:,}')
    extras_t = tuple(sorted(extras.items()))
    path, data = _image_location(example, where)
    if path is not None:
        return path_ref(split, path, label, None, extras_t, example.get('filename'))
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


class ConfigKind(InputKind):
    """`--config MODULE:CLASS` with `--config_arg`s, or a config object given to the job API."""

    usage = '--config'
    given_as = '--config'

    def add_flags(self, flag: Callable[..., None]) -> None:
        flag('config', metavar='MODULE:CLASS', help='An ImageClassificationConfig subclass that '
             'describes the dataset with example_generator(mode).')
        flag('config_arg', action='append', default=[], metavar='KEY=VALUE',
             help='Keyword argument for the --config class\'s __init__, VALUE read as a Python '
             'literal (else as text); repeat for several. A keyword the class does not take is '
             'an error.')

    def given(self, opts, config) -> bool:
        return bool(opts.config or config)

    def source(self, opts, labels: LabelSettings, config, alone: bool) -> Source:
        if config is None:
            return dataclasses.replace(
                config_source(load_config(opts.config, opts.config_arg), labels),
                identity=f'config {opts.config} {sorted(opts.config_arg)}')
        return config_source(config, labels)


CONFIG = ConfigKind()

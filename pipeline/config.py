"""The classic tensorflow/tpu `data_converter` API, running on the Beam pipeline.

A config written for the old tool works with only its import changed:

    from pipeline.config import ImageClassificationBuilder, ImageClassificationConfig
"""
import abc
import os
from typing import Any, Iterable, Iterator

from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.options import to_argv

BUILDER_NAME = 'image_classification_builder'


class ImageClassificationConfig(abc.ABC):
    """Describes a dataset: its labels, its modes (splits) and an example generator per mode.

    The keyword arguments of the old TFDS BuilderConfig (`name`, `description`, `version`,
    `supported_versions`, `release_notes`) are accepted and stored.
    """

    def __init__(self, name: str = 'default', description: str = '', version: Any = '1.0.0',
                 supported_versions: Iterable = (), release_notes: Any = None, **_ignored):
        self.name = name
        self.description = description or ''
        self.version = str(version)
        self.supported_versions = list(supported_versions or [])
        self.release_notes = release_notes

    @property
    @abc.abstractmethod
    def num_labels(self) -> int:
        """The number of labels in the dataset."""

    @property
    @abc.abstractmethod
    def supported_modes(self) -> Iterable[str]:
        """The modes (splits) this dataset has: some of 'train', 'validation', 'test'."""

    @property
    def text_label_map(self) -> dict | None:
        """Optional fixed mapping from label text to integer id."""
        return None

    def download_path(self, mode: str) -> str | None:
        """Kept for compatibility with the old API; the converter does not download."""
        return None

    def partitions(self, mode: str) -> list | None:
        """Optional: picklable partitions of a mode, each listed by a separate worker with
        `example_generator(mode, partition)`. None runs the whole mode as one partition."""
        return None

    @abc.abstractmethod
    def example_generator(self, mode: str, *partition) -> Iterator[dict]:
        """Yields {'image_fobj': <file object>, 'label': <str or int>} dicts for `mode`.

        Instead of 'image_fobj', 'image_path' (a path or URI) or 'image_bytes' with 'filename'
        may be given; any other key becomes an extra feature of the record.
        """


class ImageClassificationBuilder:
    """Converts the dataset a config describes, like the old TFDS-based builder did.

    Output goes to `data_dir/image_classification_builder/<config name>/<version>/`, with shards
    named `image_classification_builder-<split>.tfrecord-NNNNN-of-NNNNN`, as before.
    """

    def __init__(self, config: ImageClassificationConfig, data_dir: str | None = None, **_ignored):
        if not isinstance(config, ImageClassificationConfig):
            raise ValueError('Provided config is not the correct type. Please provide a config '
                             'inheriting ImageClassificationConfig.')
        self.builder_config = config
        base = data_dir or os.path.join(os.path.expanduser('~'), 'tensorflow_datasets')
        self.data_dir = '/'.join([base.rstrip('/'), BUILDER_NAME, config.name, config.version])

    def download_and_prepare(self, pipeline_options: PipelineOptions | None = None,
                             **flags) -> dict:
        """Runs the conversion and returns its summary (records, shards, bytes, skipped files).

        `pipeline_options` are Beam's (runner, workers, ...); keyword arguments are converter
        flags by name, e.g. `num_shards=4, overwrite=True`.
        """
        from pipeline import run

        values = (pipeline_options.get_all_options(drop_default=True, retain_unknown_options=True)
                  if pipeline_options is not None else {})
        values.update(flags)
        values.setdefault('dataset_name', BUILDER_NAME)
        values.setdefault('output_dir', self.data_dir)
        return run.convert(to_argv(values), config=self.builder_config)

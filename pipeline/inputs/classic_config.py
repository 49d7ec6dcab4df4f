"""ImageClassificationConfig: a dataset described as in the classic tensorflow/tpu data_converter.

A config written for the old tool works with only its import changed:

    from pipeline.config import ImageClassificationBuilder, ImageClassificationConfig
"""
import abc
from typing import Any, Iterable, Iterator


class ImageClassificationConfig(abc.ABC):
    """Describes a dataset: its labels, its modes (splits) and an example generator per mode.

    The keyword arguments of the old TFDS BuilderConfig (`name`, `description`, `version`,
    `supported_versions`, `release_notes`) are accepted and stored; any other keyword that a
    subclass passes on to this constructor is noted in `ignored_arguments`.
    """

    def __init__(self, name: str = 'default', description: str = '', version: Any = '1.0.0',
                 supported_versions: Iterable = (), release_notes: Any = None, **ignored):
        self.ignored_arguments = tuple(ignored)   # Reached no constructor that takes them.
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

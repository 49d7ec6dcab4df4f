"""ConversionSettings: what the workers need to know about a run, resolved once from the flags."""
import dataclasses
import functools

from pipeline.formats.metadata import SPLITS
from pipeline.formats.output_folder import temp_dir
from pipeline.formats.shard_formats import TFRECORD, ShardFormat
from transforms.images import ImageOptions
from transforms.resume import LAYOUT_VERSION, fingerprint


@dataclasses.dataclass(frozen=True)
class LabelSettings:
    """Where label ids come from; see labels.resolve_labels for the precedence."""
    text_label_map: tuple[tuple[str, int], ...] | None = None
    label_names: tuple[str, ...] | None = None   # From --labels_file, in id order.
    names_origin: str = ''                        # Where the map or names came from, for errors.
    num_labels: int | None = None
    label_offset: int = 0


@dataclasses.dataclass(frozen=True)
class ConversionSettings:
    output_dir: str
    dataset_name: str
    splits: tuple[str, ...]
    source: str = ''              # What the input is: its folder, CSV files or config.
    image: ImageOptions = ImageOptions()
    labels: LabelSettings = LabelSettings()
    num_shards: int = 0
    target_shard_mb: float = 128.0
    skip_duplicates: bool = False
    output_formats: tuple[ShardFormat, ...] = (TFRECORD,)   # The first is the primary one.
    description: str = ''
    version: str = '1.0.0'
    # What does not shape the output bytes (and so is not part of the run id):
    max_error_ratio: float = 0.01
    reads_in_flight: int = 32     # Image reads a worker thread keeps going (Cloud Storage).
    overwrite: bool = False
    lock_token: str = ''          # The output lock this run holds (see output_folder.py).
    release_lock: bool = False    # The job itself releases the lock (the launcher does not wait).
    resuming: bool = False        # An earlier attempt left work in temp_dir.

    @functools.cached_property
    def run_id(self) -> str:
        """Fingerprint of every setting that shapes the output (see resume.py)."""
        return fingerprint(LAYOUT_VERSION, self.source, self.dataset_name, self.splits, self.image,
                           self.labels, self.num_shards, self.target_shard_mb,
                           self.skip_duplicates, tuple(f.name for f in self.output_formats),
                           self.description,
                           self.version)

    @property
    def temp_dir(self) -> str:
        return temp_dir(self.output_dir, self.run_id)

"""ConversionSettings: what the workers need to know about a run, resolved once from the flags."""
import dataclasses
import functools

from pipeline.io.fileio import DEFAULT_MAX_INPUT
from pipeline.output.output_folder import temp_dir
from pipeline.output.shard_formats import TFRECORD, ShardFormat
from transforms.images import ImageOptions
from transforms.resume import LAYOUT_VERSION, fingerprint


def _per_run(default):
    """A setting that does not shape the bytes a run writes, so not part of its run id."""
    return dataclasses.field(default=default, metadata={'per_run': True})


@dataclasses.dataclass(frozen=True)
class LabelSettings:
    """Where label ids come from; see labels.resolve_labels for the precedence."""
    text_label_map: tuple[tuple[str, int], ...] | None = None
    label_names: tuple[str, ...] | None = None   # From --labels_file, in id order.
    num_labels: int | None = None
    label_offset: int = 0
    names_origin: str = _per_run('')             # Where the map or names came from, for errors.


@dataclasses.dataclass(frozen=True)
class ConversionSettings:
    """The settings of a run. Those that shape the bytes written (records, shards, their names)
    come first and make the run id; the rest are per run (_per_run)."""
    dataset_name: str
    splits: tuple[str, ...]
    source: str = ''              # What the input is: its folder, CSV files or config.
    image: ImageOptions = ImageOptions()
    labels: LabelSettings = LabelSettings()
    num_shards: int = 0
    target_shard_mb: float = 128.0
    skip_duplicates: bool = False
    output_formats: tuple[ShardFormat, ...] = (TFRECORD,)   # The first is the primary one.
    leakage: str = 'report'       # leakage.ACTIONS: what near-duplicates across splits do
    dali_index: bool = False      # A DALI index beside each TFRecord shard (dali_index.py).
    # Per run: where the dataset goes, the text of its metadata, and how this run goes about it.
    output_dir: str = _per_run('')
    description: str = _per_run('')      # Stored in dataset_info.json only.
    version: str = _per_run('1.0.0')     # Stored in dataset_info.json only.
    max_error_ratio: float = _per_run(0.01)
    reads_in_flight: int = _per_run(32)  # Image reads a worker thread keeps going (Cloud Storage).
    # The most bytes read for one input (--max_input_mb); a chunk's fingerprint covers it.
    max_input_bytes: int = _per_run(DEFAULT_MAX_INPUT)
    overwrite: bool = _per_run(False)
    lock_token: str = _per_run('')       # The output lock this run holds (see output_folder.py).
    release_lock: bool = _per_run(False)  # The job releases the lock (the launcher does not wait).
    resuming: bool = _per_run(False)     # An earlier attempt left work in temp_dir.

    @functools.cached_property
    def run_id(self) -> str:
        """Fingerprint of exactly the settings that shape the output (see resume.py)."""
        return fingerprint(LAYOUT_VERSION, *(_shaping(getattr(self, f.name))
                                             for f in dataclasses.fields(self)
                                             if not f.metadata.get('per_run')))

    @property
    def hashed(self) -> bool:
        """Whether images get perceptual hashes and are checked for leakage (not --leakage=off)."""
        return self.leakage != 'off'

    @property
    def work_id(self) -> str:
        """What fingerprints a chunk's work besides its inputs: the run id and the per-run bound
        on what is read for one input, so work done under another bound is done again."""
        return fingerprint(self.run_id, self.max_input_bytes)

    @property
    def temp_dir(self) -> str:
        return temp_dir(self.output_dir, self.run_id)


def _shaping(value):
    """What of a setting's value shapes the output: formats by name, nested settings without
    their per-run fields."""
    if dataclasses.is_dataclass(value):
        return tuple((f.name, _shaping(getattr(value, f.name))) for f in dataclasses.fields(value)
                     if not f.metadata.get('per_run'))
    if isinstance(value, tuple) and value and isinstance(value[0], ShardFormat):
        return tuple(f.name for f in value)
    return value

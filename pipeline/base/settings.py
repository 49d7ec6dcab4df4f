"""The settings of a run, resolved once from its flags (pipeline/run_options.py) and handed to
every stage: how images are normalised, where label ids come from, and the run as a whole."""
import dataclasses
import enum
import functools

from pipeline.base.choices import DamagedAction, LeakageAction
from pipeline.base.fingerprints import LAYOUT_VERSION, fingerprint
from pipeline.io.fileio import DEFAULT_MAX_INPUT, join

TEMP_PREFIX = '.tmp-'   # A run's temporary folder in its output: TEMP_PREFIX + run id.


def _per_run(default):
    """A setting that does not shape the bytes a run writes, so not part of its run id."""
    return dataclasses.field(default=default, metadata={'per_run': True})


@dataclasses.dataclass(frozen=True)
class ImageOptions:
    """How images are normalised; every field is a flag of the same name."""
    jpeg_quality: int = 95
    reencode: bool = False
    apply_exif_orientation: bool = True
    max_pixels: int = 0
    max_side: int = 0
    max_image_pixels: int = 89_478_485
    damaged_images: DamagedAction = DamagedAction.SKIP


FEW_ERRORS = 5   # Inputs of a small split that may fail where --max_error_ratio is left out.
MAX_LABEL_ID = 1_000_000   # Label ids are 0..N-1 below this: a name is made for each id.


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
    output_formats: tuple[str, ...] = ('tfrecord',)   # Shard format names; the first is primary.
    leakage: LeakageAction = LeakageAction.REPORT
    dali_index: bool = False      # A DALI index beside each TFRecord shard (dali_index.py).
    # Per run: where the dataset goes, the text of its metadata, and how this run goes about it.
    output_dir: str = _per_run('')
    description: str = _per_run('')      # Stored in dataset_info.json only.
    version: str = _per_run('1.0.0')     # Stored in dataset_info.json only.
    max_error_ratio: float = _per_run(0.01)
    few_errors: int = _per_run(0)        # Inputs a small split may always fail (commit.py).
    reads_in_flight: int = _per_run(32)  # Image reads a worker thread keeps going (Cloud Storage).
    # The most bytes read for one input (--max_input_mb); a chunk's fingerprint covers it.
    max_input_bytes: int = _per_run(DEFAULT_MAX_INPUT)
    overwrite: bool = _per_run(False)
    lock_token: str = _per_run('')       # The output lock this run holds (see output/folder.py).
    release_lock: bool = _per_run(False)  # The job releases the lock (the launcher does not wait).
    resuming: bool = _per_run(False)     # An earlier attempt left work in temp_dir.
    workers: int = _per_run(0)           # Local worker processes, which tasks are dealt over.
    # What seals the sidecars of this run's work (pipeline/base/resume_key.py); never shown.
    resume_key: bytes = dataclasses.field(default=b'', repr=False, metadata={'per_run': True})

    @functools.cached_property
    def run_id(self) -> str:
        """Fingerprint of exactly the settings that shape the output (see resume.py)."""
        return fingerprint(LAYOUT_VERSION, *(_shaping(getattr(self, f.name))
                                             for f in dataclasses.fields(self)
                                             if not f.metadata.get('per_run')))

    @property
    def hashed(self) -> bool:
        """Whether images get perceptual hashes and are checked for leakage (not --leakage=off)."""
        return self.leakage != LeakageAction.OFF

    @property
    def work_id(self) -> str:
        """What fingerprints a chunk's work besides its inputs: the run id and the per-run bound
        on what is read for one input, so work done under another bound is done again."""
        return fingerprint(self.run_id, self.max_input_bytes)

    @property
    def temp_dir(self) -> str:
        """This run's own folder in the output (its protocol: pipeline/output/folder.py)."""
        return join(self.output_dir.rstrip('/'), TEMP_PREFIX + self.run_id)


def _shaping(value):
    """What of a setting's value shapes the output: nested settings without their per-run fields,
    choices by their text."""
    if dataclasses.is_dataclass(value):
        return tuple((f.name, _shaping(getattr(value, f.name))) for f in dataclasses.fields(value)
                     if not f.metadata.get('per_run'))
    if isinstance(value, enum.Enum):
        return value.value
    return value

"""ConversionSettings: what the workers need to know about a run, resolved once from the flags."""
import dataclasses

from transforms.images import ImageOptions

SPLITS = ('train', 'validation', 'test')


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
    temp_dir: str
    dataset_name: str
    splits: tuple[str, ...]
    image: ImageOptions = ImageOptions()
    labels: LabelSettings = LabelSettings()
    num_shards: int = 0
    target_shard_mb: float = 128.0
    max_error_ratio: float = 0.01
    skip_duplicates: bool = False
    description: str = ''
    version: str = '1.0.0'

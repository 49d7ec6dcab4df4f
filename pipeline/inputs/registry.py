"""The input kinds a run may be given, in the order their flags are listed: the built-in ones and
any registered from outside the product (an InputKind object, pipeline/inputs/kinds.py)."""
from pipeline.inputs.csv_files import CSV
from pipeline.inputs.folder_layout import FOLDER
from pipeline.inputs.generator import CONFIG
from pipeline.inputs.kinds import InputKind
from pipeline.inputs.parquet_files import PARQUET_KIND
from pipeline.inputs.webdataset_shards import WEBDATASET

_KINDS: list[InputKind] = [FOLDER, PARQUET_KIND, CSV, CONFIG, WEBDATASET]


def register(kind: InputKind) -> InputKind:
    """Adds an input kind (its flags, sources and paths) to every run started after this call."""
    _KINDS.append(kind)
    return kind


def kinds() -> tuple[InputKind, ...]:
    return tuple(_KINDS)


def input_paths(opts) -> list[str]:
    """Every file and folder the input kinds' flags name (those set): what a job's workers read."""
    return [path for kind in _KINDS for path in kind.paths(opts) if path]

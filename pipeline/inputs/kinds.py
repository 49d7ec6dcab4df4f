"""The seam for input kinds: an InputKind object per kind of input (a folder layout, CSV files,
a config class, or one registered from outside, pipeline/inputs/registry.py), which the options,
the sources and the job loop over. A kind owns its flags, says whether a run gives it, which paths
it reads and what Source it describes: the splits, labels and partitions. Each Partition is
listed on a worker (transforms/listing.py) into ExampleRefs.
"""
import dataclasses
import os
import re
from typing import Callable, Iterator

from pipeline.errors import DatasetError
from pipeline.inputs import archives, folders
from pipeline.base.refs import ExampleRef
from pipeline.io import fileio
from pipeline.base.settings import LabelSettings


class Partition:
    """A piece of input that one worker lists."""

    sizes_known = False   # Whether listing gives every input's size (else it is measured).
    # Whether listing it mostly waits on storage and its refs hold no image bytes (a folder's
    # listing, a CSV's byte range): such partitions are listed several at once.
    listed_together = False

    def split_further(self) -> list['Partition']:
        return [self]

    def examples(self) -> Iterator[ExampleRef]:
        raise NotImplementedError


@dataclasses.dataclass
class Source:
    partitions: list[Partition]
    splits: tuple[str, ...]
    labels: LabelSettings
    name: str = 'dataset'
    description: str = ''
    version: str = '1.0.0'
    # What the input is (part of the run id): its folder, CSVs, shards (real_location) or config.
    identity: str = ''


class InputKind:
    """One kind of input. `usage` names it in the line that asks for one input (`--csv_<split>`),
    `given_as` in the list of what was given (`--csv_*`). Kinds that `combine` may be given
    together, each for other splits (a folder layout with CSVs for splits it does not hold)."""

    usage = ''
    given_as = ''
    combines = False
    # The Flex Template console's text for its flags: name -> (label, paramType, regexes)
    # (pipeline/tools/template_metadata.py); a flag not named here is labelled by its help.
    template: dict[str, tuple[str, str, list[str]]] = {}

    def add_flags(self, flag: Callable[..., None]) -> None:
        """Adds its flags: flag(name, **argparse keywords)."""

    def given(self, opts, config) -> bool:
        """Whether the options (or a config object passed to the job API) give this input."""
        raise NotImplementedError

    def check(self, opts) -> None:
        """Checks its flags without I/O (pipeline/launch.py validates every launch through it):
        a DatasetError naming the flag."""

    def paths(self, opts) -> list[str]:
        """The files and folders it reads, for the bucket and credential checks."""
        return []

    def root(self, opts) -> str | None:
        """The folder an output folder must not be inside, if any."""
        return None

    def split_flag(self, split: str) -> str:
        """The flag that gives `split`, to name it when two kinds give the same split."""
        return self.given_as

    def source(self, opts, labels: LabelSettings, config, alone: bool) -> 'Source':
        """The Source it describes; `alone`: no other kind gives splits beside it."""
        raise NotImplementedError


def path_ref(split: str, path: str, label: str | int, size: int | None, extras: tuple,
             name: str | None = None) -> ExampleRef:
    """The ref of an image a worker reads from `path`, which may pass through archives
    (`val.tar/a.JPEG`): then its key names the archive as a folder (`val/a.JPEG`)."""
    member = folders.locate(path) if any(map(archives.suffix, path.split('/')[:-1])) else None
    if member is None:
        return ExampleRef(split, path, path, name or fileio.basename(path), label, size,
                          extras=extras)
    if member.error is not None:
        return ExampleRef(split, member.key, path, name or member.name, label, extras=extras,
                          problem=member.error)   # One row, one input: its loss is counted.
    return ExampleRef(split, member.key, path, name or member.name, label, member.size,
                      extras=extras, mtime=member.mtime, member=member.member)


def real_location(path: str) -> str:
    """The one spelling of an input's path, which its records' keys and image/source and the run
    id hold, so that the same input however its path is spelled is the same dataset. A local
    path: absolute, its folders' links followed (`in`, `./in/`, `/data/in` and a link to it are
    one), a file keeping its name (its suffix says what it is: `train.tar`, `x.zip/sub`). A gs://
    path: without a trailing slash or a doubled one."""
    if fileio.is_gcs(path):
        return 'gs://' + re.sub('/{2,}', '/', path[len('gs://'):]).rstrip('/')
    path = path.rstrip('/') or '/'
    real = os.path.realpath(path)
    if os.path.isdir(real):
        return real
    head, name = os.path.split(path)
    return os.path.join(real_location(head or '.'), name)


def check_regular(path: str, flag: str) -> None:
    """A DatasetError naming `flag` when `path` is not a regular file (a pipe, a link, a device)."""
    why = fileio.not_regular(path)
    if why:
        raise DatasetError(f'{flag} {path}: {why}')

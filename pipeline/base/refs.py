"""ExampleRef: one input example as listing finds it, before its image is read.

Refs are small (a path, a label, a size), so they are what the pipeline moves between workers;
image bytes travel only for examples that exist in memory alone (the images of a group of inputs
read together, a parquet row group, are written into a blob first: transforms/grouped_reads.py).
"""
import dataclasses
import hashlib
from typing import Any

from pipeline.base import pickling


@pickling.values_only
@dataclasses.dataclass(frozen=True)
class ExampleRef:
    split: str
    key: str              # Unique within a split; decides shard and order (see sharding.py).
    source: str           # Path or URI the image is read from ('' for in-memory images).
    filename: str         # Base name stored as image/filename.
    label: str | int | None
    size: int | None = None          # Bytes of the input, when known.
    data: bytes | None = None        # The image itself, for in-memory examples only.
    extras: tuple[tuple[str, Any], ...] = ()  # Extra features, sorted by name.
    problem: str | None = None       # Why this input cannot become a record, if known already.
    mtime: float | None = None       # Modification time of the input, when listing gives it.
    ignored: bool = False            # A hidden file: counted, never converted.
    member: Any = None               # The archive member (archives.Member) the image is in.
    group: Any = None    # What reads its bytes with those of others (parquet_files.RowGroupRead).

    @property
    def location(self) -> Any:
        """What the image is read from: its archive member, else its path."""
        return self.member or self.source

    @property
    def key_hash(self) -> int:
        return key_hash(self.key)


def listing_hash(ref: ExampleRef) -> int:
    """A 64-bit hash of what listing knows of an input: key, size (when known) and label. Summed
    over a split, it tells a rerun whether the input changed (pipeline/job.py)."""
    return key_hash(repr((ref.key, ref.size, ref.label)))


def key_hash(key: str) -> int:
    """A stable 64-bit hash of an example key (the same on every machine and run)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), 'big')

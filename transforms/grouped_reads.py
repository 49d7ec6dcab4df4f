"""Inputs that can only be read together, read once per group and written into a blob their
chunks read by byte range.

The rows of a parquet row group (pipeline/inputs/parquet_files.py) can only be read in order,
and the shard plan scatters them over every chunk, so a chunk cannot read its rows itself without
reading each row group again. Instead the worker that lists a row group (transforms/listing.py)
reads its images once, in row order, into one blob in the run's temporary folder
(pipeline/io/image_blobs.py, beside the output), and each ref goes on as an archive member whose
archive is the blob: its chunk reads its bytes by one ranged read, as it reads an uncompressed
tar's members. So no image crosses the runner, and a worker holds a few rows of a group at a time
plus the group's refs. A blob is written under a temporary name and moved into place, and its
name is a fingerprint of the rows it holds and their file, so a rerun after a kill reuses a
complete one whose images match its digest instead of reading the group again.
"""
import dataclasses
import itertools
import logging
from typing import Iterable, Iterator

from pipeline import faults
from pipeline.inputs import archives
from pipeline.base.refs import ExampleRef
from pipeline.io import fileio, image_blobs
from pipeline.output import output_folder
from pipeline.base.fingerprints import fingerprint

LOG = logging.getLogger('image_tfrecords')


def read_into_blobs(refs: Iterable[ExampleRef], temp_dir: str,
                    resuming: bool) -> Iterator[ExampleRef]:
    """`refs`, each that had a `group` now with its image as a member of its group's blob in
    `temp_dir` (or the reason it has none) and no group: the others as they come, then each
    group's. `resuming`: an earlier attempt may have left blobs to reuse."""
    by_group: dict[str, list[ExampleRef]] = {}
    for ref in refs:
        if ref.group is None:
            yield ref
        else:
            by_group.setdefault(ref.group.key, []).append(ref)
    for members in by_group.values():
        yield from _read_group(members, temp_dir, resuming)


def _read_group(refs: list[ExampleRef], temp_dir: str, resuming: bool) -> Iterator[ExampleRef]:
    """The refs of one group, read from its blob (written now, or kept by an earlier attempt)."""
    read = refs[0].group
    refs = read.in_order(refs)
    path = output_folder.group_path(temp_dir, fingerprint(read, refs[0].mtime,
                                                          [r.key for r in refs]))
    found = image_blobs.read_index(path, len(refs)) if resuming else None
    if found is None:
        if resuming and fileio.exists(path):
            LOG.warning('reading row groups %s again: its blob %s differs from its record '
                        '(digest)', read.key, path)
        found = image_blobs.write(path, read.images(refs))
        faults.crash_point('group', counted=True)
    size, windows = found
    blob = archives.Archive(path, path, size, None, 0, size)
    for ref, window in zip(refs, windows, strict=True):
        if window is None:
            yield read.without_bytes(ref)
        else:
            yield dataclasses.replace(ref, group=None, size=window[1],
                                      member=archives.Member(blob, ref.key, *window))


def read_grouped(refs: Iterable[ExampleRef]) -> list[ExampleRef]:
    """`refs` with their groups read, in one process (a sample timed while planning)."""
    refs = list(refs)
    out = [ref for ref in refs if ref.group is None]
    grouped = sorted((ref for ref in refs if ref.group is not None), key=lambda r: r.group.key)
    for _, members in itertools.groupby(grouped, key=lambda r: r.group.key):
        members = list(members)
        out.extend(members[0].group.read(members))
    return out

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

The members of a gzip-compressed tar (pipeline/inputs/gzip_pass.py) are such a group too: the
worker that lists the archive decompresses it once more, in one pass, writing the bytes of the
members listed into a blob, and the chunks then read them by byte range on every worker at once,
as an uncompressed tar's, instead of each chunk decompressing the archive up to its last member.
The blob costs the members' bytes uncompressed on the run's temporary disk until the run ends. A
member whose bytes cannot be read (damage) keeps its place in the archive, and its chunk finds
why in a pass of its own.
"""
import dataclasses
import itertools
import logging
from typing import Iterable, Iterator

from pipeline import faults
from pipeline.inputs import archives, gzip_pass
from pipeline.base.refs import ExampleRef
from pipeline.io import fileio, image_blobs
from pipeline.output import layout
from pipeline.base.fingerprints import fingerprint

LOG = logging.getLogger('image_tfrecords')


def read_into_blobs(refs: Iterable[ExampleRef], temp_dir: str, resuming: bool,
                    key: bytes) -> Iterator[ExampleRef]:
    """`refs`, each that had a `group` now with its image as a member of its group's blob in
    `temp_dir` (or the reason it has none) and no group: the others as they come, then each
    group's. `resuming`: an earlier attempt may have left blobs to reuse; `key`: the run's resume
    key, which seals the blobs (image_blobs.py)."""
    by_group: dict[str, list[ExampleRef]] = {}
    by_archive: dict[archives.Archive, list[ExampleRef]] = {}
    for ref in refs:
        if streamed(ref):
            by_archive.setdefault(ref.member.archive, []).append(ref)
        elif ref.group is None:
            yield ref
        else:
            by_group.setdefault(ref.group.key, []).append(ref)
    for members in by_group.values():
        yield from _read_group(members, temp_dir, resuming, key)
    for members in by_archive.values():
        yield from _unpack(members, temp_dir, resuming, key)


def streamed(ref: ExampleRef) -> bool:
    """Whether it is a readable member of a gzip tar, whose bytes only a pass over it reads."""
    return ref.member is not None and ref.member.archive.streamed and ref.problem is None


def _read_group(refs: list[ExampleRef], temp_dir: str, resuming: bool,
                key: bytes) -> Iterator[ExampleRef]:
    """The refs of one group, read from its blob (written now, or kept by an earlier attempt)."""
    read = refs[0].group
    refs = read.in_order(refs)
    path = layout.group_path(temp_dir, fingerprint(read, refs[0].mtime,
                                                   [r.key for r in refs]))
    found = _kept(path, len(refs), resuming, f'row groups {read.key}', key)
    if found is None:
        found = image_blobs.write(path, read.images(refs), key)
        faults.crash_point('group', counted=True)
    size, windows = found
    blob = archives.Archive(path, path, size, None, 0, size)
    for ref, window in zip(refs, windows, strict=True):
        if window is None:
            yield read.without_bytes(ref)
        else:
            yield dataclasses.replace(ref, group=None, size=window[1],
                                      member=archives.Member(blob, ref.key, *window))


def _unpack(refs: list[ExampleRef], temp_dir: str, resuming: bool,
            key: bytes) -> Iterator[ExampleRef]:
    """The refs of members of one gzip tar, read from their blob (written now in one pass over
    the archive, or kept by an earlier attempt); one that cannot be read stays as it was."""
    refs = sorted(refs, key=lambda r: r.member.index)
    archive = refs[0].member.archive
    path = layout.group_path(temp_dir, fingerprint(
        archive.identity, [(r.member.name, r.member.index, r.member.size) for r in refs]))
    found = _kept(path, len(refs), resuming, f'the members of {archive.path}', key)
    if found is None:
        found = image_blobs.write(path, gzip_pass.in_order([r.member for r in refs]), key)
        faults.crash_point('group', counted=True)
    size, windows = found
    blob = archives.Archive(path, path, size, None, 0, size)
    for ref, window in zip(refs, windows, strict=True):
        yield ref if window is None else dataclasses.replace(
            ref, member=archives.Member(blob, ref.member.name, *window))


def _kept(path: str, count: int, resuming: bool, what: str,
          key: bytes) -> tuple[int, list[image_blobs.Window | None]] | None:
    """The index of the blob an earlier attempt left at `path` if it matches its digest, else
    None (said in a line when a blob is there but differs)."""
    found = image_blobs.read_index(path, count, key) if resuming else None
    if found is None and resuming and fileio.exists(path):
        LOG.warning('reading %s again: its blob %s differs from its record (digest)', what, path)
    return found


def read_grouped(refs: Iterable[ExampleRef]) -> list[ExampleRef]:
    """`refs` with their groups and gzip tar members read, in one process (a sample timed
    while planning): one pass over each gzip tar, ending at its last member among them."""
    refs = list(refs)
    out = [ref for ref in refs if ref.group is None and not streamed(ref)]
    found = gzip_pass.read_streamed(ref.member for ref in refs if streamed(ref))
    out.extend(_in_memory(ref, found.get((ref.member.name, ref.member.index),
                                         gzip_pass.gone(ref.member)))
               for ref in refs if streamed(ref))
    grouped = sorted((ref for ref in refs if ref.group is not None), key=lambda r: r.group.key)
    for _, members in itertools.groupby(grouped, key=lambda r: r.group.key):
        members = list(members)
        out.extend(members[0].group.read(members))
    return out


def _in_memory(ref: ExampleRef, data: bytes | str) -> ExampleRef:
    """A gzip tar member's ref with its bytes in memory, or why it has none."""
    if isinstance(data, str):
        return dataclasses.replace(ref, problem=data)
    return dataclasses.replace(ref, member=None, data=data)

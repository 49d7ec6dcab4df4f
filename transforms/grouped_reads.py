"""ReadGroupedInputs: inputs that can only be read together, read once per group and written
into a blob their chunks read by byte range.

The rows of a parquet row group (pipeline/inputs/parquet_files.py) can only be read in order,
and the shard plan scatters them over every chunk, so a chunk cannot read its rows itself without
reading each row group again. Instead, once chunks are assigned, the refs of a row group
(`ref.group`) are brought together, one worker reads the group once, writes its images in row
order into one blob in the run's temporary folder (pipeline/io/image_blobs.py, beside the
output), and each ref goes on to its chunk as an archive member whose archive is the blob: the
chunk reads its bytes by one ranged read, as it reads an uncompressed tar's members. So no image
crosses a shuffle (a local run's launcher holds every shuffle), and a worker holds a few rows of
a group at a time plus the group's refs. A blob is written under a temporary name and moved into
place, and its name is a fingerprint of the rows it holds and their file, so a rerun after a kill
reuses a complete one instead of reading the group again.
"""
import dataclasses
import itertools
from typing import Iterable, Iterator

import apache_beam as beam

from pipeline import faults
from pipeline.inputs import archives
from pipeline.base.refs import ExampleRef
from pipeline.io import image_blobs
from pipeline.output import output_folder
from pipeline.base.fingerprints import fingerprint


class ReadGroupedInputs(beam.PTransform):
    """(chunk key, [refs]) -> the same, each ref that had a `group` now with its image as a
    member of its group's blob in `temp_dir` (or the reason it has none) and no group, in a list
    of its own. `resuming`: an earlier attempt may have left blobs to reuse."""

    def __init__(self, temp_dir: str, resuming: bool):
        super().__init__()
        self._temp_dir, self._resuming = temp_dir, resuming

    def expand(self, chunks: beam.PCollection) -> beam.PCollection:
        split = chunks | 'Grouped Or Not' >> beam.FlatMap(_by_group).with_outputs(
            'grouped', main='alone')
        read = (split.grouped
                | 'Group By Read' >> beam.GroupByKey()
                | 'Read Groups' >> beam.FlatMap(_read_group, self._temp_dir, self._resuming))
        return (split.alone, read) | 'Join Reads' >> beam.Flatten()


def _by_group(chunk: tuple) -> Iterator:
    """(chunk key, refs) -> (chunk key, refs without a group), and on 'grouped' (group key,
    (chunk key, ref)) for each ref with one."""
    key, refs = chunk
    alone = [ref for ref in refs if ref.group is None]
    if alone:
        yield key, alone
    for ref in refs:
        if ref.group is not None:
            yield beam.pvalue.TaggedOutput('grouped', (ref.group.key, (key, ref)))


def _read_group(group: tuple, temp_dir: str, resuming: bool) -> Iterator[tuple]:
    """(group key, [(chunk key, ref)]) -> (chunk key, [ref read from the group's blob]) for
    each."""
    _, items = group
    chunk_of = {ref.key: chunk for chunk, ref in items}
    read = items[0][1].group
    refs = read.in_order([ref for _, ref in items])
    path = output_folder.group_path(temp_dir, fingerprint(read, refs[0].mtime,
                                                          [r.key for r in refs]))
    found = image_blobs.read_index(path, len(refs)) if resuming else None
    if found is None:
        found = image_blobs.write(path, read.images(refs))
        faults.crash_point('group', counted=True)
    size, windows = found
    blob = archives.Archive(path, path, size, None, 0, size)
    for ref, window in zip(refs, windows, strict=True):
        if window is not None:
            ref = dataclasses.replace(ref, group=None, size=window[1],
                                      member=archives.Member(blob, ref.key, *window))
        yield chunk_of[ref.key], [read.without_bytes(ref) if window is None else ref]


def read_grouped(refs: Iterable[ExampleRef]) -> list[ExampleRef]:
    """`refs` with their groups read, in one process (a sample timed while planning)."""
    refs = list(refs)
    out = [ref for ref in refs if ref.group is None]
    grouped = sorted((ref for ref in refs if ref.group is not None), key=lambda r: r.group.key)
    for _, members in itertools.groupby(grouped, key=lambda r: r.group.key):
        members = list(members)
        out.extend(members[0].group.read(members))
    return out

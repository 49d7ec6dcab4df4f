"""ReadGroupedInputs: the image bytes of inputs that can only be read together, added to their
refs on the way into chunks.

The rows of a parquet row group (pipeline/inputs/parquet_files.py) can only be read in order,
and the shard plan scatters them over every chunk, so a chunk cannot read its rows itself without
reading each row group again. Instead, once chunks are assigned, the refs of a row group
(`ref.group`) are brought together, one worker reads the group once and each ref goes on, with
its bytes, to its chunk: the images cross one shuffle, the one into chunks, and a worker holds a
few rows of a group at a time plus the group's refs.
"""
import itertools
from typing import Iterable, Iterator

import apache_beam as beam

from pipeline.inputs.refs import ExampleRef


class ReadGroupedInputs(beam.PTransform):
    """(chunk key, [refs]) -> the same, each ref that had a `group` now with its image bytes (or
    the reason it has none) and no group, in a list of its own."""

    def expand(self, chunks: beam.PCollection) -> beam.PCollection:
        split = chunks | 'Grouped Or Not' >> beam.FlatMap(_by_group).with_outputs(
            'grouped', main='alone')
        read = (split.grouped
                | 'Group By Read' >> beam.GroupByKey()
                | 'Read Groups' >> beam.FlatMap(_read_group))
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


def _read_group(group: tuple) -> Iterator[tuple]:
    """(group key, [(chunk key, ref)]) -> (chunk key, [ref with bytes]) for each."""
    _, items = group
    chunk_of = {ref.key: chunk for chunk, ref in items}
    refs = [ref for _, ref in items]
    for ref in refs[0].group.read(refs):
        yield chunk_of[ref.key], [ref]


def read_grouped(refs: Iterable[ExampleRef]) -> list[ExampleRef]:
    """`refs` with their groups read, in one process (a sample timed while planning)."""
    refs = list(refs)
    out = [ref for ref in refs if ref.group is None]
    grouped = sorted((ref for ref in refs if ref.group is not None), key=lambda r: r.group.key)
    for _, members in itertools.groupby(grouped, key=lambda r: r.group.key):
        members = list(members)
        out.extend(members[0].group.read(members))
    return out

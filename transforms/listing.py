"""ListExamples: the input's partitions listed on the workers into ExampleRefs.

A source is described by a few partitions made on the launcher without listing anything big
(pipeline/inputs/: a folder split splits further into one partition per class folder or class
archive, a CSV into byte ranges, a user config into the partitions it offers). Each partition is
listed on a worker.
"""
import dataclasses
from typing import Iterator

import apache_beam as beam

from pipeline.inputs.kinds import Partition
from pipeline.inputs.refs import ExampleRef
from pipeline.io import fileio


SIZE_SAMPLE = 64   # With measure_sizes, one in this many inputs of unknown size is measured.


class ListExamples(beam.PTransform):
    """Partitions -> every ExampleRef the input holds (ignored ones included), listed on the
    workers. With `measure_sizes`, a deterministic sample (by key hash, one in SIZE_SAMPLE) of
    the inputs whose size the listing did not give is measured, to estimate a split's bytes
    without a metadata request per input."""

    def __init__(self, partitions: list[Partition], measure_sizes: bool):
        super().__init__()
        self._partitions, self._measure_sizes = partitions, measure_sizes

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        refs = (pbegin
                | 'Create Partitions' >> beam.Create(self._partitions)
                | 'Split Partitions' >> beam.FlatMap(_split_further)
                | 'Spread Partitions' >> beam.Reshuffle()
                | 'List Partitions' >> beam.FlatMap(_examples))
        if not self._measure_sizes:
            return refs
        return (refs
                | 'Spread Examples' >> beam.Reshuffle()
                | 'Measure Sizes' >> beam.Map(_measure_size))


def _split_further(partition: Partition) -> list[Partition]:
    return partition.split_further()


def _examples(partition: Partition) -> Iterator[ExampleRef]:
    return partition.examples()


def _measure_size(ref: ExampleRef) -> ExampleRef:
    if (ref.size is not None or ref.problem is not None or ref.ignored or not ref.source
            or ref.key_hash % SIZE_SAMPLE):
        return ref
    found = fileio.match(ref.source)
    return dataclasses.replace(ref, size=found[0].size_in_bytes if found else 0,
                               mtime=found[0].last_updated_in_seconds if found else None)


def is_input(ref: ExampleRef) -> bool:
    """Whether a listed ref is an input (to convert or report), not an ignored hidden file."""
    return not ref.ignored

"""ListExamples: the input's partitions listed on the workers into ExampleRefs.

A source is described by a few partitions made on the launcher without listing anything big
(pipeline/inputs/: a folder split splits further into one partition per class folder or class
archive, a CSV into byte ranges, a user config into the partitions it offers). Each partition is
listed on a worker.
"""
import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterator

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipeline.inputs.kinds import Partition
from pipeline.inputs.refs import ExampleRef
from pipeline.io import fileio


SIZE_SAMPLE = 64   # With measure_sizes, one in this many inputs of unknown size is measured.
LISTED_AT_ONCE = 16   # Partitions listed together (Partition.listed_together) at a time.


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
                | 'List Partitions' >> beam.ParDo(ListPartitions()))
        if not self._measure_sizes:
            return refs
        return (refs
                | 'Spread Examples' >> beam.Reshuffle()
                | 'Measure Sizes' >> beam.Map(_measure_size))


def _split_further(partition: Partition) -> list[Partition]:
    return partition.split_further()


class ListPartitions(beam.DoFn):
    """Partition -> its ExampleRefs. Those listed together (Partition.listed_together: class
    folders, CSV byte ranges) are listed up to LISTED_AT_ONCE at a time, each in a thread, so
    a worker waits on one round trip to storage for many folders, not on one per folder."""

    def setup(self) -> None:
        self._threads = ThreadPoolExecutor(LISTED_AT_ONCE)

    def start_bundle(self) -> None:
        self._listing: list[Future] = []

    def process(self, partition: Partition) -> Iterator[ExampleRef]:
        if not partition.listed_together:
            yield from partition.examples()
            return
        self._listing.append(self._threads.submit(_listed, partition))
        while len(self._listing) > LISTED_AT_ONCE:
            yield from self._listing.pop(0).result()

    def finish_bundle(self) -> Iterator:
        listing, self._listing = self._listing, []
        for future in listing:
            for ref in future.result():
                yield GlobalWindows.windowed_value(ref)

    def teardown(self) -> None:
        self._threads.shutdown(cancel_futures=True)


def _listed(partition: Partition) -> list[ExampleRef]:
    return list(partition.examples())


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

"""ListExamples: the input's partitions listed on the workers into ExampleRefs.

A source is described by a few partitions made on the launcher without listing anything big
(pipeline/inputs/: a folder split splits further into one partition per class folder or class
archive, a CSV into byte ranges, a user config into the partitions it offers). Each partition is
listed on a worker.
"""
import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable, Iterator

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipeline.inputs.kinds import Partition
from pipeline.base.refs import ExampleRef
from pipeline.io import fileio


SIZE_SAMPLE = 64   # With measure_sizes, one in this many inputs of unknown size is measured.
AT_ONCE = 16   # Partitions split or listed at a time, each in a thread.


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
                | 'Split Partitions' >> beam.ParDo(InThreads(_split_further, _always))
                | 'Spread Partitions' >> beam.Reshuffle()
                | 'List Partitions' >> beam.ParDo(InThreads(_examples, _listed_together)))
        if not self._measure_sizes:
            return refs
        return (refs
                | 'Spread Examples' >> beam.Reshuffle()
                | 'Measure Sizes' >> beam.Map(_measure_size))


def _split_further(partition: Partition) -> list[Partition]:
    return partition.split_further()   # A split folder's listing, a CSV's pass for its ranges.


def _always(partition: Partition) -> bool:
    return True


def _examples(partition: Partition) -> Iterator[ExampleRef]:
    return partition.examples()


def _listed_together(partition: Partition) -> bool:
    return partition.listed_together


class InThreads(beam.DoFn):
    """Partition -> the elements of `function(partition)`. Where `together(partition)` (split
    folders, class folders, CSV byte ranges), up to AT_ONCE calls run at a time, each in a
    thread, so a worker waits on one round trip to storage for many partitions, not on one per
    partition; for others (a gzip tar read in one pass, say) the elements go on as they come."""

    def __init__(self, function: Callable[[Partition], Iterable],
                 together: Callable[[Partition], bool]):
        super().__init__()
        self._function, self._together = function, together

    def setup(self) -> None:
        self._threads = ThreadPoolExecutor(AT_ONCE)

    def start_bundle(self) -> None:
        self._running: list[Future] = []

    def process(self, partition: Partition) -> Iterator:
        if not self._together(partition):
            yield from self._function(partition)
            return
        self._running.append(self._threads.submit(_all, self._function, partition))
        while len(self._running) > AT_ONCE:
            yield from self._running.pop(0).result()

    def finish_bundle(self) -> Iterator:
        running, self._running = self._running, []
        for future in running:
            for element in future.result():
                yield GlobalWindows.windowed_value(element)

    def teardown(self) -> None:
        self._threads.shutdown(cancel_futures=True)


def _all(function: Callable[[Partition], Iterable], partition: Partition) -> list:
    return list(function(partition))


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

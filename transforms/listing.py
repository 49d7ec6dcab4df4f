"""ListExamples: the input's partitions listed on the workers, every input spilled into sorted
runs (pipeline/io/sorted_runs.py) by split and key hash, so that no input passes through the
runner.

A source is described by a few partitions made on the launcher without listing anything big
(pipeline/inputs/: a folder split splits further into one partition per class folder or class
archive, a CSV into byte ranges, a parquet file into its row groups, a user config into the
partitions it offers). Each partition is listed on a worker, and what the rest of the pipeline
needs of the listing leaves each bundle as one small Listed: the runs' descriptions, the facts
of its inputs (labels.py), per split the count, the sizes known and the top bits of every key
hash (the shard plan: sharding.py), and its share of the sample that times a conversion on this
machine (local_rate.py). The runner (a local run's in the launcher's memory) holds those, never
an input's ref, so the launcher's memory does not grow with the input.

Where the conversion follows, the images of inputs that can only be read together (a parquet
row group's) are read as their partition is listed, into a blob their refs then name
(grouped_reads.py); with `spill_to` None (a plan) no run is written and no image read.
"""
import collections
import dataclasses
import heapq
import itertools
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterable, Iterator

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindows

from pipeline import faults
from pipeline.base.refs import ExampleRef
from pipeline.inputs import ref_codec
from pipeline.inputs.kinds import Partition
from pipeline.io import fileio
from pipeline.output import layout
from pipeline.io.sorted_runs import Run, RunWriter, changed, read_range
from transforms import grouped_reads
from transforms.labels import DatasetFacts
from transforms.spread import Spread

SIZE_SAMPLE = 64   # With measure_sizes, one in this many inputs of unknown size is measured.
AT_ONCE = 16       # Partitions listed at a time, each in a thread.
TOP_BITS = 24      # Of each key hash, what the shard plan's histogram needs.
COUNT_EVERY = 0.5  # Seconds: a lister notes its count so far at most this often.


@dataclasses.dataclass
class Listed:
    """What one bundle of listing found (see the module docstring)."""
    runs: list[Run] = dataclasses.field(default_factory=list)
    facts: DatasetFacts = dataclasses.field(default_factory=DatasetFacts)
    sizes: dict = dataclasses.field(default_factory=dict)   # split -> [inputs, sized, bytes]
    tops: dict = dataclasses.field(default_factory=dict)    # split -> uint32 array of top bits
    sample: list = dataclasses.field(default_factory=list)  # Refs of the smallest key hashes.


class ListExamples(beam.PTransform):
    """Partitions -> a Listed per bundle of listing. `spill_to`: the folder of the runs (None:
    none are written, a plan); `measure_sizes`: a deterministic sample (by key hash, one in
    SIZE_SAMPLE) of the inputs whose size listing did not give is measured, to estimate a
    split's bytes; `groups_in`: the run's temporary folder, where grouped inputs are read into
    blobs (None: they are not read, a plan), reusing an earlier attempt's if `resuming` (blobs
    sealed under `key`, the run's resume key);
    `sample_size`: how many timeable refs of the smallest key hashes each Listed keeps."""

    def __init__(self, partitions: list[Partition], spill_to: str | None, measure_sizes: bool,
                 groups_in: str | None = None, resuming: bool = False, sample_size: int = 0,
                 key: bytes = b''):
        super().__init__()
        self._partitions = partitions
        self._lister = _ListPartitions(spill_to, measure_sizes, groups_in, resuming, sample_size,
                                       key)

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        return (pbegin
                | 'Once' >> beam.Impulse()
                | 'Split Partitions' >> beam.ParDo(_SplitPartitions(self._partitions))
                | 'Spread Partitions' >> Spread()
                | 'List Partitions' >> beam.ParDo(self._lister))


class _SplitPartitions(beam.DoFn):
    """The impulse -> the partitions the input's partitions split into (a split folder's class
    folders, a CSV's byte ranges), in their order, AT_ONCE at a time, each in a thread: a worker
    waits on one round trip to storage for many, not on one per partition."""

    def __init__(self, partitions: list[Partition]):
        self._partitions = partitions

    def setup(self) -> None:
        self._threads = ThreadPoolExecutor(AT_ONCE)

    def process(self, _: bytes) -> Iterator[Partition]:
        running: collections.deque[Future] = collections.deque()
        for partition in self._partitions:
            running.append(self._threads.submit(partition.split_further))
            while len(running) > AT_ONCE:
                yield from running.popleft().result()
        while running:
            yield from running.popleft().result()

    def teardown(self) -> None:
        self._threads.shutdown(cancel_futures=True)


class _ListPartitions(beam.DoFn):
    """Partition -> (at the end of a bundle) the bundle's Listed. Partitions listed mostly by
    waiting on storage (folders, CSV byte ranges, row groups) are listed AT_ONCE at a time, each
    in a thread; others (a gzip tar read in one pass) as their refs come."""

    def __init__(self, spill_to: str | None, measure_sizes: bool, groups_in: str | None,
                 resuming: bool, sample_size: int, key: bytes):
        self._spill_to, self._measure_sizes = spill_to, measure_sizes
        self._groups_in, self._resuming, self._sample_size = groups_in, resuming, sample_size
        self._key = key

    def setup(self) -> None:
        self._threads = ThreadPoolExecutor(AT_ONCE)

    def start_bundle(self) -> None:
        self._running: list[Future] = []
        self._bundle = _Bundle(RunWriter(self._spill_to) if self._spill_to else None,
                               self._sample_size)

    def process(self, partition: Partition) -> None:
        if not partition.listed_together:
            self._bundle.add_all(self._refs(partition))
            return
        self._running.append(self._threads.submit(lambda: list(self._refs(partition))))
        while len(self._running) > AT_ONCE:
            self._bundle.add_all(self._running.pop(0).result())

    def finish_bundle(self) -> Iterator:
        running, self._running = self._running, []
        for future in running:
            self._bundle.add_all(future.result())
        listed = self._bundle.done()
        if listed.runs:
            faults.crash_point('listed', counted=True)
        yield GlobalWindows.windowed_value(listed)

    def teardown(self) -> None:
        self._threads.shutdown(cancel_futures=True)

    def _refs(self, partition: Partition) -> Iterator[ExampleRef]:
        """A partition's refs, sizes measured and grouped inputs read as the flags ask."""
        refs = partition.examples()
        if self._measure_sizes:
            refs = map(_measure_size, refs)
        if self._groups_in:   # A conversion: its count shown while listing, its groups read.
            refs = grouped_reads.read_into_blobs(_counted(refs, self._groups_in),
                                                 self._groups_in, self._resuming, self._key)
        return refs


class _Bundle:
    """A bundle's Listed as it grows: refs spilled, facts, sizes and top bits, the sample."""

    def __init__(self, writer: RunWriter | None, sample_size: int):
        self._writer, self._sample_size = writer, sample_size
        self._listed = Listed()
        self._tops: dict[str, list[int]] = {}
        self._sample: list = []   # A heap of ((-key hash, split, key), n, ref): the smallest kept.
        self._order = itertools.count()

    def add_all(self, refs: Iterable[ExampleRef]) -> None:
        for ref in refs:
            self._add(ref)

    def _add(self, ref: ExampleRef) -> None:
        listed = self._listed
        listed.facts.add(ref)
        if ref.ignored:
            return
        key_hash = ref.key_hash
        sizes = listed.sizes.setdefault(ref.split, [0, 0, 0])
        sizes[0] += 1
        if ref.size is not None:
            sizes[1] += 1
            sizes[2] += ref.size
        self._tops.setdefault(ref.split, []).append(key_hash >> (64 - TOP_BITS))
        if self._writer is not None:
            self._writer.add(ref.split, key_hash, ref_codec.encode(ref))
        if self._sample_size and _timeable(ref):
            entry = ((-key_hash, ref.split, ref.key), next(self._order), ref)
            if len(self._sample) < self._sample_size:
                heapq.heappush(self._sample, entry)
            elif entry[0] > self._sample[0][0]:
                heapq.heapreplace(self._sample, entry)

    def done(self) -> Listed:
        listed = self._listed
        listed.runs = self._writer.close() if self._writer is not None else []
        listed.tops = {split: np.array(tops, dtype=np.uint32) for split, tops in self._tops.items()}
        listed.sample = [ref for _, _, ref in self._sample]
        return listed


def refs_of(runs: list[Run], split: str, lo: int, hi: int) -> Iterator[ExampleRef]:
    """The refs of `split` whose key hash lies in [lo, hi), from the listing's runs, in key hash
    order. A run is data (ref_codec.py): one whose ref does not decode, or decodes under
    another key, is a DatasetError naming it (sorted_runs.changed)."""
    for key, payload, path in read_range(runs, split, lo, hi):
        try:
            ref = ref_codec.decode(payload)
        except ref_codec.SpillError as exc:
            raise changed(path, f'a ref: {exc}') from None
        if ref.key_hash != key or ref.split != split:
            raise changed(path, 'a ref is filed under another key')
        yield ref


def _timeable(ref: ExampleRef) -> bool:
    """Whether a ref's conversion can be timed (not known to be bad)."""
    return ref.problem is None


def _measure_size(ref: ExampleRef) -> ExampleRef:
    if (ref.size is not None or ref.problem is not None or ref.ignored or not ref.source
            or ref.key_hash % SIZE_SAMPLE):
        return ref
    found = fileio.match(ref.source)
    return dataclasses.replace(ref, size=found[0].size_in_bytes if found else 0,
                               mtime=found[0].last_updated_in_seconds if found else None)


def merged_sample(listed: Iterable[Listed], size: int) -> list[ExampleRef]:
    """The `size` timeable refs of the smallest key hashes among every bundle's sample."""
    refs = [ref for one in listed for ref in one.sample]
    return sorted(refs, key=lambda r: (r.key_hash, r.split, r.key))[:size]


def _counted(refs: Iterable[ExampleRef], temp_dir: str) -> Iterator[ExampleRef]:
    """`refs` as they come, the count of those not ignored noted in the run's temporary folder
    for the live display (pipeline/progress.py): at most every COUNT_EVERY s, and at their end."""
    path = fileio.join(temp_dir, layout.LISTING, f'{uuid.uuid4().hex}.count')
    count, noted = 0, time.monotonic()
    for ref in refs:
        count += not ref.ignored
        if time.monotonic() - noted > COUNT_EVERY:
            fileio.write_bytes_atomic(path, str(count).encode())
            noted = time.monotonic()
        yield ref
    fileio.write_bytes_atomic(path, str(count).encode())

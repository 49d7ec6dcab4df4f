"""A deterministic sample of the inputs converted with the run's own per-image work: what its
records weigh (which sizes the shards) and, while planning on a local runner, how fast this
machine converts.

The sample is the SAMPLE_SIZE timeable inputs with the smallest key hashes (listing.py keeps
them), so the same input gives the same sample on any runner and worker count. It goes through
EncodeChunks' per-image work: read, decode and checks, perceptual hashes (unless
--leakage=off), re-encoding as the options ask, Example encoding, framing and writing, into a
temporary file that is then removed; nothing is counted in the run's metrics. The planning call
converts it on one worker (planning.py), timed or not alike. Per sampled input
it gives its bytes (when listing knows them) and its record's (framing included; an input that
cannot be converted weighs nothing), from which the shard plan estimates each split's output
(sharding.output_line). A record's bytes depend only on the input and the options, so the
conversion and its plan size the shards alike.

Timed (a plan on a local runner), the first WARM_UP images are converted untimed (codec and
client set-up); the rest are timed in one worker, in two halves, and the faster half gives the
rate (a moment of load from elsewhere slows one half, not the run): seconds of one worker per
image, its CPU seconds per image, and the CPU seconds the whole machine used per image
meanwhile (a local storage emulator's too), which bound what more workers can do. The worker
also gives what the plan's memory estimate starts from: its peak memory, what it shares with the
launcher, and the bytes a listed ref and a record's filed hashes take (`_memory`).
"""
import contextlib
import dataclasses
import os
import tempfile
import time

import numpy as np
from apache_beam.metrics.metricbase import Counter

from pipeline.inputs import ref_codec
from pipeline.io.sorted_runs import record_dtype
from pipeline.quality.pairing import BANDS, FILING, filings
from transforms import entries
from transforms.copies import COPY
from transforms.leakage import part_table
from transforms.grouped_reads import read_grouped
from transforms.listing import merged_sample
from transforms.labels import LabelMap
from pipeline.base.refs import ExampleRef
from pipeline.base.settings import ConversionSettings
from transforms.shard_results import ShardResult
from transforms.encode_chunks import EncodeChunks, StreamedMembers

SAMPLE_SIZE = 300
WARM_UP = 20


def measure_sample(listed: list, label_map: LabelMap, settings: ConversionSettings,
                   timed: bool = False) -> dict:
    """What listing found (a Listed per bundle, each with its share of the sample) -> one dict:
    'weighed', per sampled input [split, bytes in (None when unknown), bytes of its record (0
    when it cannot be converted)]; 'converted_by_run', whether the conversion converts the
    sample too (it does unless --num_shards is given); and with `timed` the rate: images timed,
    seconds, seconds per image (None when no input can be timed: none listed, or none that can
    be converted). The sampled members of a gzip archive are read in one pass over it before
    the timing starts, as the conversion reads them into a blob while listing
    (grouped_reads.py): the plan's own time holds that pass as the run's holds its own."""
    refs = merged_sample(listed, SAMPLE_SIZE)
    measured = (time_sample(refs, label_map, settings) if timed
                else {'weighed': weigh_sample(refs, label_map, settings)})
    return dict(measured, converted_by_run=not settings.num_shards)


def weigh_sample(refs: list[ExampleRef], label_map: LabelMap,
                 settings: ConversionSettings) -> list[list]:
    """What each ref weighed converted (_SampleConverter.weighed), untimed."""
    with _SampleConverter(settings, label_map) as converter:
        converter.convert(sorted(read_grouped(refs), key=_sample_key))
    return converter.weighed


def _sample_key(ref: ExampleRef) -> tuple[int, str, str]:
    return ref.key_hash, ref.split, ref.key


def _by_split(items: list, split_of) -> dict[str, list]:
    """`items` by split, splits in the order they first come: the order the sample converts in."""
    grouped: dict[str, list] = {}
    for item in items:
        grouped.setdefault(split_of(item), []).append(item)
    return grouped


class _Uncounted:
    """A metric counter that counts nothing: the sample is not part of the run's figures."""

    def inc(self, n: int = 1) -> None:
        pass


class _SampleEncoder(EncodeChunks):
    def setup(self) -> None:
        super().setup()
        for name, value in list(vars(self).items()):
            if isinstance(value, Counter):
                setattr(self, name, _Uncounted())


class _SampleConverter:
    """Converts refs into a temporary file with the run's per-image work, noting for each what
    went in and what came out (`weighed`: [split, bytes in or None, bytes of its record or 0],
    in the order converted)."""

    def __init__(self, settings: ConversionSettings, label_map: LabelMap):
        # Each record's size as written, as the DALI index keeps it; the records are the same.
        self._encoder = _SampleEncoder(dataclasses.replace(settings, dali_index=True))
        self._label_map = label_map
        self.weighed: list[list] = []
        self.records = self.filings = 0   # Records written; their filings for the leakage check.

    def __enter__(self) -> '_SampleConverter':
        self._encoder.setup()
        handle, self._path = tempfile.mkstemp(prefix='image-tfrecords-sample-', suffix='.tfrecord')
        os.close(handle)
        return self

    def __exit__(self, *_) -> None:
        self._encoder.teardown()
        for written in (self._path, *(entries.entry_path(self._path, kind)
                                      for kind in entries.KINDS)):
            with contextlib.suppress(FileNotFoundError):
                os.remove(written)

    def convert(self, refs: list[ExampleRef]) -> None:
        """Converts `refs`, a part file per split (in their order within it)."""
        none = StreamedMembers([], 0)   # No gzip members here.
        for split, of_split in _by_split(refs, lambda r: r.split).items():
            found = {'errors': [], 'damaged': []}
            result = self._encoder.encode(of_split, ShardResult(split, 0, self._path, 0),
                                          self._label_map, none, found)
            # Records come in the refs' order, less those not converted (in order in 'errors').
            failed, sizes = iter(found['errors']), iter(result.sizes)
            next_failed = next(failed, None)
            for ref in of_split:
                if next_failed is not None and next_failed[0] == (ref.source or ref.key):
                    out, next_failed = 0, next(failed, None)
                else:
                    out = next(sizes)
                self.weighed.append([split, ref.size, out])
            self.records += result.records
            self.filings += len(next(filings(part_table(result)))[1]) if result.records else 0


def time_sample(refs: list[ExampleRef], label_map: LabelMap,
                settings: ConversionSettings) -> dict:
    """Converts `refs` as a chunk is converted, timing all but the first WARM_UP in two halves;
    the rate, with what each sampled input weighed in and out ('weighed') and what the plan's
    memory estimate takes from this process ('memory')."""
    listed, refs = refs, sorted(read_grouped(refs), key=_sample_key)
    timed = refs[WARM_UP:] if len(refs) > 2 * WARM_UP else refs
    if not timed:
        return {'images': 0, 'seconds': 0.0, 'seconds_per_image': None, 'weighed': []}
    with _SampleConverter(settings, label_map) as converter:
        def convert(chunk: list[ExampleRef]) -> tuple[float, float, float]:
            busy, cpu, started = machine_busy_seconds(), time.process_time(), time.monotonic()
            converter.convert(chunk)
            return (time.monotonic() - started, time.process_time() - cpu,
                    machine_busy_seconds() - busy)

        if timed is not refs:
            convert(refs[:WARM_UP])
        halves = [timed[:len(timed) // 2], timed[len(timed) // 2:]]
        timings = [(convert(half), len(half)) for half in halves if half]
    (seconds, cpu, busy), count = min(timings, key=lambda t: t[0][0] / t[1])
    return {'images': len(timed), 'seconds': sum(t[0][0] for t in timings),
            'seconds_per_image': seconds / count, 'worker_cpu_seconds_per_image': cpu / count,
            'machine_cpu_seconds_per_image': busy / count if busy > 0 else None,
            'weighed': converter.weighed,
            'memory': _memory(process_memory(), converter, listed)}


def _memory(now: dict, converter: _SampleConverter, listed: list[ExampleRef]) -> dict:
    """What the plan's memory estimate (pipeline/plan.py) takes from the process that converted
    the sample: its peak so far (its imports, its share of the listing, the sample's
    conversion), the bytes of those it shares with other processes (the launcher it was forked
    from, the other workers), the bytes
    a listed ref takes in a sorted run (its bytes as listing spills it, ref_codec.py, and the
    run's header),
    those a record takes filed for the count of copies and the leakage check (a copies row, and
    a filing per band under each of its hashes that differs from the flat one), and the length
    of a record's source (which a shard's join holds)."""
    row = lambda dtype: record_dtype(dtype).itemsize   # noqa: E731  (key, length, payload)
    head = row(np.dtype((np.void, 0)))
    filings_per_record = converter.filings / converter.records if converter.records else 0.0
    return {'peak_bytes': now.get('peak', 0), 'shared_bytes': now.get('shared', 0),
            'ref_bytes': (sum(len(ref_codec.encode(r)) for r in listed)
                          / len(listed) + head) if listed else 0.0,
            'filed_bytes_per_record': row(COPY) + BANDS * filings_per_record * row(FILING),
            'source_chars': (sum(len(r.source or r.filename) for r in listed) / len(listed)
                             if listed else 0.0)}


def process_memory() -> dict:
    """This process's memory (Linux; {} elsewhere), in bytes: 'peak' (VmHWM, its peak resident
    size so far), 'resident' (VmRSS) and 'shared' (resident pages other processes map too)."""
    try:
        with open('/proc/self/status') as status:
            fields = dict(line.split(':', 1) for line in status if ':' in line)
        with open('/proc/self/smaps_rollup') as rollup:
            fields.update(line.split(':', 1) for line in rollup.read().splitlines()[1:]
                          if ':' in line)
    except (OSError, ValueError):
        return {}
    kib = lambda name: int(fields.get(name, '0 kB').split()[0]) * 1024   # noqa: E731
    return {'peak': kib('VmHWM'), 'resident': kib('VmRSS'),
            'shared': kib('Shared_Clean') + kib('Shared_Dirty')}


def machine_busy_seconds() -> float:
    """CPU seconds every process of this machine has used since boot (Linux; 0 elsewhere): what
    converting costs whoever does the work (a storage emulator serving the reads too), and what
    else is running."""
    try:
        with open('/proc/stat') as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)   # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf('SC_CLK_TCK')

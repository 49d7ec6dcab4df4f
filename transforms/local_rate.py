"""The conversion rate of this machine for this input and these options, measured while planning.

A deterministic sample of the inputs (the SAMPLE_SIZE with the smallest key hashes, so the same
input gives the same sample) goes through the conversion's own per-image work, EncodeChunk's:
read, decode and checks, perceptual hashes (unless --leakage=off), re-encoding as the options
ask, Example encoding, framing and writing, into a temporary file that is then removed. The
first WARM_UP images are converted untimed (codec and client set-up); the rest are timed in one
worker, in two halves, and the faster half gives the rate (a moment of load from elsewhere slows
one half, not the run): seconds of one worker per image, its CPU seconds per image, and the CPU
seconds the whole machine used per image meanwhile (a local storage emulator's too), which bound
what more workers can do.
"""
import contextlib
import os
import tempfile
import time

import apache_beam as beam

from transforms import entries
from transforms.grouped_reads import read_grouped
from transforms.listing import merged_sample
from transforms.labels import LabelMap
from pipeline.base.refs import ExampleRef
from pipeline.base.settings import ConversionSettings
from transforms.shard_results import ShardResult
from transforms.encode_chunks import EncodeChunks, StreamedMembers

SAMPLE_SIZE = 300
WARM_UP = 20


class MeasureLocalRate(beam.PTransform):
    """What listing found (a Listed per bundle, each with its share of the sample) -> one dict:
    images timed, seconds, seconds per image (None when no input can be timed: none listed, or
    only members of gzip archives, which are read in one pass)."""

    def __init__(self, settings: ConversionSettings, label_map: beam.PCollection):
        super().__init__()
        self._settings, self._label_map = settings, label_map

    def expand(self, listed: beam.PCollection) -> beam.PCollection:
        return (listed
                | 'Samples' >> beam.combiners.ToList()
                | 'Time Sample' >> beam.Map(_time_samples, beam.pvalue.AsSingleton(self._label_map),
                                            self._settings))


def _time_samples(listed: list, label_map: LabelMap, settings: ConversionSettings) -> dict:
    return time_sample(merged_sample(listed, SAMPLE_SIZE), label_map, settings)


def _sample_key(ref: ExampleRef) -> tuple[int, str, str]:
    return ref.key_hash, ref.split, ref.key


def time_sample(refs: list[ExampleRef], label_map: LabelMap,
                settings: ConversionSettings) -> dict:
    """Converts `refs` as a chunk is converted, timing all but the first WARM_UP in two halves."""
    refs = sorted(read_grouped(refs), key=_sample_key)
    timed = refs[WARM_UP:] if len(refs) > 2 * WARM_UP else refs
    if not timed:
        return {'images': 0, 'seconds': 0.0, 'seconds_per_image': None}
    encoder, none = EncodeChunks(settings), StreamedMembers([], 0)   # No gzip members here.
    unused = {'errors': [], 'damaged': []}   # What was not converted: not timed, not kept.
    encoder.setup()
    handle, path = tempfile.mkstemp(prefix='image-tfrecords-rate-', suffix='.tfrecord')
    os.close(handle)

    def convert(chunk: list[ExampleRef]) -> tuple[float, float, float]:
        busy, cpu, started = machine_busy_seconds(), time.process_time(), time.monotonic()
        encoder.encode(chunk, ShardResult('', 0, path, 0), label_map, none, unused)
        return (time.monotonic() - started, time.process_time() - cpu,
                machine_busy_seconds() - busy)

    try:
        if timed is not refs:
            convert(refs[:WARM_UP])
        halves = [timed[:len(timed) // 2], timed[len(timed) // 2:]]
        timings = [(convert(half), len(half)) for half in halves if half]
    finally:
        encoder.teardown()
        for written in (path, *(entries.entry_path(path, kind) for kind in entries.KINDS)):
            with contextlib.suppress(FileNotFoundError):
                os.remove(written)
    (seconds, cpu, busy), count = min(timings, key=lambda t: t[0][0] / t[1])
    return {'images': len(timed), 'seconds': sum(t[0][0] for t in timings),
            'seconds_per_image': seconds / count, 'worker_cpu_seconds_per_image': cpu / count,
            'machine_cpu_seconds_per_image': busy / count if busy > 0 else None}


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

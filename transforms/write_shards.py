"""Writing shards: a split's chunks are converted in parallel, task by task, then joined per
shard.

The shard plan's chunks are cut into tasks (sharding.Task). A first pass fingerprints every
chunk from its inputs (resume.py), so that each chunk's and shard's work has a name before any
is done; EncodeChunks (encode_chunks.py) then converts each task's chunks into part files, a part
per shard a chunk's examples fall in. WriteShard makes a shard's part files, in chunk order,
into the temporary shard file of each output format, and with --dali_index writes the TFRecord
shard's DALI index from the sizes of the records the parts noted as they framed them. The parts'
records are counted for exact copies (copies.py) and clustered for leakage (leakage.py). Both
tasks' examples and the parts' records pass between stages in files of the run's temporary
folder, so the runner carries no input (listing.py). Finished parts and shards are marked so
that a rerun after a crash reuses them (resume.py).
"""
import collections
import hashlib
import logging
from typing import Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipeline import faults
from pipeline.base.choices import LeakageAction
from pipeline.base.fingerprints import fingerprint
from pipeline.base.settings import ConversionSettings
from pipeline.io import fileio
from pipeline.output import dali_index, layout, records, shard_formats
from transforms import entries, resume, sharding
from transforms.encode_chunks import EncodeChunks, FingerprintChunks
from transforms.copies import CountCopies
from transforms.gathered import Gathered
from transforms.leakage import (NAMESPACE, FindLeakage, by_shard, drop_from_part, dropped_copies,
                                dropped_id)
from transforms.shard_results import PartDone, ShardKey, ShardResult, shard_line, shows_shard
from transforms.spread import Spread

LOG = logging.getLogger('image_tfrecords')


class WriteShards(beam.PTransform):
    """Listed (a bundle's listing, listing.py) -> {'shards': ShardResult of every temporary
    shard file, 'copies': the exact copies of each split (copies.py), and, unless
    --leakage=off, FindLeakage's 'clusters' and 'crowded' with 'filed': the bundles' Filed,
    whose flat images the commit counts}.

    (See the module docstring.) With --leakage=drop the later-split members of clusters are
    left out when a shard's parts are joined."""

    def __init__(self, settings: ConversionSettings, plans: beam.PCollection,
                 label_map: beam.PCollection):
        super().__init__()
        self._settings, self._plans, self._label_map = settings, plans, label_map

    def expand(self, listed: beam.PCollection):
        settings = self._settings
        plans = beam.pvalue.AsDict(self._plans)
        label_map = beam.pvalue.AsSingleton(self._label_map)
        runs = beam.pvalue.AsList(listed
                                  | 'Listing Runs' >> beam.FlatMap(lambda found: found.runs))
        tasks = (self._plans
                 | 'Cut Into Tasks' >> Gathered(sharding.dealt_tasks, settings.workers, each=True)
                 | 'Spread Tasks' >> Spread())
        fingerprints = tasks | 'Fingerprint Chunks' >> beam.ParDo(
            FingerprintChunks(settings.work_id), runs, label_map, plans)
        if settings.resuming and settings.lock_token:   # For the progress of a launcher.
            fingerprints = _note_reuse(fingerprints, plans, settings)
        chunk_fps = beam.pvalue.AsDict(fingerprints)
        shard_fps = beam.pvalue.AsDict(
            fingerprints | 'Fingerprint Shards' >> Gathered(_shard_fingerprints, plans, each=True))
        encoded = tasks | 'Encode Chunks' >> beam.ParDo(
            EncodeChunks(settings), runs, label_map, plans, chunk_fps,
            shard_fps).with_outputs('filed', main='parts')
        filing_runs = encoded.filed | 'Filing Runs' >> beam.FlatMap(lambda found: found.runs)
        leakage = ({'filed': encoded.filed, **(filing_runs | 'Find Leakage' >> FindLeakage(
            plans, chunk_fps, settings.temp_dir, settings.resume_key,
            settings.resuming))} if settings.hashed else {})
        drops, left_out = {}, ()
        if settings.leakage == LeakageAction.DROP:
            later = (leakage['clusters']
                     | 'Later-Split Members' >> beam.FlatMap(dropped_copies)
                     | 'One Reason Each' >> beam.CombinePerKey(min))
            drops['dropped'] = beam.pvalue.AsMultiMap(later | 'By Shard' >> beam.Map(by_shard))
            left_out = (later | 'Dropped Ids' >> beam.Map(dropped_id),)
        copies = filing_runs | 'Count Copies' >> CountCopies(settings.temp_dir, chunk_fps,
                                                            settings.resume_key, *left_out)
        shards = (encoded.parts
                  | 'Key By Shard' >> beam.Map(_shard_key)
                  | 'Group By Shard' >> beam.GroupByKey()
                  | 'Write Shards' >> beam.ParDo(WriteShard(settings),
                                                 plans=plans, shard_fps=shard_fps, **drops))
        return {'shards': shards, 'copies': copies, **leakage}


def _note_reuse(fingerprints: beam.PCollection, plans, settings: ConversionSettings):
    """The chunk fingerprints, once the note of what an earlier attempt's work this run reuses
    is written (resume.note_reuse): so before any chunk is converted, for the waiting
    launcher's progress."""
    noted = fingerprints | 'Note Reuse' >> Gathered(
        resume.note_reuse, plans, settings.temp_dir,
        resume.reuse_note(settings.temp_dir, settings.lock_token))
    return fingerprints | 'Reuse Noted' >> beam.Map(lambda fp, _: fp,
                                                     beam.pvalue.AsSingleton(noted))


def _shard_fingerprints(chunk_fps: list, plans: dict) -> Iterator[tuple[ShardKey, str]]:
    """((split, chunk), fingerprint) of every chunk -> ((split, shard), fingerprint) of every
    shard: what names the chunks its examples come from."""
    chunks_of: dict[ShardKey, list[tuple[int, str]]] = collections.defaultdict(list)
    for (split, index), fp in chunk_fps:
        for shard in plans[split].shards_of_chunk(index):
            chunks_of[(split, shard)].append((index, fp))
    for key, chunks in chunks_of.items():
        yield key, resume.shard_fingerprint(chunks)


def _shard_key(part: PartDone) -> tuple[ShardKey, PartDone]:
    return (part.split, part.shard), part


def _write_index(shard_file: str, sizes: list[int]) -> tuple[int, str]:
    """Writes the DALI index of a temporary shard whose records take `sizes` bytes; returns
    its size and SHA-256."""
    data = dali_index.index_bytes(sizes)
    target = layout.index_file(shard_file)
    with fileio.output_errors(target):
        fileio.write_bytes(target, data)
    return len(data), hashlib.sha256(data).hexdigest()


class WriteShard(beam.DoFn):
    """((split, shard), its PartDones) -> ShardResult of the temporary shard, with a file per
    output format (`temp_path` is the first format's; `bytes` its size).

    Each format writes the shard from the parts (pipeline/output/shard_formats.py): TFRecord
    joins them; a format that rewrites the records (ArrayRecord, which ends in an index) needs
    local disk for one shard (about --target_shard_mb) and memory for one record at a time. The
    DALI index (--dali_index) is written before the shard's sidecar, so a shard is complete only
    with it.
    """

    def __init__(self, settings: ConversionSettings):
        self._settings = settings

    def setup(self) -> None:
        self._shards = Metrics.counter(NAMESPACE, 'shards_written')

    def process(self, element: tuple, plans: dict, shard_fps: dict,
                dropped=None) -> Iterator[ShardResult]:
        (split, shard), parts = element
        settings = self._settings
        shard_fp = shard_fps[(split, shard)]
        drops = sorted(dropped[(split, shard)]) if dropped is not None else []
        if drops:   # They depend on other splits' images too, so they name the shard's files.
            shard_fp = fingerprint(shard_fp, drops)
        path = layout.shard_path(settings.temp_dir, split, shard, shard_fp,
                                 shard_formats.named(settings.output_formats)[0])
        # Its chunks checked it first (encode_chunks.py), saying so if it differs, unless
        # drops name it otherwise.
        result = (resume.complete_shard(path, split, shard, settings, tell=bool(drops))
                  if settings.resuming else None)
        reused = result is not None
        if result is None:
            parts = sorted((_part_result(p, settings.resume_key) for p in parts),
                           key=lambda r: r.chunk)
            digests = entries.join({kind: [p.temp_path for p in parts if getattr(p, kind)]
                                    for kind in entries.KINDS}, path)
            found = [entries.entry_path(p.temp_path, kind)
                     for p in parts for kind in entries.KINDS]
            parts = [drop_from_part(p, drops) if drops else p for p in parts]
            result = ShardResult(split, shard, path, digests=digests)
            for part in parts:
                result.add(part)
            result.content, result.marks = records.content_digest(result.marks), ''
            sources = [p.temp_path for p in parts]
            sizes, digests = {}, {}
            for shard_format in shard_formats.named(settings.output_formats):
                target = layout.in_format(path, shard_format)
                with fileio.output_errors(target):
                    sizes[shard_format.name], digest = shard_format.write_shard(sources, target)
                if digest:
                    digests[shard_format.name] = digest
            result.bytes, result.format_bytes = sizes[settings.output_formats[0]], sizes
            result.format_digests = digests
            if settings.dali_index:
                result.index_bytes, result.digests['index'] = _write_index(path, result.sizes)
            result.sizes = []
            resume.save_done(path, result, settings.resume_key)
            fileio.delete(sources + found)
            faults.crash_point('shard', counted=True)
        self._shards.inc()
        total = plans[split].num_shards
        if shows_shard(shard, total):
            LOG.info('%s', shard_line(result, total, reused))
        yield result


def _part_result(part: PartDone, key: bytes) -> ShardResult:
    """A finished part's whole result, from its sidecar (sealed under `key`)."""
    result = resume.load_sidecar(part.temp_path, ShardResult, key, False, split=part.split,
                                 shard=part.shard, chunk=part.chunk)
    if result is None:
        raise resume.changed_sidecar(part.temp_path)
    return result

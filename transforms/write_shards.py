"""Writing shards: each shard's parts, from the chunks its examples fall in, joined into the
shard's temporary file of each output format.

WriteShard gets a shard's parts (encode_chunks.py: PartDones, keyed by their shard) and names
the shard by its chunks' fingerprints (resume.py), which the parts carry; it makes the parts'
records, in chunk order, into the temporary shard file of each output format, and with
--dali_index writes the TFRecord shard's DALI index from the sizes of the records the parts
noted as they framed them. The parts' records pass between stages in files of the run's
temporary folder, so the runner carries no input (listing.py). Finished shards are marked so
that a rerun after a crash reuses them (resume.py).
"""
import hashlib
import logging
from typing import Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipeline import faults
from pipeline.base.fingerprints import fingerprint
from pipeline.base.settings import ConversionSettings
from pipeline.io import fileio
from pipeline.output import dali_index, layout, records, shard_formats
from transforms import entries, resume
from transforms.leakage import NAMESPACE, drop_from_part
from transforms.shard_results import PartDone, ShardResult, shard_line, shows_shard

LOG = logging.getLogger('image_tfrecords')


class WriteShards(beam.PTransform):
    """((split, shard), PartDone) of every part file -> ShardResult of every temporary shard
    file (see the module docstring). `plan`: the plan (planning.Plan), for each split's shard
    count; `dropped`: with --leakage=drop, the copies left out, keyed by their shard
    (leakage.by_shard), taken out when a shard's parts are joined."""

    def __init__(self, settings: ConversionSettings, plan: beam.PCollection,
                 dropped: beam.PCollection | None = None):
        super().__init__()
        self._settings, self._plan, self._dropped = settings, plan, dropped

    def expand(self, parts: beam.PCollection) -> beam.PCollection:
        drops = ({'dropped': beam.pvalue.AsMultiMap(self._dropped)}
                 if self._dropped is not None else {})
        return (parts
                | 'Group By Shard' >> beam.GroupByKey()
                | 'Join Parts' >> beam.ParDo(WriteShard(self._settings),
                                             beam.pvalue.AsSingleton(self._plan), **drops))


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

    def process(self, element: tuple, plan, dropped=None) -> Iterator[ShardResult]:
        (split, shard), parts = element
        settings = self._settings
        parts = list(parts)
        shard_fp = resume.shard_fingerprint((part.chunk, part.fingerprint) for part in parts)
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
        total = plan.shard_plans[split].num_shards
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

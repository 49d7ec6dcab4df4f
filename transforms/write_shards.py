"""Writing shards: chunks of examples are converted in parallel, then joined per shard.

EncodeChunk takes one chunk's ExampleRefs (paths, not image bytes), converts the images one at a
time in the chunk's order and streams the records into a part file (TFRecord); the next images
are read meanwhile (--reads_in_flight, at most READ_AHEAD_BYTES held), so a worker thread holds
a bounded number of images whatever the dataset size, and waits on a round trip to Cloud Storage
only when conversion outruns the reads. WriteShard makes a shard's part files, in chunk order,
into the temporary shard file of each output format, and with --dali_index writes the TFRecord
shard's DALI index from the sizes of the records the parts noted as they framed them. Inputs
that cannot become records are reported, never fatal; a file that cannot be written (disk full,
no permission) is a DatasetError naming it. Finished parts and shards are marked so that a rerun
after a crash reuses them (resume.py).
"""
import contextlib
import dataclasses
import hashlib
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable, Iterator

import apache_beam as beam
import threadpoolctl
from apache_beam.metrics import Metrics

from pipeline.inputs import gzip_pass
from pipeline import faults
from pipeline.base.choices import LeakageAction
from pipeline.base.fingerprints import fingerprint
from pipeline.io import failures, fileio, read_ahead
from pipeline.output import dali_index, output_folder, records, shard_formats
from pipeline.errors import DatasetError
from transforms import entries, resume
from transforms.grouped_reads import ReadGroupedInputs
from transforms.images import DamagedImageError, ImageError, StoredImage, convert_image
from transforms.leakage import (NAMESPACE, FindLeakage, by_shard, drop_from_part, dropped_copies,
                               part_table)
from pipeline.quality.phash import to_int64
from transforms.labels import LabelMap
from transforms.shard_results import ShardKey, ShardResult, shard_line, shows_shard
from pipeline.base.refs import ExampleRef
from pipeline.base.settings import ConversionSettings
from transforms.sharding import AssignChunks, ShardPlan

LOG = logging.getLogger('image_tfrecords')
READ_AHEAD_BYTES = 64 << 20   # Per worker thread: images read, or being read, not yet converted.


def split_chunk(refs: Iterable[ExampleRef], plan: ShardPlan, chunk: int,
                skip_duplicates: bool) -> dict[int, tuple[list[ExampleRef], list[ExampleRef]]]:
    """Sorts a chunk's refs by (hash, key), which gives each its rank and so its shard; returns
    {shard: (unique refs, duplicates dropped)}.

    Equal keys have equal hashes, so duplicates always meet in one chunk, next to each other.
    """
    ordered = sorted(refs, key=lambda r: (r.key_hash, r.key))
    first = plan.first_rank(chunk)
    pieces: dict[int, tuple[list, list]] = {}
    for rank, ref in enumerate(ordered, first):
        unique, duplicates = pieces.setdefault(plan.shard_of_rank(rank), ([], []))
        previous = ordered[rank - first - 1] if rank > first else None
        (duplicates if previous is not None and previous.key == ref.key else unique).append(ref)
    dropped = sorted({r.key for _, duplicates in pieces.values() for r in duplicates})
    if dropped and not skip_duplicates:
        raise DatasetError(
            f"split '{ordered[0].split}' lists {len(dropped)} input(s) more than once, e.g. "
            f'{dropped[0]}; remove the duplicates or pass --skip_duplicates to drop them')
    return pieces


class WriteShards(beam.PTransform):
    """Input refs -> {'shards': ShardResult of every temporary shard file, and the outputs of
    FindLeakage: 'clusters', 'flat', 'crowded' (none with --leakage=off)}.

    Refs are grouped into chunks by the shard plan (no image bytes move; inputs read in groups,
    parquet rows, are first written into a blob per group: grouped_reads.py), chunks and shards are
    fingerprinted (resume.py), each chunk is converted into a part file per shard it falls in,
    the parts' records' hashes are clustered (leakage.py), and each shard's parts are joined in
    chunk order (without the later-split members of clusters, with --leakage=drop).
    """

    def __init__(self, settings: ConversionSettings, plans: beam.PCollection,
                 label_map: beam.PCollection):
        super().__init__()
        self._settings, self._plans, self._label_map = settings, plans, label_map

    def expand(self, refs: beam.PCollection):
        plans = beam.pvalue.AsDict(self._plans)
        label_map = beam.pvalue.AsSingleton(self._label_map)
        chunks = (refs
                  | 'Assign Chunks' >> beam.ParDo(AssignChunks(), plans=plans)
                  | 'Read Grouped Inputs' >> ReadGroupedInputs(
                      self._settings.temp_dir, self._settings.resuming)
                  | 'Group By Chunk' >> beam.GroupByKey()
                  | 'Fingerprint Chunks' >> beam.Map(_fingerprint_chunk, self._settings.work_id,
                                                     label_map=label_map, plans=plans))
        shard_fps = beam.pvalue.AsDict(
            chunks
            | 'Chunks Of Shards' >> beam.FlatMap(_chunk_of_shards, plans=plans)
            | 'Group Fingerprints' >> beam.GroupByKey()
            | 'Fingerprint Shards' >> beam.Map(_shard_fingerprint))
        encoded = chunks | 'Encode Chunks' >> beam.ParDo(
            EncodeChunk(self._settings), label_map=label_map, plans=plans,
            shard_fps=shard_fps).with_outputs('tables', main='parts')
        leakage = (encoded.tables | 'Find Leakage' >> FindLeakage(
            plans, self._settings.temp_dir, self._settings.resuming)
                   if self._settings.hashed else {})
        drops = {}
        if self._settings.leakage == LeakageAction.DROP:
            drops['dropped'] = beam.pvalue.AsMultiMap(
                leakage['clusters']
                | 'Later-Split Members' >> beam.FlatMap(dropped_copies)
                | 'One Reason Each' >> beam.CombinePerKey(min)
                | 'By Shard' >> beam.Map(by_shard))
        shards = (encoded.parts
                  | 'Key By Shard' >> beam.Map(_shard_key)
                  | 'Group By Shard' >> beam.GroupByKey()
                  | 'Write Shards' >> beam.ParDo(WriteShard(self._settings),
                                                 plans=plans, shard_fps=shard_fps, **drops))
        return {'shards': shards, **leakage}


def _fingerprint_chunk(chunk: tuple, work_id: str, label_map: LabelMap,
                       plans: dict) -> tuple[tuple[str, int], str, list[ExampleRef]]:
    """((split, chunk), lists of refs) -> ((split, chunk), fingerprint, refs)."""
    (split, index), groups = chunk
    refs = [r for group in groups for r in group]
    fp = resume.chunk_fingerprint(work_id, label_map, chunk[0], plans[split].placement(index), refs)
    return chunk[0], fp, refs


def _chunk_of_shards(chunk: tuple, plans: dict) -> Iterator[tuple[ShardKey, tuple[int, str]]]:
    """((split, chunk), fingerprint, refs) -> ((split, shard), (chunk, fingerprint)) for each
    shard the chunk's examples fall in."""
    (split, index), fp, _ = chunk
    for shard in plans[split].shards_of_chunk(index):
        yield (split, shard), (index, fp)


def _shard_fingerprint(shard_chunks: tuple) -> tuple[ShardKey, str]:
    key, chunks = shard_chunks
    return key, resume.shard_fingerprint(chunks)


def _shard_key(result: ShardResult) -> tuple[ShardKey, ShardResult]:
    return (result.split, result.shard), result


class EncodeChunk(beam.DoFn):
    """((split, chunk), fingerprint, refs) -> a ShardResult per part file: one for each shard
    the chunk's examples fall in (without its records' hashes), and on the 'tables' output the
    part's records for the leakage check (leakage.part_table).

    Work an earlier attempt of the same run finished is reused, not redone (see resume.py).
    Up to `reads_in_flight` images are read ahead of the one being converted. A converted
    chunk's parts are finished (closed or uploaded, with their entry files, then their sidecars)
    on a background thread while the next chunk converts; a bundle ends once its last chunk is.
    """

    def __init__(self, settings: ConversionSettings):
        self._settings = settings

    def setup(self) -> None:
        # The runner runs a worker per core; a multithreaded BLAS under the perceptual hash's
        # small matrix products would only spin on the other cores (twice the CPU, measured).
        threadpoolctl.threadpool_limits(1, user_api='blas')
        self._reader = read_ahead.ReadAhead(self._settings.reads_in_flight, READ_AHEAD_BYTES,
                                        self._settings.max_input_bytes)
        self._written = Metrics.counter(NAMESPACE, 'images_written')
        self._skipped = Metrics.counter(NAMESPACE, 'images_skipped')
        self._reencoded = Metrics.counter(NAMESPACE, 'images_reencoded')
        self._bytes = Metrics.counter(NAMESPACE, 'bytes_written')
        self._converted_chunks = Metrics.counter(NAMESPACE, 'chunks_converted')
        self._reused_chunks = Metrics.counter(NAMESPACE, 'chunks_reused')
        self._damaged = Metrics.counter(NAMESPACE, 'images_damaged')
        self._entry_writes = ThreadPoolExecutor(len(entries.KINDS))
        self._finisher = ThreadPoolExecutor(1, thread_name_prefix='finish-parts')
        self._finishing: Future | None = None

    def finish_bundle(self) -> None:
        self._wait_finishing()

    def teardown(self) -> None:
        self._reader.close()
        self._finisher.shutdown()
        self._entry_writes.shutdown()

    def _wait_finishing(self) -> None:
        """Waits for the last chunk's parts to be finished, raising what failed them."""
        finishing, self._finishing = self._finishing, None
        if finishing is not None:
            finishing.result()

    def process(self, element: tuple, label_map: LabelMap, plans: dict,
                shard_fps: dict) -> Iterator[ShardResult]:
        (split, chunk), chunk_fp, refs = element
        settings = self._settings
        pieces = split_chunk(refs, plans[split], chunk, settings.skip_duplicates)
        paths = {shard: output_folder.part_path(settings.temp_dir, split, shard, chunk, chunk_fp)
                 for shard in pieces}
        reused = self._reused(split, chunk, paths, shard_fps) if settings.resuming else None
        if reused is not None:
            self._reused_chunks.inc()
            yield from _with_tables(reused, settings.hashed)
            return
        streamed = StreamedMembers([r for unique, _ in pieces.values() for r in unique],
                                   settings.max_input_bytes)
        results, finishes = [], []
        for shard, (unique, duplicates) in pieces.items():
            result = ShardResult(split, shard, paths[shard], chunk)
            found = {'errors': [(r.source or r.key, 'duplicate: listed more than once')
                                for r in duplicates], 'damaged': []}
            finishes.append(self._convert(unique, result, label_map, streamed, found))
            result.errors, result.damaged = len(found['errors']), len(found['damaged'])
            self._skipped.inc(result.errors)
            self._damaged.inc(result.damaged)
            results.append(result)
        self._wait_finishing()   # The chunk before: at most one is finished while one converts.
        self._finishing = self._finisher.submit(_finish_chunk, finishes, results)
        self._converted_chunks.inc()
        yield from _with_tables(results, settings.hashed)

    def _reused(self, split: str, chunk: int, paths: dict,
                shard_fps: dict) -> list[ShardResult] | None:
        """The results of every part of this chunk if an earlier attempt finished them all: each
        part either joined into its finished shard already, or complete on its own."""
        results = []
        for shard, path in paths.items():
            shard_file = output_folder.shard_path(
                self._settings.temp_dir, split, shard, shard_fps[(split, shard)],
                shard_formats.named(self._settings.output_formats)[0])
            joined = _complete_shard(shard_file, split, shard, self._settings) is not None
            # A joined part's sidecar is kept (its records' hashes); its data is in the shard.
            done = (resume.load_sidecar if joined else resume.load_done)(
                path, ShardResult, split=split, shard=shard, chunk=chunk)
            if done is None or not (joined or entries.trusted(path)):
                return None
            results.append(done)
        return results

    def encode(self, refs: list[ExampleRef], result: ShardResult, label_map: LabelMap,
               streamed: 'StreamedMembers', found: dict) -> ShardResult:
        """Converts `refs` (in order) into the part file `result.temp_path` and finishes it
        (see _convert)."""
        self._convert(refs, result, label_map, streamed, found)()
        return result

    def _convert(self, refs: list[ExampleRef], result: ShardResult, label_map: LabelMap,
                 streamed: 'StreamedMembers', found: dict) -> Callable[[], None]:
        """Converts `refs` (in order) into the part file `result.temp_path`, adding to
        `found` the (source, reason) of each input not converted ('errors') and the (source,
        reason, action) of each damaged JPEG ('damaged'). Returns what finishes the part: its
        last write (on gs:// its upload, of the whole part when it is small), with its entry
        files written meanwhile."""
        started = time.monotonic()
        reads = self._reader.read_in_order(
            (r.location if r.data is None and r.problem is None and not _is_streamed(r)
             else None, r.size) for r in refs)
        with contextlib.ExitStack() as writing:
            out = writing.enter_context(fileio.writing(result.temp_path))
            for ref, read in zip(refs, reads):
                ref = streamed.resolve(ref)
                try:
                    record, stored, sha256 = self._record(ref, read, label_map)
                except DamagedImageError as exc:
                    found['errors'].append((ref.source or ref.key, str(exc)))
                    found['damaged'].append((ref.source or ref.key, str(exc), 'skip'))
                    continue
                except ImageError as exc:
                    found['errors'].append((ref.source or ref.key, str(exc)))
                    continue
                passed = stored.passed_through
                source = ref.source or ref.filename   # As the record says.
                if stored.damage:
                    found['damaged'].append((source, f'damaged JPEG: {stored.damage}',
                                           self._settings.image.damaged_images))
                if self._settings.hashed:
                    result.hashes.append((source, sha256, to_int64(stored.phash),
                                          to_int64(stored.phash_mirrored),
                                          label_map.id_of(ref.label), int(passed)))
                framed = records.frame_record(record)
                out.write(framed)
                if not result.records:
                    result.first_record = records.record_digest(record)
                result.marks += records.content_mark(record)
                if self._settings.dali_index:
                    result.sizes.append(len(framed))
                result.records += 1
                result.bytes += len(framed)
                result.passed_through += passed
                label_id = label_map.id_of(ref.label)
                result.label_counts[label_id] = result.label_counts.get(label_id, 0) + 1
            close = writing.pop_all()
        result.seconds = time.monotonic() - started
        self._written.inc(result.records)
        self._reencoded.inc(result.records - result.passed_through)
        self._bytes.inc(result.bytes)

        def finish() -> None:
            written = [self._entry_writes.submit(entries.write, result.temp_path, kind, listed)
                       for kind, listed in found.items()]
            with close:
                pass
            for write in written:
                write.result()
        return finish

    def _record(self, ref: ExampleRef, read: Future | None,
                label_map: LabelMap) -> tuple[bytes, StoredImage, str]:
        """The record of `ref`, from its image bytes or, for a file, from `read` (its bytes);
        with what was stored and its SHA-256."""
        if ref.problem is not None:
            raise ImageError(ref.problem)
        data = ref.data
        if read is not None:
            try:
                data = read.result()
            except Exception as exc:
                reason = failures.unreadable_input(exc)
                if reason is None:  # Transient or unknown: the runner retries the chunk.
                    raise
                raise ImageError(f'cannot read file: {reason}') from None
        stored = convert_image(data, self._settings.image, self._settings.hashed)
        sha256 = hashlib.sha256(stored.encoded).hexdigest()
        features = dict(ref.extras)
        features.update({
            records.ENCODED: stored.encoded, records.FORMAT: 'JPEG',
            records.FILENAME: ref.filename, records.HEIGHT: stored.height,
            records.WIDTH: stored.width, records.CHANNELS: 3, records.COLORSPACE: 'RGB',
            records.LABEL: label_map.id_of(ref.label), records.TEXT: label_map.text_of(ref.label),
            records.SHA256: sha256,
            records.SOURCE: ref.source or ref.filename,
        })
        if self._settings.hashed:
            features.update({records.PHASH: to_int64(stored.phash),
                             records.PHASH_MIRRORED: to_int64(stored.phash_mirrored)})
        return records.encode_example(features), stored, sha256


def _finish_chunk(finishes: list[Callable[[], None]], results: list[ShardResult]) -> None:
    """Finishes a chunk's parts, each then marked complete by its sidecar (resume.py)."""
    for finish, result in zip(finishes, results):
        finish()
        resume.save_done(result.temp_path, result)
    faults.crash_point('chunk', counted=True)


STREAM_BUDGET = 256 << 20   # Bytes of gzip tar members a chunk's conversion holds at once.


def _is_streamed(ref: ExampleRef) -> bool:
    return ref.member is not None and ref.member.archive.streamed and ref.problem is None


class StreamedMembers:
    """The bytes of the gzip tar members among a chunk's refs (which cannot be read one by one),
    read as the conversion reaches them: one pass over an archive for as many of the next
    members as fit in STREAM_BUDGET (at least one, itself at most --max_input_mb), ending at the
    last of them, so a chunk's members are never held together beyond the budget. A chunk of
    small images takes one pass, as before."""

    def __init__(self, refs: list[ExampleRef], limit: int):
        self._order = [r.member for r in refs if _is_streamed(r)]
        self._limit, self._next, self._held = limit, 0, {}

    def resolve(self, ref: ExampleRef) -> ExampleRef:
        """`ref`, with its bytes (or why they cannot be read) if it is a streamed member."""
        if not _is_streamed(ref):
            return ref
        if ref.member not in self._held:
            following = ref.member in self._order[self._next:]
            self._load(self._order.index(ref.member, self._next if following else 0))
        data = self._held[ref.member]
        return (dataclasses.replace(ref, data=None, problem=data) if isinstance(data, str)
                else dataclasses.replace(ref, data=data))

    def _load(self, start: int) -> None:
        end, held = start, 0
        while end < len(self._order) and (end == start or held + min(
                self._order[end].size, self._limit) <= STREAM_BUDGET):
            held += min(self._order[end].size, self._limit)
            end += 1
        group, self._next, self._held = self._order[start:end], end, {}
        found = gzip_pass.read_streamed(group, self._limit)
        self._held = {m: found.get((m.name, m.index), gzip_pass.gone(m)) for m in group}


def _with_tables(results: list[ShardResult], hashed: bool) -> Iterator:
    """Each part result without its records' hashes, which go to the 'tables' output (none
    with --leakage=off)."""
    for result in results:
        if hashed:
            yield beam.pvalue.TaggedOutput('tables', part_table(result))
        yield dataclasses.replace(result, hashes=[])


def _write_index(shard_file: str, sizes: list[int]) -> int:
    """Writes the DALI index of a temporary shard whose records take `sizes` bytes; returns
    its size."""
    data = dali_index.index_bytes(sizes)
    target = output_folder.index_file(shard_file)
    with fileio.output_errors(target):
        fileio.write_bytes(target, data)
    return len(data)


def _complete_shard(path: str, split: str, shard: int,
                    settings: ConversionSettings) -> 'ShardResult | None':
    """The result of a shard an earlier attempt finished: its sidecar, and a file in every
    output format (and its DALI index, with --dali_index) with the size the sidecar gives it,
    and its entry files, none untrusted (fileio.is_untrusted); else None (it is made again)."""
    result = resume.load_done(path, ShardResult, split=split, shard=shard)
    if result is None:
        return None
    files = {output_folder.in_format(path, f): result.format_bytes.get(f.name)
             for f in shard_formats.named(settings.output_formats)}
    if settings.dali_index:
        files[output_folder.index_file(path)] = result.index_bytes
    try:
        if entries.trusted(path) and all(
                not fileio.is_untrusted(file) and fileio.size(file) == size
                for file, size in files.items()):
            return result
    except FileNotFoundError:
        pass
    return None


class WriteShard(beam.DoFn):
    """((split, shard), part results) -> ShardResult of the temporary shard, with a file per
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
        path = output_folder.shard_path(settings.temp_dir, split, shard, shard_fp,
                                 shard_formats.named(settings.output_formats)[0])
        result = _complete_shard(path, split, shard, settings) if settings.resuming else None
        reused = result is not None
        if result is None:
            parts = sorted(parts, key=lambda r: r.chunk)
            entries.join({kind: [p.temp_path for p in parts if getattr(p, kind)]
                          for kind in entries.KINDS}, path)
            found = [entries.entry_path(p.temp_path, kind)
                     for p in parts for kind in entries.KINDS]
            parts = [drop_from_part(p, drops) if drops else p for p in parts]
            result = ShardResult(split, shard, path)
            for part in parts:
                result.add(part)
            result.content, result.marks = records.content_digest(result.marks), ''
            sources = [p.temp_path for p in parts]
            sizes = {}
            for shard_format in shard_formats.named(settings.output_formats):
                target = output_folder.in_format(path, shard_format)
                with fileio.output_errors(target):
                    sizes[shard_format.name] = shard_format.write_shard(sources, target)
            result.bytes, result.format_bytes = sizes[settings.output_formats[0]], sizes
            if settings.dali_index:
                result.index_bytes = _write_index(path, result.sizes)
            result.sizes = []
            resume.save_done(path, result)
            fileio.delete(sources + found)
            faults.crash_point('shard', counted=True)
        self._shards.inc()
        total = plans[split].num_shards
        if shows_shard(shard, total):
            LOG.info('%s', shard_line(result, total, reused))
        yield result

"""Converting chunks: a task's chunks of examples (sharding.Task) read from the listing's runs
and converted one after another into part files, a part per shard a chunk's examples fall in.

EncodeTasks cuts the plan's chunks into tasks and spreads them over the workers. EncodeChunks
takes a task, reads its ExampleRefs (paths, not image bytes) from the listing's sorted runs, and
converts each chunk's images one at a time in the chunk's order, streaming the records into its
part files (TFRecord); the next images are read meanwhile (--reads_in_flight, at most
READ_AHEAD_BYTES held), so a worker thread holds a bounded number of images whatever the
dataset size, and waits on a round trip to Cloud Storage only when conversion outruns the reads.
Inputs that cannot become records are reported, never fatal; a file that cannot be written
(disk full, no permission) is a DatasetError naming it. A chunk's work is named by its
fingerprint (resume.py), taken from its refs as they are read. A finished part is marked by its
sidecar, which keeps what its shard's join and the quality checks read of it (resume.py); an
exact copy of a JPEG kept as it is is not decoded again (kept_copies.py); what passes through
the runner is a small PartDone per part, keyed by its shard. Each part's records are filed for
the count of exact copies and the leakage check into the bundle's sorted runs (copies.py,
leakage.py), whose descriptions leave the bundle on the 'filed' output.
"""
import contextlib
import dataclasses
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable, Iterator

import apache_beam as beam
import threadpoolctl
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from pipeline import faults
from pipeline.base.refs import ExampleRef
from pipeline.base.settings import ConversionSettings
from pipeline.errors import DatasetError
from pipeline.inputs import gzip_pass
from pipeline.io import failures, fileio, read_ahead
from pipeline.io.sorted_runs import RunWriter
from pipeline.output import layout, records, shard_formats
from pipeline.quality.phash import to_int64
from transforms import copies, entries, resume
from transforms.images import DamagedImageError, ImageError, StoredImage
from transforms.kept_copies import KeptCopies
from transforms.labels import LabelMap
from transforms.leakage import NAMESPACE, Filed, file_part, part_table
from transforms.listing import refs_of
from transforms.gathered import Gathered
from transforms.shard_results import PartDone, ShardKey, ShardResult
from transforms.sharding import ShardPlan, Task, dealt_tasks
from transforms.spread import Spread

READ_AHEAD_BYTES = 64 << 20   # Per worker thread: images read, or being read, not yet converted.


def task_chunks(task: Task, runs: list, plan: ShardPlan) -> Iterator[tuple[int, list[ExampleRef]]]:
    """(chunk, its refs) of each chunk of a task, in chunk order, read from the listing's runs."""
    lo, hi = plan.key_range(task.first, task.end)
    chunk, refs = None, []
    for ref in refs_of(runs, task.split, lo, hi):
        found = plan.chunk_of(ref)
        if found != chunk and refs:
            yield chunk, refs
            refs = []
        chunk = found
        refs.append(ref)
    if refs:
        yield chunk, refs


class EncodeTasks(beam.PTransform):
    """The plan (planning.Plan) -> {'parts': ((split, shard), PartDone) of every part file
    written, 'filed': a leakage.Filed per bundle}: the plan's chunks cut into tasks, dealt
    (sharding.dealt_tasks) and spread over the workers, each converted by EncodeChunks.

    A resumed run first fingerprints every chunk (FingerprintChunks), so that it knows, before
    converting any, the shards an earlier attempt may have finished under the same names
    (resume.reused_work, which also notes what it reuses for the launcher that waits)."""

    def __init__(self, settings: ConversionSettings):
        super().__init__()
        self._settings = settings

    def expand(self, plan: beam.PCollection) -> dict:
        settings = self._settings
        tasks = plan | 'Cut Into Tasks' >> Spread(_dealt_tasks, settings.workers)
        sides = [beam.pvalue.AsSingleton(plan)]
        if settings.resuming:
            note = (resume.reuse_note(settings.temp_dir, settings.lock_token)
                    if settings.lock_token else None)
            shard_fps = (tasks
                         | 'Fingerprint Chunks' >> beam.ParDo(FingerprintChunks(settings.work_id),
                                                              sides[0])
                         | 'Fingerprint Shards' >> Gathered(resume.reused_work, sides[0],
                                                            settings.temp_dir, note))
            sides.append(beam.pvalue.AsSingleton(shard_fps))
        encoded = tasks | 'Encode' >> beam.ParDo(EncodeChunks(settings), *sides).with_outputs(
            'filed', main='parts')
        return {'parts': encoded.parts, 'filed': encoded.filed}


def _dealt_tasks(plan, workers: int) -> list[Task]:
    return dealt_tasks(list(plan.shard_plans.items()), workers)


class FingerprintChunks(beam.DoFn):
    """A task -> ((split, chunk), fingerprint) of each of its chunks (resume.py), as
    EncodeChunks names them."""

    def __init__(self, work_id: str):
        self._work_id = work_id

    def process(self, task: Task, plan) -> Iterator[tuple[tuple[str, int], str]]:
        shard_plan = plan.shard_plans[task.split]
        for chunk, refs in task_chunks(task, plan.runs, shard_plan):
            yield (task.split, chunk), _chunk_fingerprint(self._work_id, plan.label_map,
                                                          task.split, chunk, shard_plan, refs)


def _chunk_fingerprint(work_id: str, label_map: LabelMap, split: str, chunk: int,
                       shard_plan: ShardPlan, refs: list[ExampleRef]) -> str:
    return resume.chunk_fingerprint(work_id, label_map, (split, chunk),
                                    shard_plan.placement(chunk), refs)


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


class EncodeChunks(beam.DoFn):
    """A task, with the plan (planning.Plan) -> ((split, shard), PartDone) per part file of its
    chunks: one for each shard a chunk's examples fall in; and at the end of a bundle, on the
    'filed' output, a Filed: the runs its parts' records were filed into, and their chunks'
    fingerprints (see the module docstring).

    Given the shards' fingerprints (`shard_fps`: a resumed run), work an earlier attempt of the
    same run finished is reused, not redone (see resume.py).
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
        self._converter = KeptCopies(self._settings.image, self._settings.hashed)
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

    def start_bundle(self) -> None:
        self._filer = RunWriter(layout.filed_folder(self._settings.temp_dir))
        self._flat: dict[str, int] = {}
        self._chunks: dict[tuple[str, int], str] = {}

    def finish_bundle(self) -> Iterator:
        self._wait_finishing()
        filed = Filed(self._filer.close(), self._flat, self._chunks)
        if filed.runs:
            faults.crash_point('filed', counted=True)
        if filed.runs or filed.flat:
            yield beam.pvalue.TaggedOutput('filed', GlobalWindows.windowed_value(filed))

    def teardown(self) -> None:
        self._reader.close()
        self._finisher.shutdown()
        self._entry_writes.shutdown()

    def _wait_finishing(self) -> None:
        """Waits for the last chunk's parts to be finished, raising what failed them."""
        finishing, self._finishing = self._finishing, None
        if finishing is not None:
            finishing.result()

    def process(self, task: Task, plan,
                shard_fps: dict | None = None) -> Iterator[tuple[ShardKey, PartDone]]:
        self._shards_checked: dict[str, bool] = {}   # Of this task: shard file -> complete.
        shard_plan = plan.shard_plans[task.split]
        for chunk, refs in task_chunks(task, plan.runs, shard_plan):
            chunk_fp = _chunk_fingerprint(self._settings.work_id, plan.label_map, task.split,
                                          chunk, shard_plan, refs)
            self._chunks[(task.split, chunk)] = chunk_fp
            for result in self._encode_chunk(task.split, chunk, chunk_fp, refs, plan.label_map,
                                             shard_plan, shard_fps):
                self._file(result)
                yield (result.split, result.shard), PartDone.of(result, chunk_fp)

    def _encode_chunk(self, split: str, chunk: int, chunk_fp: str, refs: list[ExampleRef],
                      label_map: LabelMap, shard_plan: ShardPlan,
                      shard_fps: dict | None) -> list[ShardResult]:
        """The results of a chunk's parts: converted now, or (`shard_fps` given: resuming) by
        an earlier attempt."""
        settings = self._settings
        pieces = split_chunk(refs, shard_plan, chunk, settings.skip_duplicates)
        paths = {shard: layout.part_path(settings.temp_dir, split, shard, chunk, chunk_fp)
                 for shard in pieces}
        reused = self._reused(split, chunk, paths, shard_fps) if shard_fps is not None else None
        if reused is not None:
            self._reused_chunks.inc()
            return reused
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
        self._finishing = self._finisher.submit(_finish_chunk, finishes, results,
                                               self._settings.resume_key)
        self._converted_chunks.inc()
        return results

    def _file(self, result: ShardResult) -> None:
        """Files a part's records for the count of exact copies and, unless --leakage=off, for
        the leakage check."""
        table = part_table(result)
        copies.file_copies(self._filer, table)
        if self._settings.hashed:
            flat = file_part(self._filer, table)
            if flat:
                self._flat[result.split] = self._flat.get(result.split, 0) + flat

    def _reused(self, split: str, chunk: int, paths: dict,
                shard_fps: dict) -> list[ShardResult] | None:
        """The results of every part of this chunk if an earlier attempt finished them all: each
        part either joined into its finished shard already, or complete on its own."""
        results = []
        for shard, path in paths.items():
            shard_file = layout.shard_path(
                self._settings.temp_dir, split, shard, shard_fps[(split, shard)],
                shard_formats.named(self._settings.output_formats)[0])
            if shard_file not in self._shards_checked:   # Each read back once a task.
                self._shards_checked[shard_file] = resume.complete_shard(
                    shard_file, split, shard, self._settings) is not None
            joined = self._shards_checked[shard_file]
            # A joined part's sidecar is kept (its records' hashes); its data is in the shard.
            done = (resume.load_sidecar if joined else resume.load_done)(
                path, ShardResult, self._settings.resume_key, split=split, shard=shard,
                chunk=chunk)
            if done is None:
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
                                           str(self._settings.image.damaged_images)))
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
            for kind, write in zip(found, written):
                result.digests[kind] = write.result()
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
        stored, sha256 = self._converter.convert(data)
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


def _finish_chunk(finishes: list[Callable[[], None]], results: list[ShardResult],
                  key: bytes) -> None:
    """Finishes a chunk's parts, each then marked complete by its sidecar (resume.py)."""
    for finish, result in zip(finishes, results):
        finish()
        resume.save_done(result.temp_path, result, key)
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



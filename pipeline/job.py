"""The job API: `prepare` resolves the options into ConversionSettings, takes the output lock
and builds the pipeline; `convert` runs it to the end and returns the run's summary. The command
line (pipeline/run.py), the Flex Template launcher through it, and the classic builder
(pipeline/classic/builder.py) all call it with flags parsed once (pipeline/options.py).
"""
import dataclasses
import json
import logging
import os
import re
import shutil
import tempfile
import time
import uuid
from typing import Sequence

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import (
    DirectOptions, GoogleCloudOptions, PipelineOptions, PortableOptions, StandardOptions,
    TestOptions)

from pipeline import console, sample_data, worker_watch
from pipeline.classic.config import ImageClassificationConfig
from pipeline.dataflow import apply_dataflow_defaults, is_dataflow
from pipeline.io import fileio, gcs
from pipeline.output import bounded_reads, commit_journal, metadata, output_folder, output_lock
from pipeline.errors import DatasetError
from pipeline.graph import build_pipeline, build_plan_pipeline
from pipeline.local_runner import is_direct
from pipeline.options import ConverterOptions, Options, parse
from pipeline.plan import Here, estimate
from pipeline.progress import Progress
from pipeline.sources import input_given, input_paths, input_root, resolve_source
from transforms import resume
from pipeline.base.choices import LeakageAction
from pipeline.base.splits import SPLITS
from pipeline.base.settings import ConversionSettings
from transforms.leakage import NAMESPACE

LOG = logging.getLogger('image_tfrecords')
SAMPLE_OUTPUT = 'sample_tfrecords'
_NAME = re.compile(rf'^{metadata.DATASET_NAME}$')


@dataclasses.dataclass
class Job:
    """A prepared conversion. `pipeline` is None when there is nothing left to do (a rerun that
    completed its own interrupted commit)."""
    pipeline: beam.Pipeline | None
    settings: ConversionSettings
    options: PipelineOptions        # Every option, for the runner.
    sample_dir: str | None = None   # A generated sample input, removed after the run.
    plan_path: str | None = None    # Where a plan-only job writes its plan.


def _parsed(flags: 'Sequence[str] | Options', values: dict) -> Options:
    return flags if isinstance(flags, Options) else parse(flags, **values)


def prepare(flags: 'Sequence[str] | Options' = (), config: ImageClassificationConfig | None = None,
            waits: bool = True, check_buckets: bool = True, **values) -> Job:
    """Resolves the options, takes the output lock and builds the pipeline without running it.

    Options are command-line `flags` (ours, Beam's, the runners') and keyword `values` by option
    name, which take precedence, or an Options that `options.parse` made of them. `waits`: the
    caller runs the job to its end (and then releases the lock); otherwise the job's commit step
    releases it. Dry runs and template files take no lock. `check_buckets`: whether the gs://
    buckets named are checked (a dry run without credentials cannot).
    """
    parsed = _parsed(flags, values)
    options, given, opts = parsed.beam, parsed.given, parsed.converter
    sample_dir = None
    if not (opts.output_dir or input_given(opts, config)):
        sample_dir = tempfile.mkdtemp(prefix='sample_images_')
        opts.input_dir = sample_data.write_sample_dataset(sample_dir)
        opts.output_dir, opts.overwrite = SAMPLE_OUTPUT, True
        LOG.info('no input given: converting a generated sample dataset into ./%s', SAMPLE_OUTPUT)
    try:
        return _prepare(options, given, config, waits, sample_dir, check_buckets)
    except BaseException:
        if sample_dir:
            shutil.rmtree(sample_dir, ignore_errors=True)
        raise


def _prepare(options: PipelineOptions, given: set[str], config, waits: bool,
             sample_dir: str | None, check_buckets: bool) -> Job:
    opts = options.view_as(ConverterOptions)
    if not opts.output_dir and not opts.plan_only:
        raise DatasetError('--output_dir is required: a local folder or gs://bucket/prefix')
    output_dir = (opts.output_dir or '').rstrip('/')
    if output_dir:
        output_folder.check_output_dir(output_dir)
    buckets = {}   # Bucket -> a path in it: each bucket is checked once.
    for path in [output_dir, *input_paths(opts)] if check_buckets else []:
        if path and fileio.is_gcs(path):
            buckets.setdefault(fileio.split_gcs(path)[0], path)
    for path in buckets.values():
        fileio.check_bucket(path)
    source = resolve_source(opts, config)
    if output_dir:
        _check_not_inside_input(output_dir, input_root(opts))
    name = opts.dataset_name or source.name
    if not _NAME.match(name):
        raise DatasetError(f'dataset name {name!r} must be lower_snake_case (a-z, 0-9, _); '
                           'set --dataset_name')
    settings = ConversionSettings(
        output_dir=output_dir, dataset_name=name, splits=source.splits, source=source.identity,
        image=opts.image_options(), labels=source.labels, num_shards=opts.num_shards,
        target_shard_mb=opts.target_shard_mb, skip_duplicates=opts.skip_duplicates,
        output_formats=tuple(f.name for f in opts.output_formats()), version=source.version,
        leakage=LeakageAction(opts.leakage),
        dali_index=opts.dali_index,
        description=opts.description or source.description,
        max_error_ratio=opts.max_error_ratio, reads_in_flight=opts.reads_in_flight,
        max_input_bytes=opts.max_input_mb << 20,
        overwrite=opts.overwrite, release_lock=not waits)
    if is_dataflow(options):
        apply_dataflow_defaults(options, given)
    _default_to_all_cores(options, given)
    if opts.plan_only:  # Writes nothing to the output: no lock.
        path = _plan_path(options, settings)
        return Job(build_plan_pipeline(options, source.partitions, settings, path,
                                       measure_rate=is_direct(options)),
                   settings, options, sample_dir, path)
    if (options.view_as(TestOptions).dry_run
            or options.view_as(GoogleCloudOptions).template_location):  # A job description only.
        return Job(build_pipeline(options, source.partitions, settings), settings, options,
                   sample_dir)
    runner = str(options.view_as(StandardOptions).runner or 'DirectRunner')
    token = output_lock.acquire(output_dir, settings.run_id, runner, waits, opts.break_lock)
    try:
        settings = dataclasses.replace(settings, lock_token=token)
        if _nothing_to_do(settings, options, source.partitions):
            return Job(None, settings, options, sample_dir)
        _check_existing(settings)
        settings = dataclasses.replace(settings, resuming=_temp_folders(settings, opts))
        output_folder.start_temp(output_dir, settings.run_id)
        return Job(build_pipeline(options, source.partitions, settings), settings, options,
                   sample_dir)
    except BaseException:
        output_lock.release(output_dir, token)
        raise


def _plan_path(options: PipelineOptions, settings: ConversionSettings) -> str:
    """A new file for the plan: local on DirectRunner, else under --temp_location."""
    if is_direct(options):
        handle, path = tempfile.mkstemp(prefix='image-tfrecords-plan-', suffix='.json')
        os.close(handle)
        return path
    temp = options.view_as(GoogleCloudOptions).temp_location
    if not temp:
        raise DatasetError('--plan_only on this runner needs --temp_location (a gs:// folder the '
                           'job writes its plan to)')
    return fileio.join(temp, f'plan-{settings.run_id}-{uuid.uuid4().hex[:8]}.json')


def _nothing_to_do(settings: ConversionSettings, options: PipelineOptions,
                   partitions: list) -> bool:
    """Finishes what a killed run left half-done; True when the output then holds this very
    run's dataset (a commit of this run was interrupted, or the same command ran before on the
    same input and --overwrite does not ask to convert again)."""
    out = settings.output_dir
    lines, finished = commit_journal.finish_interrupted(out, settings.run_id)
    for line in lines:
        LOG.warning('%s', line)
    if settings.run_id in finished:
        return True
    summary, info = (found or {} for found in bounded_reads.read_metadata_files(
        out, metadata.SUMMARY, metadata.DATASET_INFO))
    ours = (summary.get('run_id') == settings.run_id
            and (info.get('description'), info.get('version')) == (settings.description,
                                                                  settings.version))
    if ours and not settings.overwrite and output_folder.dataset_files(out):
        if not is_direct(options):
            LOG.warning('%s already holds the dataset of this command (run %s); nothing to do. '
                        'The input was not listed again: pass --overwrite to convert again after '
                        'it changed', out, settings.run_id)
            return True
        changes = _input_changes(summary, options, partitions, settings)
        if changes:
            raise DatasetError(f'{out} holds the dataset of this command, but its input changed '
                               f'since ({"; ".join(changes)}); pass --overwrite to convert again')
        LOG.warning('%s already holds the dataset of this command (run %s) and its input is '
                    'unchanged; nothing to do', out, settings.run_id)
        return True
    return False


def _input_changes(summary: dict, options: PipelineOptions, partitions: list,
                   settings: ConversionSettings) -> list[str]:
    """How the input listed now differs from the one `summary` records, per split, by count
    and by listing fingerprint (names, sizes and labels; see refs.listing_hash). Empty for a
    dataset written without fingerprints."""
    then = summary.get('splits', {})
    if not all('listing' in s for s in then.values()):
        return []
    handle, path = tempfile.mkstemp(prefix='image-tfrecords-listing-', suffix='.json')
    os.close(handle)
    try:
        build_plan_pipeline(options, partitions, settings, path).run().wait_until_finish()
        now = json.loads(fileio.read_bytes(path))['splits']
    finally:
        os.remove(path)
    changes = []
    for split in SPLITS:
        old, new = then.get(split), now.get(split)
        if old is None and new is None:
            continue
        count_now, count_then = (new or {}).get('inputs', 0), (old or {}).get('inputs', 0)
        if count_now != count_then:
            changes.append(f'{split}: {count_now} inputs now, {count_then} then')
        elif (new or {}).get('listing') != (old or {}).get('listing'):
            changes.append(f'{split}: {count_now} inputs as then, but other names, sizes or labels')
    return changes


def _check_existing(settings: ConversionSettings) -> None:
    """Refuses a dataset that is not to be replaced, and files that a new dataset's metadata
    would overwrite but that belong to no dataset."""
    out = settings.output_dir
    with fileio.listing_once():   # Both look at the output folder, which nothing changes here.
        existing = output_folder.dataset_files(out)
        if existing and not settings.overwrite:
            raise DatasetError(f'{out} already holds a dataset ({len(existing)} files, e.g. '
                               f'{existing[0]}); pass --overwrite to replace it or choose another '
                               '--output_dir')
        output_folder.refuse_foreign(out, output_folder.foreign_files(
            out, output_folder.metadata_names(settings.splits), existing))


def _check_not_inside_input(output_dir: str, input_dir: str | None) -> None:
    """Refuses an output folder inside the input folder (the next run would list it)."""
    if not input_dir:
        return
    if fileio.is_gcs(output_dir) != fileio.is_gcs(input_dir):
        return
    out, root = ((p.rstrip('/') + '/' for p in (output_dir, input_dir)) if fileio.is_gcs(output_dir)
                 else (os.path.realpath(p) + os.sep for p in (output_dir, input_dir)))
    if out.startswith(root):
        raise DatasetError(f'--output_dir {output_dir} is inside --input_dir {input_dir}; the '
                           'next run would read the dataset as input. Choose an output folder '
                           'outside the input')


def _temp_folders(settings: ConversionSettings, opts: ConverterOptions) -> bool:
    """Says what unfinished runs left in the output and removes it as the flags ask: other
    runs' temporary folders with --overwrite or --clean_temp, this run's own (its resume state)
    with --clean_temp. Only folders this tool marked as its own are ever removed. Returns
    whether this run can reuse earlier work."""
    folders = output_folder.temp_folders(settings.output_dir)
    ours = [f for f in folders if f.run_id == settings.run_id]
    others = [f for f in folders if f.run_id != settings.run_id]
    removed = folders if opts.clean_temp else others if opts.overwrite else []
    if removed:
        sizes = _sizes(removed)
        for folder in removed:
            output_folder.remove_temp(folder.path)
        LOG.warning('removed temporary folders of unfinished runs: %s', sizes)
    kept_others = [f for f in others if f not in removed]
    if kept_others:
        LOG.warning('%s holds temporary folders of runs with other options: %s; --clean_temp '
                    'removes them', settings.output_dir, _sizes(kept_others))
    if not ours or ours[0] in removed:
        return False
    chunks, shards = resume.finished_work(settings.temp_dir)
    LOG.warning('resuming run %s: an earlier attempt finished %d chunks and %d shards; they are '
                'reused where inputs and options are unchanged', settings.run_id, chunks, shards)
    return True


def _sizes(folders: list[output_folder.TempFolder]) -> str:
    return ', '.join(f'{fileio.basename(f.path)} ({fileio.tree_bytes(f.path) / 1e6:.1f} MB)'
                     for f in folders)


def _default_to_all_cores(options: PipelineOptions, given: set[str]) -> None:
    """On DirectRunner, use one worker process per core unless the flags say otherwise."""
    if is_direct(options) and not {'direct_num_workers', 'direct_running_mode'} & given:
        direct = options.view_as(DirectOptions)
        direct.direct_num_workers, direct.direct_running_mode = 0, 'multi_processing'


def convert(flags: 'Sequence[str] | Options' = (), config: ImageClassificationConfig | None = None,
            **values) -> dict:
    """Runs a conversion to the end and returns its summary (see summary.json), with the
    seconds it took, whether it converted now (`converted_now`: False when the output already
    held this command's dataset) and the chunks it converted and reused (and the inputs in the
    chunks it converted, and the leakage check's shuffle groups it reused). Options as for
    `prepare`."""
    started = time.monotonic()
    job = prepare(flags, config, **values)
    settings = job.settings
    counters, summary, lock = {}, None, None
    try:
        if job.pipeline is not None:
            with Progress(settings), console.own_worker_lines(), worker_watch.watching():
                result = job.pipeline.run()
                result.wait_until_finish()
            counters = _counters(result)
        lock, summary = _summary_under_lock(settings.output_dir, settings.lock_token)
    finally:
        if job.pipeline is not None and summary is None:   # A commit removed its temp folder.
            output_folder.drop_if_unused(settings.output_dir, settings.run_id)
        output_lock.release(settings.output_dir, settings.lock_token, seen=lock)
        if job.sample_dir:
            shutil.rmtree(job.sample_dir, ignore_errors=True)
    summary.update(seconds=time.monotonic() - started, output_dir=settings.output_dir,
                   converted_now=job.pipeline is not None,
                   chunks={'converted': counters.get('chunks_converted', 0),
                           'reused': counters.get('chunks_reused', 0),
                           'link_groups_reused': counters.get('link_groups_reused', 0),
                           'inputs_converted': (counters.get('images_written', 0)
                                                + counters.get('images_skipped', 0))})
    return summary


def _summary_under_lock(output_dir: str, token: str) -> tuple[output_lock.LockState, dict]:
    """The lock, checked to be still `token`'s (so the summary is this run's), and summary.json,
    read at once."""
    lock, summary = fileio.at_once(lambda step: step(), [
        lambda: output_lock.check_lock(output_dir, token),
        lambda: metadata.load_json(output_dir, metadata.SUMMARY)])
    return lock, summary


def plan(flags: 'Sequence[str] | Options' = (), config: ImageClassificationConfig | None = None,
         *, started: float | None = None, **values) -> dict:
    """Lists the input and plans the conversion without converting anything: per split the
    inputs, ignored files, labels, shards and estimated sizes, with the time and worker
    estimate of pipeline/plan.py; on a local runner, with the time on this machine, whose
    fixed part counts from `started` (time.monotonic() when the command started, so that its
    imports count; default: now). Options as for `prepare` (with --plan_only)."""
    started = time.monotonic() if started is None else started
    parsed = _parsed(flags, dict(values, plan_only=True))
    if not parsed.converter.plan_only:
        raise ValueError('plan() needs options with plan_only set')
    job = prepare(parsed, config)
    try:
        job.pipeline.run().wait_until_finish()
        document = json.loads(fileio.read_bytes(job.plan_path))
        planned = time.monotonic() - started
    finally:
        fileio.delete([job.plan_path] if fileio.exists(job.plan_path) else [])
        if job.sample_dir:
            shutil.rmtree(job.sample_dir, ignore_errors=True)
    if not is_direct(job.options):
        return estimate(document)
    output_dir = job.options.view_as(ConverterOptions).output_dir or ''
    here = Here(cores=os.cpu_count() or 1, workers=_local_workers(job.options),
                planning_seconds=planned, output_in_cloud=fileio.is_gcs(output_dir),
                request_seconds=(gcs.round_trip_seconds(output_dir)
                                 if fileio.is_gcs(output_dir) else 0.0))
    return estimate(document, here)


def _local_workers(options: PipelineOptions) -> int:
    """The worker processes a local run converts in (threads share one core's worth of Python)."""
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode != 'multi_processing':
        return 1
    return direct.direct_num_workers or os.cpu_count() or 1


def _counters(result) -> dict:
    query = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))
    totals = {}
    for counter in query['counters']:
        totals[counter.key.metric.name] = totals.get(counter.key.metric.name, 0) + counter.committed
    return totals


def is_remote(options: PipelineOptions) -> bool:
    """Whether the job is handed to a service that runs it without this process: Dataflow, or
    a portable job service at host:port whose workers are not this process (any environment but
    LOOPBACK). Every other runner, an embedded job service included, needs this process until
    the job ends."""
    if is_dataflow(options):
        return True
    portable = options.view_as(PortableOptions)
    endpoint = portable.job_endpoint or ''
    return (endpoint not in ('', 'embed')
            and str(portable.environment_type or 'DOCKER').upper() != 'LOOPBACK')

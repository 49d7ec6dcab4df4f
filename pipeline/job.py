"""The job API: `prepare` turns a launch (pipeline/launch.py) into ConversionSettings, takes the
output lock and builds the pipeline; `convert` runs it to the end and returns the run's summary
(a job a service runs too: it follows it, pipeline/remote_job.py); `submit` hands a job to its
service and returns; `follow` waits for a job submitted earlier; `plan` lists and plans without
converting. The command line (pipeline/command.py), the Flex
Template launcher through it, and the classic builder (pipeline/classic/builder.py) all call it.
Each takes a Launch, or flags and option values by name, resolved once here.
"""
import contextlib
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

from pipeline import console, dataflow, remote_job, sample_data, worker_watch
from pipeline.base import resume_key
from pipeline.base.choices import LeakageAction
from pipeline.base.settings import FEW_ERRORS, ConversionSettings
from pipeline.inputs.classic_config import ImageClassificationConfig
from pipeline.errors import DatasetError
from pipeline.graph import build_pipeline, build_plan_pipeline
from pipeline.io import fileio, gcs
from pipeline.launch import Launch, RunnerKind, resolve
from pipeline.local_runner import LocalRunner
from pipeline.output import bounded_reads, metadata, output_lock, shard_formats
from pipeline.output.folder import OutputFolder
from pipeline.plan import Here, estimate
from pipeline.progress import Progress
from pipeline.inputs.kinds import Source
from pipeline.sources import input_given, input_paths, input_root, resolve_source
from transforms.leakage import NAMESPACE
from transforms.local_rate import process_memory

LOG = logging.getLogger('image_tfrecords')
SAMPLE_OUTPUT = 'sample_tfrecords'
SAMPLE_DESCRIPTION = 'A sample dataset, generated and converted by python -m pipeline.run alone.'
_NAME = re.compile(rf'^{metadata.DATASET_NAME}$')


@dataclasses.dataclass
class Job:
    """A prepared conversion. `pipeline` is None when there is nothing left to do (a rerun that
    completed its own interrupted commit)."""
    pipeline: beam.Pipeline | None
    settings: ConversionSettings
    launch: Launch
    sample_dir: str | None = None   # A generated sample input, removed after the run.
    plan_path: str | None = None    # Where a plan-only job writes its plan.


def launch_of(flags: 'Sequence[str] | Launch' = (), **values) -> Launch:
    """A Launch as given, or resolved from command-line `flags` and option `values` by name
    (which take precedence)."""
    if isinstance(flags, Launch):
        return flags.replaced(**values) if values else flags
    return resolve(flags, **values)


def prepare(flags: 'Sequence[str] | Launch' = (), config: ImageClassificationConfig | None = None,
            check_buckets: bool = True, **values) -> Job:
    """Resolves the input and the settings, takes the output lock and builds the pipeline
    without running it. `flags`: a Launch, or command-line flags, with option `values` by name.
    A job that a service runs (launch.remote) releases the lock in its commit step; otherwise
    the caller runs the job to its end, then releases it. Dry runs and template files take no
    lock. `check_buckets`: whether the gs:// buckets named are checked (a dry run without
    credentials cannot)."""
    launch = launch_of(flags, **values)
    sample_dir = None
    opts = launch.converter
    if not (opts.output_dir or input_given(opts, config)):
        sample_dir = tempfile.mkdtemp(prefix='sample_images_')
        launch = _sample_launch(launch, sample_data.write_sample_dataset(sample_dir))
    try:
        return _prepare(launch, config, sample_dir, check_buckets)
    except BaseException:
        if sample_dir:
            shutil.rmtree(sample_dir, ignore_errors=True)
        raise


def _sample_launch(launch: Launch, sample_input: str) -> Launch:
    """The launch of the generated sample: into ./sample_tfrecords, replacing the sample an
    earlier run wrote there (and what unfinished runs left), and no other dataset."""
    info = bounded_reads.read_metadata_files(SAMPLE_OUTPUT, metadata.DATASET_INFO)[0] or {}
    held = OutputFolder(SAMPLE_OUTPUT).dataset_files() if os.path.isdir(SAMPLE_OUTPUT) else []
    if held and info.get('description') != SAMPLE_DESCRIPTION:
        raise DatasetError(f'./{SAMPLE_OUTPUT} holds a dataset that is not the generated sample '
                           f'(e.g. {held[0]}); the sample replaces only its own. Move it away, '
                           'or run the command from another folder')
    LOG.info('no input given: converting a generated sample dataset into ./%s', SAMPLE_OUTPUT)
    return launch.replaced(input_dir=sample_input, output_dir=SAMPLE_OUTPUT,
                           description=SAMPLE_DESCRIPTION, overwrite=True)


def _prepare(launch: Launch, config, sample_dir: str | None, check_buckets: bool) -> Job:
    opts = launch.converter
    if not opts.output_dir and not opts.plan_only:
        raise DatasetError('--output_dir is required: a local folder or gs://bucket/prefix')
    output_dir = (opts.output_dir or '').rstrip('/')
    folder = OutputFolder(output_dir)
    if output_dir:
        folder.check()
    if check_buckets:
        _check_buckets([output_dir, *input_paths(opts)])
    source = resolve_source(opts, config)
    if output_dir:
        folder.check_outside(input_root(opts))
    settings = _settings(launch, source, output_dir)
    runner = LocalRunner() if launch.runner is RunnerKind.LOCAL else None
    if opts.plan_only:  # Writes nothing to the output: no lock.
        path = _plan_path(launch, settings)
        return Job(build_plan_pipeline(runner, launch.beam, source.partitions, settings, path,
                                       measure_rate=runner is not None),
                   settings, launch, sample_dir, path)
    if launch.dry_run or launch.template_location:  # A job description only.
        return Job(build_pipeline(runner, launch.beam, source.partitions, settings), settings,
                   launch, sample_dir)
    token = folder.lock(settings.run_id, launch.runner_name, not launch.remote, opts.break_lock,
                        lambda job: remote_job.ended(launch, job))
    try:
        settings = dataclasses.replace(settings, lock_token=token)
        listed_now = ((lambda: _list_again(runner, launch, source, settings))
                      if runner is not None else None)
        started = folder.start(settings, listed_now, opts.clean_temp)
        if started is None:
            return Job(None, settings, launch, sample_dir)
        return Job(build_pipeline(runner, launch.beam, source.partitions, started), started,
                   launch, sample_dir)
    except BaseException:
        folder.release(token)
        raise


def _settings(launch: Launch, source: Source, output_dir: str) -> ConversionSettings:
    opts = launch.converter
    name = opts.dataset_name or source.name
    if not _NAME.match(name):
        raise DatasetError(f'dataset name {name!r} must be lower_snake_case (a-z, 0-9, _); '
                           'set --dataset_name')
    return ConversionSettings(
        output_dir=output_dir, dataset_name=name, splits=source.splits, source=source.identity,
        image=opts.image_options(), labels=source.labels, num_shards=opts.num_shards,
        target_shard_mb=opts.target_shard_mb, skip_duplicates=opts.skip_duplicates,
        output_formats=tuple(f.name for f in shard_formats.parse(opts.output_format)),
        version=source.version, leakage=LeakageAction(opts.leakage), dali_index=opts.dali_index,
        description=opts.description or source.description,
        max_error_ratio=opts.max_error_ratio,
        few_errors=0 if 'max_error_ratio' in launch.given else FEW_ERRORS,
        reads_in_flight=opts.reads_in_flight,
        max_input_bytes=opts.max_input_mb << 20, overwrite=opts.overwrite,
        release_lock=launch.remote, workers=launch.workers,
        resume_key=b'' if opts.plan_only else resume_key.load())


def _check_buckets(paths: list[str | None]) -> None:
    """Checks each gs:// bucket among `paths` once."""
    buckets = {}   # Bucket -> a path in it.
    for path in paths:
        if path and fileio.is_gcs(path):
            buckets.setdefault(gcs.split_gcs(path)[0], path)
    for path in buckets.values():
        fileio.check_bucket(path)


def _plan_path(launch: Launch, settings: ConversionSettings) -> str:
    """A new file for the plan: local on a local run, else under --temp_location."""
    if launch.runner is RunnerKind.LOCAL:
        handle, path = tempfile.mkstemp(prefix='image-tfrecords-plan-', suffix='.json')
        os.close(handle)
        return path
    return fileio.join(launch.temp_location, f'plan-{settings.run_id}-{uuid.uuid4().hex[:8]}.json')


def _list_again(runner, launch: Launch, source: Source, settings: ConversionSettings) -> dict:
    """The plan document of the input as it is now (a local plan-only job)."""
    handle, path = tempfile.mkstemp(prefix='image-tfrecords-listing-', suffix='.json')
    os.close(handle)
    try:
        _run_to_end(build_plan_pipeline(runner, launch.beam, source.partitions, settings, path,
                                        sample=False), launch)
        return json.loads(fileio.read_bytes(path))
    finally:
        os.remove(path)


def convert(flags: 'Sequence[str] | Launch' = (), config: ImageClassificationConfig | None = None,
            **values) -> dict:
    """Runs a conversion to the end and returns its summary (see summary.json), with the
    seconds it took, whether it converted now (`converted_now`: False when the output already
    held this command's dataset) and the chunks it converted and reused (and the inputs in the
    chunks it converted, and the leakage check's shuffle groups it reused). `flags`: a Launch,
    or command-line flags, with option `values` by name."""
    started = time.monotonic()
    job = prepare(flags, config, **values)
    settings = job.settings
    counters, summary, lock, going_on = {}, None, None, False
    folder = OutputFolder(settings.output_dir)
    try:
        if job.pipeline is not None:
            with Progress(settings), console.relay_worker_lines():
                result = _run_to_end(job.pipeline, job.launch, settings)
            counters = _counters(result)
        if job.launch.remote and job.pipeline is not None:   # Its commit released the lock.
            summary = _own_summary(settings.output_dir, settings.run_id)
        else:
            lock, summary = _summary_under_lock(folder, settings.lock_token)
    except KeyboardInterrupt as stop:
        going_on = hasattr(stop, 'job_goes_on')   # Its job still holds the lock.
        if job.pipeline is not None and job.launch.runner is RunnerKind.LOCAL:
            folder.finish_stopped(settings.run_id)   # Begun: ends.
        if _committed(settings):   # The stop came once the dataset was in place.
            stop.committed = settings.output_dir
        raise
    except remote_job.JobLost:
        going_on = True
        raise
    finally:
        if not going_on:
            if job.pipeline is not None and summary is None:   # A commit removed its temp folder.
                folder.drop_if_unused(settings.run_id)
            folder.release(settings.lock_token, seen=lock)
        if job.sample_dir:
            shutil.rmtree(job.sample_dir, ignore_errors=True)
    return _with_counters(summary, counters, started, settings.output_dir, job.pipeline is not None)


def _with_counters(summary: dict, counters: dict, started: float, output_dir: str,
                   converted_now: bool) -> dict:
    """`summary` with the run's seconds and what its counters say of its chunks."""
    summary.update(seconds=time.monotonic() - started, output_dir=output_dir,
                   converted_now=converted_now,
                   chunks={'converted': counters.get('chunks_converted', 0),
                           'reused': counters.get('chunks_reused', 0),
                           'link_groups_reused': counters.get('link_groups_reused', 0),
                           'inputs_converted': (counters.get('images_written', 0)
                                                + counters.get('images_skipped', 0))})
    return summary


def _committed(settings: ConversionSettings) -> bool:
    """Whether the output holds the dataset of this run (its summary names the run)."""
    try:
        return metadata.load_json(settings.output_dir, metadata.SUMMARY).get('run_id') == \
            settings.run_id
    except Exception:   # None there, or not readable: not committed as far as can be told.
        return False


def _run_to_end(pipeline, launch: Launch, settings: ConversionSettings | None = None):
    """Runs `pipeline` to its end and returns its result; a local one under watch
    (pipeline/worker_watch.py): its workers, and a stop signal that the runner would otherwise
    report as an error of the step it stopped; a job a service runs followed until it ends (a
    stop leaves it running, `stop.job_goes_on` naming it; a failure is a JobFailed)."""
    if launch.remote:
        result, job = _submitted(pipeline, launch)
        with _going_on(launch, job):
            _name(settings, job)
            remote_job.wait(job, result)
        return result
    local = launch.runner is RunnerKind.LOCAL
    with worker_watch.watching() if local else contextlib.nullcontext():
        result = pipeline.run()
        result.wait_until_finish()
    return result


def _submitted(pipeline, launch: Launch) -> tuple[object, dict]:
    """Hands `pipeline` to its service: its result and the job, as the lock names it."""
    with dataflow.one_build_at_a_time(launch.beam):
        result = pipeline.run()
    return result, remote_job.job_of(launch, result)


def _name(settings: ConversionSettings, job: dict) -> None:
    """Names the job in the output's lock, and says it was submitted."""
    OutputFolder(settings.output_dir).name_job(settings.lock_token, job)
    LOG.info('submitted as job %s to %s', job['id'], job['where'])


@contextlib.contextmanager
def _going_on(launch: Launch, job: dict):
    """A stop in the block (once the job is submitted) says that the job goes on."""
    try:
        yield
    except KeyboardInterrupt as stop:
        stop.job_goes_on = (f'the job {job["id"]} goes on without this command (cancel it with '
                            f'{remote_job.cancel_hint(launch, job)}); follow it again with '
                            f'{remote_job.follow_command(launch, job)}')
        raise


def submit(flags: 'Sequence[str] | Launch' = (), **values) -> tuple[ConversionSettings, dict | None]:
    """Hands the job to its service and returns at once: its settings and the job as the lock
    names it (None: the output already held this command's dataset, or a template was written;
    no job holds the lock then)."""
    prepared = prepare(flags, **values)
    settings, launch = prepared.settings, prepared.launch
    if launch.template_location:   # A job description, written for a launcher: no lock.
        with dataflow.one_build_at_a_time(launch.beam):
            prepared.pipeline.run()
        return settings, None
    folder = OutputFolder(settings.output_dir)
    if prepared.pipeline is None:
        folder.release(settings.lock_token)
        return settings, None
    try:
        job = _submitted(prepared.pipeline, launch)[1]
        _name(settings, job)
        return settings, job
    except BaseException:
        folder.release(settings.lock_token)
        raise


def follow(flags: 'Sequence[str] | Launch' = (), **values) -> dict:
    """Waits for the job --attach names, submitted earlier into --output_dir, and returns the
    summary of the dataset it committed; a job that failed frees the output (its lock and an
    unused temporary folder) and raises a JobFailed."""
    started = time.monotonic()
    launch = launch_of(flags, **values)
    job_id, output_dir = launch.converter.attach, (launch.converter.output_dir or '').rstrip('/')
    if not (launch.remote and output_dir):
        raise DatasetError('--attach=JOB_ID follows a job a service runs: give the --output_dir '
                           'and the service (--runner=DataflowRunner --project --region, or '
                           '--runner=PortableRunner --job_endpoint) it was submitted with')
    try:
        result = remote_job.attach(launch, job_id)
    except Exception as exc:
        raise DatasetError(f'job {job_id} not found at {remote_job.where(launch)} '
                           f'({type(exc).__name__}); give the service it was submitted to') from None
    job = {'id': job_id, 'runner': launch.runner_name, 'where': remote_job.where(launch)}
    folder = OutputFolder(output_dir)
    lock = folder.read_lock()
    holder = lock.holder if lock and lock.holder and \
        (lock.holder.get('job') or {}).get('id') == job_id else None
    run = (folder.temp_dir(holder['run_id']), holder['token']) if holder else None
    try:
        with Progress(run) if run else contextlib.nullcontext(), console.relay_worker_lines(), \
                _going_on(launch, job):
            remote_job.wait(job, result)
    except remote_job.JobFailed:
        if holder:   # The job is over: its lock and what it left unused go.
            folder.drop_if_unused(holder['run_id'])
            folder.release(holder['token'])
        raise
    summary = _own_summary(output_dir, holder['run_id'] if holder else None)
    return _with_counters(summary, _counters(result), started, output_dir, True)


def _own_summary(output_dir: str, run_id: str | None) -> dict:
    """summary.json of `output_dir`, which a job that ended DONE committed (of run `run_id`)."""
    summary = metadata.load_json(output_dir, metadata.SUMMARY)
    if run_id is not None and summary.get('run_id') != run_id:
        raise DatasetError(f'the job ended, and {output_dir} holds the dataset of another run '
                           f'({summary.get("run_id")}); run verify on it')
    return summary


def _summary_under_lock(folder: OutputFolder, token: str) -> tuple[output_lock.LockState, dict]:
    """The lock, checked to be still `token`'s (so the summary is this run's), and summary.json,
    read at once."""
    lock, summary = fileio.at_once(lambda step: step(), [
        lambda: folder.check_lock(token),
        lambda: metadata.load_json(folder.path, metadata.SUMMARY)])
    return lock, summary


def plan(flags: 'Sequence[str] | Launch' = (), config: ImageClassificationConfig | None = None,
         *, started: float | None = None, **values) -> dict:
    """Lists the input and plans the conversion without converting anything: per split the
    inputs, ignored files, labels, shards and estimated sizes, with the time and worker
    estimate of pipeline/plan.py; on a local runner, with the time on this machine, whose
    fixed part counts from `started` (time.monotonic() when the command started, so that its
    imports count; default: now). Options as for `convert` (with --plan_only)."""
    started = time.monotonic() if started is None else started
    launch = launch_of(flags, **values)
    if not launch.converter.plan_only:
        launch = launch.replaced(plan_only=True)
    job = prepare(launch, config)
    try:
        _run_to_end(job.pipeline, job.launch)
        document = json.loads(fileio.read_bytes(job.plan_path))
        planned = time.monotonic() - started
    finally:
        fileio.delete([job.plan_path] if fileio.exists(job.plan_path) else [])
        if job.sample_dir:
            shutil.rmtree(job.sample_dir, ignore_errors=True)
    reencode = job.launch.converter.reencode
    if job.launch.runner is not RunnerKind.LOCAL:
        return estimate(document, reencode=reencode)
    output_dir = job.launch.converter.output_dir or ''
    here = Here(cores=os.cpu_count() or 1, workers=max(1, job.launch.workers),
                planning_seconds=planned, output_in_cloud=fileio.is_gcs(output_dir),
                request_seconds=(gcs.round_trip_seconds(output_dir)
                                 if fileio.is_gcs(output_dir) else 0.0),
                launcher_peak_bytes=process_memory().get('peak', 0),
                one_process=not job.launch.workers)
    return estimate(document, here, reencode)


def _counters(result) -> dict:
    query = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))
    totals = {}
    for counter in query['counters']:
        totals[counter.key.metric.name] = totals.get(counter.key.metric.name, 0) + counter.committed
    return totals

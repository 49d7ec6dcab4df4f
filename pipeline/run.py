"""Command line: `python -m pipeline.run --input_dir ... --output_dir ...` (see --help).

Without any input or output flag it generates a small sample dataset and converts it into
./sample_tfrecords, so the first run shows what the tool does.
"""
import dataclasses
import json
import logging
import re
import shutil
import sys
import tempfile
import time
import traceback

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import (
    DirectOptions, GoogleCloudOptions, PipelineOptions, StandardOptions, TestOptions)

from pipeline import sample_data
from pipeline.config import ImageClassificationConfig
from pipeline.console import log_file_path, send_stderr_to, setup_console_logging
from pipeline.dataflow import apply_dataflow_defaults, is_dataflow
from pipeline.graph import build_pipeline
from pipeline.options import ConverterOptions, check_flags, given_flags, help_text
from pipeline.sources import resolve_source
from transforms import commit, fileio, lock, metadata, resume
from transforms.errors import DatasetError
from transforms.settings import SPLITS, TEMP_PREFIX, ConversionSettings
from transforms.write_shards import NAMESPACE

LOG = logging.getLogger('image_tfrecords')
SAMPLE_OUTPUT = 'sample_tfrecords'
_NAME = re.compile(r'^[a-z][a-z0-9_]*$')


@dataclasses.dataclass
class Job:
    """A prepared conversion. `pipeline` is None when there is nothing left to do (a rerun that
    completed its own interrupted commit)."""
    pipeline: beam.Pipeline | None
    settings: ConversionSettings
    options: PipelineOptions
    sample_dir: str | None = None   # A generated sample input, removed after the run.


def prepare(argv: list[str], config: ImageClassificationConfig | None = None,
            waits: bool = True) -> Job:
    """Checks the flags, takes the output lock and builds the pipeline without running it.

    `waits`: the caller runs the job to its end (and then releases the lock); otherwise the
    job's commit step releases it. Dry runs and template files take no lock.
    """
    check_flags(argv)
    options = PipelineOptions(argv)
    opts = options.view_as(ConverterOptions)
    _check_numbers(opts)
    sample_dir = None
    if not (opts.output_dir or opts.input_dir or opts.config or config
            or any(getattr(opts, f'csv_{s}') for s in SPLITS)):
        sample_dir = tempfile.mkdtemp(prefix='sample_images_')
        opts.input_dir = sample_data.write_sample_dataset(sample_dir)
        opts.output_dir, opts.overwrite = SAMPLE_OUTPUT, True
        LOG.info('no input given: converting a generated sample dataset into ./%s', SAMPLE_OUTPUT)
    try:
        return _prepare(argv, options, opts, config, waits, sample_dir)
    except BaseException:
        if sample_dir:
            shutil.rmtree(sample_dir, ignore_errors=True)
        raise


def _prepare(argv: list[str], options: PipelineOptions, opts: ConverterOptions, config, waits: bool,
             sample_dir: str | None) -> Job:
    if not opts.output_dir:
        raise DatasetError('--output_dir is required: a local folder or gs://bucket/prefix')
    output_dir = opts.output_dir.rstrip('/')
    for path in [output_dir, opts.input_dir, opts.labels_file,
                 *(getattr(opts, f'csv_{s}') for s in SPLITS)]:
        fileio.check_bucket(path or '')
    source = resolve_source(opts, config)
    name = opts.dataset_name or source.name
    if not _NAME.match(name):
        raise DatasetError(f'dataset name {name!r} must be lower_snake_case (a-z, 0-9, _); '
                           'set --dataset_name')
    settings = ConversionSettings(
        output_dir=output_dir, dataset_name=name, splits=source.splits,
        image=opts.image_options(), labels=source.labels, num_shards=opts.num_shards,
        target_shard_mb=opts.target_shard_mb, skip_duplicates=opts.skip_duplicates,
        description=opts.description or source.description, version=source.version,
        max_error_ratio=opts.max_error_ratio, overwrite=opts.overwrite, release_lock=not waits)
    given = given_flags(argv)
    if is_dataflow(options):
        apply_dataflow_defaults(options, given)
    _default_to_all_cores(options, given)
    if (options.view_as(TestOptions).dry_run
            or options.view_as(GoogleCloudOptions).template_location):  # A job description only.
        return Job(build_pipeline(options, source.partitions, settings), settings, options,
                   sample_dir)
    runner = str(options.view_as(StandardOptions).runner or 'DirectRunner')
    token = lock.acquire(output_dir, settings.run_id, runner, waits, opts.break_lock)
    try:
        settings = dataclasses.replace(settings, lock_token=token)
        done = _recover(settings)
        if done:
            return Job(None, settings, options, sample_dir)
        _check_existing(settings)
        settings = dataclasses.replace(settings, resuming=_temp_folders(settings, opts))
        return Job(build_pipeline(options, source.partitions, settings), settings, options,
                   sample_dir)
    except BaseException:
        lock.release(output_dir, token)
        raise


def _recover(settings: ConversionSettings) -> bool:
    """Completes an interrupted commit; True if it was this very run's (nothing left to do)."""
    journal = commit.interrupted_commit(settings.output_dir)
    if journal is None:
        return False
    LOG.warning('%s', commit.finish_commit(settings.output_dir))
    return journal['run_id'] == settings.run_id


def _check_existing(settings: ConversionSettings) -> None:
    existing = commit.existing_dataset_files(settings.output_dir)
    if existing and not settings.overwrite:
        raise DatasetError(f'{settings.output_dir} already holds a dataset ({len(existing)} files, '
                           f'e.g. {fileio.basename(existing[0])}); pass --overwrite to replace it '
                           'or choose another --output_dir')


def _temp_folders(settings: ConversionSettings, opts: ConverterOptions) -> bool:
    """Says what unfinished runs left in the output and removes it as the flags ask: other
    runs' temporary folders with --overwrite or --clean_temp, this run's own (its resume state)
    with --clean_temp. Returns whether this run can reuse earlier work."""
    present = fileio.is_gcs(settings.output_dir) or fileio.exists(settings.output_dir)
    folders = [e for e in fileio.list_dir(settings.output_dir)
               if e.is_dir and e.name.startswith(TEMP_PREFIX)] if present else []
    ours = [e for e in folders if e.path.rstrip('/') == settings.temp_dir.rstrip('/')]
    removed = folders if opts.clean_temp else [e for e in folders if e not in ours] \
        if opts.overwrite else []
    kept_others = [e for e in folders if e not in ours and e not in removed]
    if removed:
        sizes = _sizes(removed)
        for entry in removed:
            fileio.delete_tree(entry.path)
        LOG.warning('removed temporary folders of unfinished runs: %s', sizes)
    if kept_others:
        LOG.warning('%s holds temporary folders of runs with other options: %s; --clean_temp '
                    'removes them', settings.output_dir, _sizes(kept_others))
    if not ours or ours[0] in removed:
        return False
    chunks, shards = resume.finished_work(settings.temp_dir)
    LOG.warning('resuming run %s: an earlier attempt finished %d chunks and %d shards; they are '
                'reused where inputs and options are unchanged', settings.run_id, chunks, shards)
    return True


def _sizes(folders: list[fileio.Entry]) -> str:
    return ', '.join(f'{e.name} ({_folder_bytes(e.path) / 1e6:.1f} MB)' for e in folders)


def _folder_bytes(path: str) -> int:
    return sum(m.size_in_bytes for m in fileio.match(fileio.join(path, '**')))


def _check_numbers(opts: ConverterOptions) -> None:
    checks = [(1 <= opts.jpeg_quality <= 100, '--jpeg_quality must be 1..100'),
              (opts.num_shards >= 0, '--num_shards must be >= 0 (0: automatic)'),
              (opts.target_shard_mb > 0, '--target_shard_mb must be > 0'),
              (0 <= opts.max_error_ratio <= 1, '--max_error_ratio must be in 0..1'),
              (opts.label_offset >= 0, '--label_offset must be >= 0'),
              (opts.max_pixels >= 0 and opts.max_side >= 0, '--max_pixels/--max_side must be >= 0')]
    for ok, message in checks:
        if not ok:
            raise DatasetError(message)


def _is_direct(options: PipelineOptions) -> bool:
    runner = options.view_as(StandardOptions).runner
    return runner is None or str(runner).lower() in ('directrunner', 'direct')


def _default_to_all_cores(options: PipelineOptions, given: set[str]) -> None:
    """On DirectRunner, use one worker process per core unless the flags say otherwise."""
    if _is_direct(options) and not {'direct_num_workers', 'direct_running_mode'} & given:
        direct = options.view_as(DirectOptions)
        direct.direct_num_workers, direct.direct_running_mode = 0, 'multi_processing'


def convert(argv: list[str], config: ImageClassificationConfig | None = None) -> dict:
    """Runs a conversion to the end and returns its summary (see summary.json)."""
    started = time.monotonic()
    job = prepare(argv, config)
    settings = job.settings
    counters = {}
    try:
        if job.pipeline is not None:
            result = job.pipeline.run()
            result.wait_until_finish()
            counters = _counters(result)
        lock.check(settings.output_dir, settings.lock_token)
        summary = metadata.load_json(settings.output_dir, metadata.SUMMARY)
    finally:
        lock.release(settings.output_dir, settings.lock_token)
        if job.sample_dir:
            shutil.rmtree(job.sample_dir, ignore_errors=True)
    summary.update(seconds=time.monotonic() - started, output_dir=settings.output_dir,
                   chunks={'converted': counters.get('chunks_converted', 0),
                           'reused': counters.get('chunks_reused', 0)})
    return summary


def _counters(result) -> dict:
    query = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))
    totals = {}
    for counter in query['counters']:
        totals[counter.key.metric.name] = totals.get(counter.key.metric.name, 0) + counter.committed
    return totals


def format_summary(summary: dict) -> str:
    """The end-of-run table: inputs, records, shards, bytes, skipped and ignored files per split;
    records per class; the overall rate."""
    splits = {name: summary['splits'][name] for name in SPLITS if name in summary['splits']}
    lines = [f'{"split":<12}{"inputs":>9}{"records":>9}{"skipped":>9}{"ignored":>9}{"shards":>8}'
             f'{"MB":>9}{"kept as is":>12}']
    for split, s in splits.items():
        lines.append(f'{split:<12}{s["inputs"]:>9}{s["records"]:>9}{s["skipped"]:>9}'
                     f'{s["ignored"]:>9}{s["shards"]:>8}{s["bytes"] / 1e6:>9.1f}'
                     f'{s["passed_through"]:>12}')
    classes = sorted({c for s in splits.values() for c in s['classes']})
    shown = classes[:20]
    lines.append('')
    lines.append(f'{"class":<24}' + ''.join(f'{split:>12}' for split in splits))
    for name in shown:
        lines.append(f'{name[:23]:<24}' + ''.join(
            f'{s["classes"].get(name, 0):>12}' for s in splits.values()))
    if len(classes) > len(shown):
        lines.append(f'... and {len(classes) - len(shown)} more classes (see summary.json)')
    for split, s in splits.items():
        if s['empty_classes']:
            lines.append(f'{split}: no records for class(es) {", ".join(s["empty_classes"][:10])}'
                         f' (all their inputs were skipped; see errors-{split}.jsonl)')
    total = sum(s['inputs'] for s in splits.values())
    if summary.get('seconds'):
        lines.append(f'\n{total} inputs in {summary["seconds"]:.1f} s, start-up included '
                     f'({total / summary["seconds"]:.0f} inputs/s)')
    chunks = summary.get('chunks', {})
    if chunks.get('reused'):
        lines.append(f'reused {chunks["reused"]} of {chunks["reused"] + chunks["converted"]} '
                     'chunks converted by an earlier attempt')
    return '\n'.join(lines)


def _submit(argv: list[str]) -> int:
    """Submits the job to a runner that runs it on its own (Dataflow); its commit step releases
    the output lock."""
    job = prepare(argv, waits=False)
    settings = job.settings
    if job.pipeline is None:
        lock.release(settings.output_dir, settings.lock_token)
        print(f'Nothing to submit: {settings.output_dir} holds the dataset of this run.')
        return 0
    try:
        job.pipeline.run()
    except BaseException:
        lock.release(settings.output_dir, settings.lock_token)
        raise
    print(f'Job submitted; the dataset appears in {settings.output_dir} when it ends.')
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if '-h' in argv or '--help' in argv:
        print(help_text())
        return 0
    log_file = log_file_path()
    verbose = any(re.fullmatch(r'--verbose(=(1|true|yes|on))?', a, re.I) for a in argv)
    if not verbose:
        send_stderr_to(log_file)
    setup_console_logging(verbose, log_file)
    try:
        if not _is_direct(PipelineOptions(argv)):
            return _submit(argv)
        summary = convert(argv)
    except Exception as exc:  # Show the user's error in one line, not a traceback.
        LOG.debug('failed', exc_info=True)
        message = DatasetError.find_in(exc)
        if message is None:
            message = (f'{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ""} '
                       f'(the full trace is in {log_file}; --verbose prints it)')
            if verbose:
                traceback.print_exc()
        print(f'error: {message}', file=sys.stderr)
        return 2
    print(format_summary(summary))
    out = summary['output_dir']
    print(f'\nWrote {summary["dataset"]} to {out}. Load it with:\n'
          f'  import tensorflow_datasets as tfds\n'
          f'  tfds.builder_from_directory({out!r}).as_dataset(split="train")')
    logging.shutdown()
    fileio.delete([log_file])
    return 0


if __name__ == '__main__':
    sys.exit(main())

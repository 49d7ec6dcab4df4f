"""Command line: `python -m pipeline.run --input_dir ... --output_dir ...` (see --help).

Without any input flag it generates a small sample dataset and converts it into
./sample_tfrecords, so the first run shows what the tool does.
"""
import json
import logging
import re
import sys
import tempfile
import time
import uuid

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from pipeline import sample_data
from pipeline.config import ImageClassificationConfig
from pipeline.console import setup_console_logging
from pipeline.dataflow import apply_dataflow_defaults, is_dataflow
from pipeline.graph import build_pipeline
from pipeline.options import ConverterOptions, help_text
from pipeline.sources import resolve_source
from transforms import fileio, metadata
from transforms.commit import existing_dataset_files
from transforms.errors import DatasetError
from transforms.settings import SPLITS, ConversionSettings

LOG = logging.getLogger('image_tfrecords')
SAMPLE_OUTPUT = 'sample_tfrecords'
_NAME = re.compile(r'^[a-z][a-z0-9_]*$')


def prepare(argv: list[str], config: ImageClassificationConfig | None = None):
    """Checks the flags and builds (pipeline, settings, options) without running anything."""
    options = PipelineOptions(argv)
    opts = options.view_as(ConverterOptions)
    _check_numbers(opts)
    if not (opts.input_dir or opts.config or config or any(
            getattr(opts, f'csv_{s}') for s in SPLITS)):
        opts.input_dir = sample_data.write_sample_dataset(tempfile.mkdtemp(prefix='sample_images_'))
        LOG.info('no input given: generated a sample dataset in %s', opts.input_dir)
        if not opts.output_dir:
            opts.output_dir, opts.overwrite = SAMPLE_OUTPUT, True
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
    existing = existing_dataset_files(output_dir)
    if existing and not opts.overwrite:
        raise DatasetError(f'{output_dir} already holds a dataset ({len(existing)} files, e.g. '
                           f'{fileio.basename(existing[0])}); pass --overwrite to replace it '
                           'or choose another --output_dir')
    settings = ConversionSettings(
        output_dir=output_dir, temp_dir=fileio.join(output_dir, f'.tmp-{uuid.uuid4().hex[:12]}'),
        dataset_name=name, splits=source.splits, image=opts.image_options(),
        labels=source.labels, num_shards=opts.num_shards, target_shard_mb=opts.target_shard_mb,
        max_error_ratio=opts.max_error_ratio, skip_duplicates=opts.skip_duplicates,
        description=opts.description or source.description, version=source.version)
    if is_dataflow(options):
        apply_dataflow_defaults(options, argv)
    _default_to_all_cores(options, argv)
    return build_pipeline(options, source.partitions, settings), settings, options


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


def _default_to_all_cores(options: PipelineOptions, argv: list[str]) -> None:
    """On DirectRunner, use one worker process per core unless the flags say otherwise."""
    if not _is_direct(options):
        return
    if not any(a.startswith(('--direct_num_workers', '--direct_running_mode')) for a in argv):
        direct = options.view_as(DirectOptions)
        direct.direct_num_workers, direct.direct_running_mode = 0, 'multi_processing'


def convert(argv: list[str], config: ImageClassificationConfig | None = None) -> dict:
    """Runs a conversion to the end and returns its summary (see summary.json)."""
    pipeline, settings, options = prepare(argv, config)
    started = time.monotonic()
    try:
        pipeline.run().wait_until_finish()
    except Exception:
        fileio.delete(m.path for m in fileio.match(fileio.join(settings.temp_dir, '*.tfrecord*')))
        raise
    summary = json.loads(fileio.read_bytes(fileio.join(settings.output_dir, metadata.SUMMARY)))
    summary['seconds'] = time.monotonic() - started
    summary['output_dir'] = settings.output_dir
    return summary


def format_summary(summary: dict) -> str:
    """The end-of-run table: records, shards, bytes and skipped files per split; per class."""
    splits = summary['splits']
    lines = [f'{"split":<12}{"records":>10}{"shards":>8}{"MB":>10}{"skipped":>9}{"kept as is":>12}']
    splits = {name: splits[name] for name in SPLITS if name in splits}
    for split, s in splits.items():
        lines.append(f'{split:<12}{s["records"]:>10}{s["shards"]:>8}{s["bytes"] / 1e6:>10.1f}'
                     f'{s["skipped"]:>9}{s["passed_through"]:>12}')
    classes = sorted({c for s in splits.values() for c in s['classes']})
    shown = classes[:20]
    lines.append('')
    lines.append(f'{"class":<24}' + ''.join(f'{split:>12}' for split in splits))
    for name in shown:
        lines.append(f'{name[:23]:<24}' + ''.join(
            f'{s["classes"].get(name, 0):>12}' for s in splits.values()))
    if len(classes) > len(shown):
        lines.append(f'... and {len(classes) - len(shown)} more classes (see summary.json)')
    total = sum(s['records'] + s['skipped'] for s in splits.values())
    if summary.get('seconds'):
        lines.append(f'\n{total} images in {summary["seconds"]:.1f} s: '
                     f'{total / summary["seconds"]:.0f} images/s')
    return '\n'.join(lines)


def main(argv: list[str] | None = None) -> int:
    setup_console_logging()
    argv = sys.argv[1:] if argv is None else argv
    if '-h' in argv or '--help' in argv:
        print(help_text())
        return 0
    try:
        if not _is_direct(PipelineOptions(argv)):
            pipeline, settings, _ = prepare(argv)
            pipeline.run()
            print(f'Job submitted; the dataset appears in {settings.output_dir} when it ends.')
            return 0
        summary = convert(argv)
    except Exception as exc:  # Show the user's error in one line, not a traceback.
        message = DatasetError.find_in(exc)
        if message is None:
            raise
        print(f'error: {message}', file=sys.stderr)
        return 2
    print(format_summary(summary))
    print(f'\nWrote {summary["dataset"]} to {summary["output_dir"]}. Load it with:\n'
          f'  tfds.builder_from_directory({summary["output_dir"]!r}).as_dataset(split="train")')
    return 0


if __name__ == '__main__':
    sys.exit(main())

"""Command line: `python -m pipeline.run --input_dir ... --output_dir ...` (see --help).

Without any input or output flag it generates a small sample dataset and converts it into
./sample_tfrecords, so the first run shows what the tool does. The work is done by the job API
(pipeline/job.py), which the classic builder calls too.
"""
import gc
import os
import sys
import time

STARTED = time.monotonic()   # The command's start, before the imports below (seconds of them).
COMMAND = __name__ == '__main__' or os.path.basename(sys.argv[0]) == 'image-tfrecords'
if COMMAND:
    # The imports make ~200,000 objects that live as long as the process; full collections
    # among them cost the command ~0.3 s. They are frozen once imported (at the end).
    gc.disable()

import logging  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402

from apache_beam.options.pipeline_options import (  # noqa: E402
    GoogleCloudOptions, PipelineOptions, PortableOptions, TestOptions)

from pipeline import job, plan, run_folder  # noqa: E402
from pipeline.console import TRACE, send_stderr_to, setup_console_logging  # noqa: E402
from pipeline.credentials import check_credentials, missing_credentials  # noqa: E402
from pipeline.dataflow import check_locations, is_dataflow  # noqa: E402
from pipeline.dry_run import dry_run  # noqa: E402
from pipeline.output import output_lock, shard_formats  # noqa: E402
from pipeline.errors import DatasetError, printable  # noqa: E402
from pipeline.options import Options, help_text, parse  # noqa: E402
from pipeline.sources import input_paths  # noqa: E402
from transforms.findings import quality_lines  # noqa: E402
from pipeline.base.splits import SPLITS  # noqa: E402
from pipeline import worker_processes  # noqa: E402

LOG = logging.getLogger('image_tfrecords')


def format_summary(summary: dict) -> str:
    """The end-of-run table: inputs, records, shards, bytes, skipped and ignored files per split;
    records per class; the wall time and the rate of the inputs converted in it (work reused
    from an earlier attempt is counted apart)."""
    splits = {name: summary['splits'][name] for name in SPLITS if name in summary['splits']}
    dropped = any(s.get('dropped_copies') for s in splits.values())   # --leakage=drop
    lines = [f'{"split":<12}{"inputs":>9}{"records":>9}{"skipped":>9}'
             + (f'{"dropped":>9}' if dropped else '')
             + f'{"ignored":>9}{"shards":>8}{"MB":>9}{"kept as is":>12}{"damaged":>9}']
    for split, s in splits.items():
        lines.append(f'{split:<12}{s["inputs"]:>9}{s["records"]:>9}{s["skipped"]:>9}'
                     + (f'{s.get("dropped_copies", 0):>9}' if dropped else '')
                     + f'{s["ignored"]:>9}{s["shards"]:>8}{s["bytes"] / 1e6:>9.1f}'
                     f'{s["passed_through"]:>12}{s.get("damaged", 0):>9}')
    classes = sorted({c for s in splits.values() for c in s['classes']})
    shown = classes[:20]
    lines.append('')
    lines.append(f'{"class":<24}' + ''.join(f'{split:>12}' for split in splits))
    for name in shown:
        lines.append(f'{printable(name)[:23]:<24}' + ''.join(
            f'{s["classes"].get(name, 0):>12}' for s in splits.values()))
    if len(classes) > len(shown):
        lines.append(f'... and {len(classes) - len(shown)} more classes (see summary.json)')
    for split, s in splits.items():
        if s['empty_classes']:
            empty = ', '.join(map(printable, s['empty_classes'][:10]))
            lines.append(f'{split}: no records for class(es) {empty}'
                         f' (all their inputs were skipped; see errors-{split}.jsonl)')
    lines += quality_lines(summary)
    total = sum(s['inputs'] for s in splits.values())
    chunks = summary.get('chunks', {})
    converted = chunks.get('inputs_converted', total) if chunks.get('reused') else total
    if not summary.get('converted_now', True):
        lines.append(f'\n{total} inputs, converted by an earlier run of this command; nothing '
                     f'converted now ({summary.get("seconds", 0):.1f} s)')
    elif summary.get('seconds'):
        rate = f'{converted / summary["seconds"]:.0f} inputs/s'
        if converted != total:
            rate = f'{converted} converted now: {rate}'
        lines.append(f'\n{total} inputs in {summary["seconds"]:.1f} s of wall time, start-up '
                     f'included ({rate})')
    if chunks.get('reused'):
        lines.append(f'reused {chunks["reused"]} of {chunks["reused"] + chunks["converted"]} '
                     f'chunks converted by an earlier attempt ({total - converted} inputs)')
    return '\n'.join(lines)


def _submit(options: Options) -> int:
    """Hands the job to a service that runs it without this process (see job.is_remote); its
    commit step releases the output lock."""
    prepared = job.prepare(options, waits=False)
    settings = prepared.settings
    if prepared.pipeline is None:
        output_lock.release(settings.output_dir, settings.lock_token)
        print(f'Nothing to submit: {settings.output_dir} holds the dataset of this run.')
        return 0
    try:
        result = prepared.pipeline.run()
    except BaseException:
        output_lock.release(settings.output_dir, settings.lock_token)
        raise
    print(f'{follow_hint(prepared.options, result)}\n'
          f'The dataset appears in {settings.output_dir} when the job ends.')
    return 0


def follow_hint(options: PipelineOptions, result) -> str:
    """Where to follow a job handed to a service."""
    cloud = options.view_as(GoogleCloudOptions)
    if cloud.template_location:   # The Flex Template launcher: the service starts the job.
        return f'Job submitted as a template ({cloud.template_location})'
    if is_dataflow(options):
        job_id = result.job_id()
        return (f'Dataflow job {job_id} submitted; follow it at https://console.cloud.google.com/'
                f'dataflow/jobs/{cloud.region}/{job_id}?project={cloud.project} or with '
                f'`gcloud dataflow jobs describe {job_id} --region={cloud.region}`')
    endpoint = options.view_as(PortableOptions).job_endpoint
    return (f'Job submitted to the job service at {endpoint}; follow it in the UI of the runner '
            'behind it (Flink, Spark) or through its job API')


class Terminated(KeyboardInterrupt):
    """SIGTERM to the launcher: the run ends as on Ctrl-C (workers stopped, lock released)."""


def _terminate(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # The cleanup runs once.
    raise Terminated


def _interrupted(exc: KeyboardInterrupt) -> int:
    """Ends the command stopped by Ctrl-C or SIGTERM (the job's cleanup ran on the way out)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    terminated = isinstance(exc, Terminated)
    print(f'{"terminated (SIGTERM)" if terminated else "interrupted"}; rerun the same '
          'command to resume', file=sys.stderr)
    _done()
    return 143 if terminated else 130


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt as exc:   # Before _main's own handling began.
        return _interrupted(exc)


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if '-h' in argv or '--help' in argv:
        print(help_text())
        return 0
    own = run_folder.start()
    verbose = any(re.fullmatch(r'--verbose(=(1|true|yes|on))?', a, re.I) for a in argv)
    if not verbose:
        send_stderr_to(own.log_fd)
    setup_console_logging(verbose, own.log)
    if threading.current_thread() is threading.main_thread():   # Where signals are handled.
        signal.signal(signal.SIGTERM, _terminate)
    try:
        options = parse(argv)   # The only parse: every step below reads this object.
        beam_options, flags = options.beam, options.converter
        if is_dataflow(beam_options) and not beam_options.view_as(
                GoogleCloudOptions).template_location:
            check_locations(beam_options)   # Before anything touches the network.
        paths = [flags.output_dir, *input_paths(flags),
                 beam_options.view_as(GoogleCloudOptions).temp_location]
        if beam_options.view_as(TestOptions).dry_run and not flags.plan_only:
            print(dry_run(options, signed_in=missing_credentials(paths) is None))
            return _done()
        check_credentials(paths)
        if flags.plan_only:
            document = job.plan(options, started=STARTED)
            print(plan.dumps(document) if flags.plan_format == 'json'
                  else plan.format_plan(document))
            return _done()
        if job.is_remote(beam_options):
            return _submit(options)
        summary = job.convert(options)
        summary['seconds'] = time.monotonic() - STARTED   # The command's, not only the job's.
    except KeyboardInterrupt as exc:   # Ctrl-C or SIGTERM: the job's cleanup ran on the way out.
        return _interrupted(exc)
    except Exception as exc:  # Show the user's error in one line, not a traceback.
        message = DatasetError.find_in(exc)
        if message is not None:   # The user's to fix; the line says all there is.
            print(f'error: {message}', file=sys.stderr)
            _done()
            return 2
        logging.getLogger(TRACE).info('failed', exc_info=True)
        print(f'error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ""} '
              f'(the full trace is in {own.keep_log()}; --verbose prints it)', file=sys.stderr)
        return 2
    print(format_summary(summary))
    print(f'\nWrote {summary["dataset"]} to {summary["output_dir"]}. Load it with:\n'
          + load_hint(summary))
    return _done()


def load_hint(summary: dict) -> str:
    """How to load the dataset just written, for each format it has."""
    out = summary['output_dir']
    lines = ['import tensorflow_datasets as tfds']
    for shard_format in shard_formats.parse(','.join(summary['file_formats'])):
        lines += [line.format(out=out) for line in shard_format.load_lines]
    if summary.get('dali_index'):
        lines.append('# or with NVIDIA DALI: fn.readers.tfrecord(path=shards, index_path=[s + '
                     '".idx" for s in shards], ...) (docs/loading.md)')
    return '\n'.join(f'  {line}' for line in lines)


def _done() -> int:
    """The end of a command (its folder, the log in it, goes when the process exits: only a run
    that failed with an unexpected error keeps its log, which it names)."""
    logging.shutdown()
    return 0


if COMMAND:
    # What is imported is never scanned by a collection again, here or in the workers forked
    # next (a worker's full collection among them took ~0.12 s, in the middle of a run).
    gc.freeze()
    gc.enable()
    signal.signal(signal.SIGTERM, _terminate)
    try:
        worker_processes.prestart(sys.argv[1:])   # its workers, forked with every module imported.
    except KeyboardInterrupt as stopped:   # Ctrl-C or SIGTERM held back while they were forked.
        sys.exit(_interrupted(stopped))

if __name__ == '__main__':
    sys.exit(main())

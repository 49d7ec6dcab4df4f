"""The command line as a function: `main(argv, out, err) -> exit code`.

It resolves the flags (pipeline/launch.py), then describes a Dataflow job (--dry_run), plans
(--plan_only), submits a job to a service, or converts and prints the end-of-run table; every
line goes to the streams it is given, and it changes no process-wide state (no signal handler,
file descriptor, temporary folder or logging root setting outlives the call). What only a
process may do is pipeline/run.py's, which calls this. A problem of the input or the flags ends
it with one `error: ...` line and exit code 2; Ctrl-C (or a stopping signal, which the process
shell turns into `Terminated`) with one line and 130 (128 + the signal's number).
"""
import logging
import time
from typing import Callable, Sequence, TextIO

from pipeline import console, dataflow, dry_run, job, plan
from pipeline.credentials import check_credentials, missing_credentials
from pipeline.errors import DatasetError, stop_line
from pipeline.launch import Launch, RunnerKind, resolve
from pipeline.options import help_text
from pipeline.output import output_lock
from pipeline.run_summary import format_summary, load_hint
from pipeline.sources import input_paths


def main(argv: 'Sequence[str] | Launch', out: TextIO, err: TextIO, started: float | None = None,
         keep_log: Callable[[], str] | None = None) -> int:
    """Runs the command line `argv` (or a Launch resolved from it) to its end; returns its exit
    code. `started`: time.monotonic() when the command started (its imports count in the time
    it reports); `keep_log`: keeps the process's log and says where (for an unexpected error)."""
    started = time.monotonic() if started is None else started
    try:
        launch = argv if isinstance(argv, Launch) else resolve(argv)
        if launch.help:
            print(help_text(), file=out)
            return 0
        with console.showing(err, launch.verbose):
            return _run(launch, out, started)
    except KeyboardInterrupt as stop:   # The job's cleanup ran on the way out.
        line, code = stop_line(stop, getattr(stop, 'committed', None))
        print(line, file=err)
        return code
    except Exception as exc:   # One line, not a traceback.
        message = DatasetError.find_in(exc)
        if message is not None:   # The user's to fix; the line says all there is.
            print(f'error: {message}', file=err)
            return 2
        logging.getLogger(console.TRACE).info('failed', exc_info=True)
        where = f'the full trace is in {keep_log()}; ' if keep_log else ''
        print(f'error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ""} '
              f'({where}--verbose prints it)', file=err)
        return 2


def _run(launch: Launch, out: TextIO, started: float) -> int:
    flags = launch.converter
    paths = [flags.output_dir, *input_paths(flags), launch.temp_location]
    if launch.dry_run:
        print(dry_run.describe(launch, signed_in=missing_credentials(paths) is None), file=out)
        return 0
    check_credentials(paths)
    if flags.plan_only:
        document = job.plan(launch, started=started)
        print(plan.dumps(document) if flags.plan_format == 'json' else plan.format_plan(document),
              file=out)
        return 0
    if launch.remote:
        print(_submit(launch), file=out)
        return 0
    summary = job.convert(launch)   # A stop in it once committed says so (stop.committed).
    summary['seconds'] = time.monotonic() - started   # The command's, not only the job's.
    try:
        print(format_summary(summary), file=out)
        print(f'\nWrote {summary["dataset"]} to {summary["output_dir"]}. Load it with:\n'
              + load_hint(summary), file=out)
    except KeyboardInterrupt as stop:
        stop.committed = summary['output_dir']
        raise
    return 0


def _submit(launch: Launch) -> str:
    """Hands the job to a service that runs it without this process (its commit step releases
    the output lock); returns where to follow it."""
    prepared = job.prepare(launch)
    settings = prepared.settings
    if prepared.pipeline is None:
        output_lock.release(settings.output_dir, settings.lock_token)
        return f'Nothing to submit: {settings.output_dir} holds the dataset of this run.'
    try:
        with dataflow.one_build_at_a_time(launch.beam):
            result = prepared.pipeline.run()
    except BaseException:
        output_lock.release(settings.output_dir, settings.lock_token)
        raise
    return (f'{_follow_hint(launch, result)}\n'
            f'The dataset appears in {settings.output_dir} when the job ends.')


def _follow_hint(launch: Launch, result) -> str:
    """Where to follow a job handed to a service."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions, PortableOptions
    cloud = launch.beam.view_as(GoogleCloudOptions)
    if launch.template_location:   # The Flex Template launcher: the service starts the job.
        return f'Job submitted as a template ({launch.template_location})'
    if launch.runner is RunnerKind.DATAFLOW:
        job_id = result.job_id()
        return (f'Dataflow job {job_id} submitted; follow it at https://console.cloud.google.com/'
                f'dataflow/jobs/{cloud.region}/{job_id}?project={cloud.project} or with '
                f'`gcloud dataflow jobs describe {job_id} --region={cloud.region}`')
    endpoint = launch.beam.view_as(PortableOptions).job_endpoint
    return (f'Job submitted to the job service at {endpoint}; follow it in the UI of the runner '
            'behind it (Flink, Spark) or through its job API')

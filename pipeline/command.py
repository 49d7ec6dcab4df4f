"""The command line as a function: `main(argv, out, err) -> exit code`.

It resolves the flags (pipeline/launch.py), then describes a Dataflow job (--dry_run), plans
(--plan_only), or converts and prints the end-of-run table: also a job a service runs, which it
follows to its end (pipeline/remote_job.py), unless --detach only submits it (--attach=JOB_ID
follows it later). Every line goes to the streams it is given, and it changes no process-wide
state (no signal handler, file descriptor, temporary folder or logging root setting outlives the call). What only a
process may do is pipeline/run.py's, which calls this. A problem of the input or the flags ends
it with one `error: ...` line and exit code 2; Ctrl-C (or a stopping signal, which the process
shell turns into `Terminated`) with one line and 130 (128 + the signal's number), which leaves
a job a service runs running; a job that failed with one line holding its own error and 1.
"""
import logging
import time
from typing import Callable, Sequence, TextIO

from pipeline import console, dry_run, job, label_changes, plan, remote_job
from pipeline.credentials import check_credentials, missing_credentials
from pipeline.errors import DatasetError, stop_line
from pipeline.launch import Launch, resolve
from pipeline.options import help_text
from pipeline.run_summary import format_summary, load_hint
from pipeline.sources import input_paths
from transforms import plan_note


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
    except (remote_job.JobFailed, remote_job.JobLost) as failed:   # A failed job freed the output.
        print(f'error: {failed}', file=err)
        return 1
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
        print(plan_note.dumps(document) if flags.plan_format == 'json'
              else plan.format_plan(document), file=out)
        return 0
    if launch.remote and (flags.detach or launch.template_location) and not flags.attach:
        print(_submit(launch), file=out)
        return 0
    # A stop in it once committed says so (stop.committed); a followed job goes on (job_goes_on).
    replaced = label_changes.held_labels(flags.output_dir) if flags.overwrite else None
    if flags.attach:
        summary = job.follow(launch)
        summary['seconds'] = 0   # Not the job's: no rate is shown.
    else:
        summary = job.convert(launch)
        summary['seconds'] = time.monotonic() - started   # The command's, not only the job's.
    try:
        print(format_summary(summary), file=out)
        changed = label_changes.changes_line(replaced,
                                             label_changes.held_labels(summary['output_dir']))
        if changed:
            print(changed, file=out)
        print(f'\nWrote {summary["dataset"]} to {summary["output_dir"]}. Load it with:\n'
              + load_hint(summary), file=out)
    except KeyboardInterrupt as stop:
        stop.committed = summary['output_dir']
        raise
    return 0


def _submit(launch: Launch) -> str:
    """Hands the job to a service that runs it without this process (its commit step releases
    the output lock) and returns where to follow it."""
    settings, submitted = job.submit(launch)
    if launch.template_location:   # The Flex Template launcher: the service starts the job.
        return f'Job submitted as a template ({launch.template_location})'
    if submitted is None:
        return f'Nothing to submit: {settings.output_dir} holds the dataset of this run.'
    return (f'Job {submitted["id"]} submitted to {remote_job.watched_at(launch, submitted)}; it '
            'runs without this command.\n'
            f'Follow it to its end (exit 0 once its dataset is committed) with:\n'
            f'  {remote_job.follow_command(launch, submitted)}\n'
            f'The dataset appears in {settings.output_dir} when the job ends; cancel it with '
            f'{remote_job.cancel_hint(launch, submitted)}.')

"""A job that a service runs without this process (Dataflow, or a Flink or Spark job server
through Beam's portable runner), followed from here through Beam's PipelineResult alone: one
thread waits for its end (`wait_until_finish`), while the command shows the progress its steps
leave in the run's temporary folder (pipeline/progress.py, as for a local run; Beam's own job
service reports no counter before a job ends) and reads its counters (`metrics()`) at the end.
Nothing here cancels a job: a stopped command stops following it.

The job is named by a `dict` kept in the output's lock (pipeline/output/output_lock.py):
`{'id', 'runner', 'where'}`, where is `projects/P/regions/R` on Dataflow and the job endpoint of
a job service. A later command asks about a job only the service it is itself given (never one
a lock names alone), and only its state: `ended` says whether that service reports it ended.
"""
import threading

from apache_beam.options.pipeline_options import GoogleCloudOptions, PortableOptions
from apache_beam.runners.runner import PipelineState

from pipeline import beam_internals
from pipeline.errors import DatasetError, printable
from pipeline.launch import Launch, RunnerKind

POLL_SECONDS = 1.0   # How often a stop is looked for while the waiting thread waits.


class JobFailed(Exception):
    """A job that ended otherwise than DONE; its text, one line, holds the job's own error."""

    def __init__(self, job: dict, state: str, error: str | None):
        self.job, self.state = job, state
        what = f'job {printable(job["id"])} ended {state}'
        super().__init__(f'{what}: {printable(error)}' if error else f'{what}; nothing was committed')


class JobLost(Exception):
    """The service stopped answering about a job, which may still run (and hold the lock)."""


def job_of(launch: Launch, result) -> dict:
    """The job `result` is a handle of, as the lock names it."""
    return {'id': beam_internals.job_id(result), 'runner': launch.runner_name,
            'where': where(launch)}


def where(launch: Launch) -> str:
    """The service `launch` submits to."""
    if launch.runner is RunnerKind.DATAFLOW:
        cloud = launch.beam.view_as(GoogleCloudOptions)
        return f'projects/{cloud.project}/regions/{cloud.region}'
    return str(launch.beam.view_as(PortableOptions).job_endpoint)


def watched_at(launch: Launch, job: dict) -> str:
    """Where a person watches the job: Dataflow's console page of it, or its job service."""
    if launch.runner is RunnerKind.DATAFLOW:
        cloud = launch.beam.view_as(GoogleCloudOptions)
        return (f'Dataflow (https://console.cloud.google.com/dataflow/jobs/{cloud.region}/'
                f'{job["id"]}?project={cloud.project})')
    return f'the job service at {where(launch)}'


def wait(job: dict, result) -> None:
    """Returns once the job has ended DONE; raises JobFailed when it ended otherwise. A stop
    (Ctrl-C, a stopping signal) comes through at once, and leaves the job running."""
    ended = threading.Event()
    failure: list[BaseException] = []

    def waiting() -> None:
        try:
            result.wait_until_finish()
        except Exception as exc:   # The job's failure, as the runner reports it.
            failure.append(exc)
        finally:
            ended.set()

    threading.Thread(target=waiting, name='job-waiter', daemon=True).start()
    while not ended.wait(POLL_SECONDS):
        pass
    try:
        state = str(result.state).rsplit('.', 1)[-1]
    except Exception:   # Not DONE as far as is known, and not ended either.
        raise JobLost(f'the service at {printable(job["where"])} stopped answering about job '
                      f'{printable(job["id"])}; it may still run and '
                      'hold the output\'s lock: --attach follows it once the service answers') \
            from None
    if failure or state != PipelineState.DONE:   # A cancelled job's error says no more.
        raise JobFailed(job, state if state != PipelineState.DONE else 'FAILED',
                        error_line(failure[0]) if failure and state != 'CANCELLED' else None)


def error_line(exc: BaseException) -> str:
    """The job's own error as one line: our DatasetError where a step raised one, else the
    exception a worker's traceback ends with, else the first line of what the runner says."""
    found = DatasetError.find_in(exc)
    if found is not None:
        return found
    lines = [line for line in str(exc).splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if line.startswith('Traceback (most recent call last)'):
            rest = [text for text in lines[index + 1:] if not text.startswith((' ', '\t'))]
            if rest:
                return rest[0].strip()
    useful = [line for line in lines if not line.startswith('Dataflow pipeline failed.')]
    return (useful or lines or [type(exc).__name__])[0].strip()


def attach(launch: Launch, job_id: str):
    """A PipelineResult of the job `job_id` on the service `launch` names."""
    if launch.runner is RunnerKind.DATAFLOW:
        return beam_internals.dataflow_result(launch.beam, job_id)
    return beam_internals.portable_result(where(launch), job_id)


def ended(launch: Launch, job: dict) -> str | None:
    """The state `job` ended in, when this launch's service is the job's and says it ended;
    None while it runs, for another service's job, or when the service cannot be asked."""
    if not launch.remote or job.get('where') != where(launch) or not isinstance(job.get('id'), str):
        return None
    try:
        state = str(attach(launch, job['id']).state).rsplit('.', 1)[-1]
    except Exception:   # Not reachable, or no such job there: nothing is known.
        return None
    return state if PipelineState.is_terminal(state) else None


def follow_command(launch: Launch, job: dict) -> str:
    """The command that follows the job again (and ends as the job does)."""
    service = (f'--runner=DataflowRunner --project={launch.beam.view_as(GoogleCloudOptions).project}'
               f' --region={launch.beam.view_as(GoogleCloudOptions).region}'
               if launch.runner is RunnerKind.DATAFLOW else
               f'--runner=PortableRunner --job_endpoint={where(launch)}')
    return (f'python -m pipeline.run --attach={job["id"]} '
            f'--output_dir={launch.converter.output_dir} {service}')


def cancel_hint(launch: Launch, job: dict) -> str:
    """How to cancel the job, where the service has a command for it."""
    if launch.runner is RunnerKind.DATAFLOW:
        region = launch.beam.view_as(GoogleCloudOptions).region
        return f'gcloud dataflow jobs cancel {job["id"]} --region={region}'
    return (f'the job API\'s Cancel (job id {job["id"]}) at {where(launch)}, or the UI of the '
            'runner behind it (Flink, Spark)')

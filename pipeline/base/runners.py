"""What runs a job, as far as this process is concerned: derived once from the options, in
pipeline/launch.py, and by an input kind that must know whether its workers see this machine."""
import enum

from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions, StandardOptions


class RunnerKind(enum.Enum):
    """What runs the job, as far as this process is concerned."""
    LOCAL = 'local'              # DirectRunner (the default): pipeline/local_runner.py, here
    DATAFLOW = 'dataflow'        # Google Cloud Dataflow: the service runs it
    JOB_SERVICE = 'job service'  # A portable job service at host:port, with workers of its own
    OTHER = 'other'              # Any other runner this process drives to the end (Prism, ...)

    @property
    def remote(self) -> bool:
        """Whether a service runs the job without this process, on workers of its own."""
        return self in (RunnerKind.DATAFLOW, RunnerKind.JOB_SERVICE)


def runner_kind(options: PipelineOptions) -> RunnerKind:
    """The kind of the runner --runner names (DirectRunner when left out)."""
    name = runner_name(options).lower()
    if name in ('directrunner', 'direct'):
        return RunnerKind.LOCAL
    if 'dataflow' in name:
        return RunnerKind.DATAFLOW
    portable = options.view_as(PortableOptions)
    if ((portable.job_endpoint or '') not in ('', 'embed')
            and str(portable.environment_type or 'DOCKER').upper() != 'LOOPBACK'):
        return RunnerKind.JOB_SERVICE
    return RunnerKind.OTHER


def runner_name(options: PipelineOptions) -> str:
    """--runner as given (DirectRunner when left out), for the lines that name it."""
    return str(options.view_as(StandardOptions).runner or 'DirectRunner')

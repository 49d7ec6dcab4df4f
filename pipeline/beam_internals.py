"""Every use of Apache Beam's internals, behind one door.

The names below are not Beam's public API, so a release may change them. `missing()` looks each
one up; a local run checks it when it starts, and where this Beam lacks one, the run takes
Beam's public path instead, with one log line: slower to start, never a crash or a hang.

- Local worker processes forked by the command (pipeline/worker_processes.py) are handed to
  Beam's FnApiRunner in place of the `python -m apache_beam.runners.worker.sdk_worker_main`
  processes it would start once the pipeline runs (its registry of worker handlers, its handler
  of a subprocess worker, the lock it starts them under, its server of their log records), and
  a run's workers are stopped all at once rather than one after another (its manager of worker
  handlers and the handlers it keeps). `prestarted_workers()` installs both for one run and puts
  Beam's back afterwards. Fallback: Beam starts and stops its own worker processes.
- Every option reaches the workers (FnApiRunner's provision info, encoded as the portable runner
  encodes options). Fallback: the workers get Beam's defaults (nothing of ours reads them).
- What the launcher learns of its workers: their log records, which Beam's job service logs as
  protobuf text (`worker_line`), and their exit, which Beam reports as a RuntimeError
  (`worker_exit_code`).
- A job a service runs (pipeline/remote_job.py): the id of a portable runner's job (its
  result keeps it as `_job_id`), and a handle of a job submitted earlier, made as the runners
  make theirs (the portable runner's PipelineResult over the job service's streams, Dataflow's
  DataflowPipelineResult over its client). No fallback: a command that follows a job needs them.
- Beam's argument parser, the one its options classes add their flags to, and the list of those
  classes (the subclasses of PipelineOptions imported: ours, Beam's, the runners'), which
  `options_parser` fills as Beam fills its own. Fallback: argparse's parser, with Beam's extra
  method. The method that adds a class's flags, `_add_argparse_args`, is how Beam's guide
  defines options (pipeline/options.py defines ours by it); it has no fallback.
- Not a name but a habit, which nothing here calls: the FnApiRunner hands the elements of a
  grouped stage to its workers in turn, in the order they were made; transforms/sharding.py
  deals a local run's tasks by it (tests/test_stages.py holds it). Without it nothing fails:
  the tasks land as the runner places them, the largest first.
"""
import argparse
import contextlib
import logging
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator

LOG = logging.getLogger('image_tfrecords')
TRACE = 'image_tfrecords.trace'
WORKER_LOGGER = 'apache_beam.runners.portability.local_job_service'   # Logs 'Worker: %s'.
_WORKER_EXIT = re.compile(r'Worker subprocess exited with return code (-?\d+)')
_ENTRY = re.compile(r'message: "(?P<message>(?:[^"\\]|\\.)*)".*?log_location: "(?P<where>[^"]*)"',
                    re.S)
_NEEDED = (   # (module, dotted name) of every internal this module uses.
    ('apache_beam.runners.portability.fn_api_runner.worker_handlers',
     'WorkerHandler._registered_environments'),
    ('apache_beam.runners.portability.fn_api_runner.worker_handlers',
     'SubprocessSdkWorkerHandler.start_worker'),
    ('apache_beam.runners.portability.fn_api_runner.worker_handlers', 'SUBPROCESS_LOCK'),
    ('apache_beam.runners.portability.fn_api_runner.worker_handlers',
     'WorkerHandlerManager.close_all'),
    ('apache_beam.runners.portability.fn_api_runner.fn_runner', 'WorkerHandlerManager'),
    ('apache_beam.runners.portability.fn_api_runner.fn_runner', 'ExtendedProvisionInfo'),
    ('apache_beam.runners.portability.local_job_service', 'BeamFnLoggingServicer'),
    ('apache_beam.runners.portability.portable_runner', 'JobServiceHandle.encode_pipeline_options'),
    ('apache_beam.utils.thread_pool_executor', 'shared_unbounded_instance'),
    ('apache_beam.portability.python_urns', 'SUBPROCESS_SDK'),
)


# What Beam's handler of a subprocess worker hands its worker (its start_worker names them).
_HANDED = ('control_address', 'provision_info', 'worker_id')


def missing() -> str | None:
    """The first internal this Beam lacks (module:name), or None when it has them all."""
    import importlib
    for module_name, dotted in _NEEDED:
        try:
            found = importlib.import_module(module_name)
            for name in dotted.split('.'):
                found = getattr(found, name)
        except (ImportError, AttributeError):
            return f'{module_name}:{dotted}'
    from apache_beam.runners.portability.fn_api_runner import worker_handlers
    named = worker_handlers.SubprocessSdkWorkerHandler.start_worker.__code__.co_names
    lacking = [name for name in _HANDED if name not in named]
    if lacking:
        return f'{worker_handlers.__name__}:SubprocessSdkWorkerHandler.{lacking[0]}'
    return None


def fn_api_runner(options):
    """Beam's FnApiRunner for a run with `options`: with every option given to its workers
    where this Beam allows it."""
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    if missing() is not None:
        return fn_runner.FnApiRunner()
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.portable_runner import JobServiceHandle
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


@contextlib.contextmanager
def prestarted_workers(claim: Callable[[], Any]) -> Iterator[None]:
    """For the run in the block, the FnApiRunner's subprocess workers are the processes
    `claim()` gives (pipeline/worker_processes.py) and are closed together (see the module
    docstring); where this Beam lacks what that needs, Beam starts its own, and one line says
    so."""
    lacking = missing()
    if lacking is not None:
        import apache_beam
        LOG.warning('this Apache Beam (%s) lacks %s: its worker processes start as Beam starts '
                    'them, which is slower', apache_beam.__version__, lacking)
        yield
        return
    from apache_beam.portability import python_urns
    from apache_beam.runners.portability.fn_api_runner import fn_runner, worker_handlers
    registry = worker_handlers.WorkerHandler._registered_environments
    handler, manager = registry[python_urns.SUBPROCESS_SDK], fn_runner.WorkerHandlerManager
    registry[python_urns.SUBPROCESS_SDK] = (_subprocess_worker_class(claim), bytes)
    fn_runner.WorkerHandlerManager = _workers_class()
    try:
        yield
    finally:
        registry[python_urns.SUBPROCESS_SDK] = handler
        fn_runner.WorkerHandlerManager = manager


def worker_line(record: logging.LogRecord) -> tuple[str, str] | None:
    """(message, where it was logged: path:line) of a worker's log record as Beam's job service
    logs it, or None for any other record."""
    if record.name != WORKER_LOGGER or record.msg != 'Worker: %s' or not record.args:
        return None
    match = _ENTRY.search(str(record.args[0]))
    if match is None:
        return None
    from google.protobuf import text_encoding
    return (text_encoding.CUnescape(match['message']).decode('utf-8', 'replace'),
            text_encoding.CUnescape(match['where']).decode('utf-8', 'replace'))


def worker_exit_code(exc: BaseException) -> int | None:
    """The exit code of a worker process whose end Beam reports as `exc`, else None."""
    found = _WORKER_EXIT.search(str(exc)) if type(exc) is RuntimeError else None
    return int(found[1]) if found else None


def options_parser(error: Callable[[str], Any] | None = None, classes: list[type] | None = None,
                   **settings) -> argparse.ArgumentParser:
    """Beam's parser of options with the flags of the options classes `classes` (default: every
    one imported), added as Beam adds them; `settings` go to argparse (prog, description, ...),
    and a bad flag's message to `error(message)` where given (else argparse's usage page)."""
    from apache_beam.options import pipeline_options
    base = getattr(pipeline_options, '_BeamArgumentParser', None)
    if base is None:
        base = type('_Parser', (argparse.ArgumentParser,), {
            'add_value_provider_argument': argparse.ArgumentParser.add_argument})
    if error is not None:
        base = type('_RaisingParser', (base,), {'error': lambda self, message: error(message)})
    parser = base(allow_abbrev=False, **settings)
    if classes is None:   # A class imported twice (a reloaded module) adds its flags once.
        classes = list({str(cls): cls
                        for cls in pipeline_options.PipelineOptions.__subclasses__()}.values())
    for cls in classes:
        cls._add_argparse_args(parser)
    return parser


def _workers_class():
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    class _Workers(worker_handlers.WorkerHandlerManager):
        """Beam's worker handlers of a run, closed together."""

        def close_all(self) -> None:
            handlers = {h for listed in self._cached_handlers.values() for h in listed}
            with ThreadPoolExecutor(max(1, len(handlers))) as pool:
                list(pool.map(_close, handlers))
            self._cached_handlers.clear()
            super().close_all()   # The rest: the servers Beam started for the workers.
    return _Workers


def _close(handler) -> None:
    try:
        handler.close()
    except Exception:   # A worker that died already: the run says so itself; the log keeps why.
        logging.getLogger(TRACE).info('closing worker %s', handler, exc_info=True)


def _subprocess_worker_class(claim: Callable[[], Any]):
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    class _SubprocessWorker(worker_handlers.SubprocessSdkWorkerHandler):
        """Beam's handler of a subprocess worker, run in a process of worker_processes."""

        def start_worker(self) -> None:
            self.worker_thread = threading.Thread(name='run_worker', target=self._run)
            self.worker_thread.start()

        def _run(self) -> None:
            _run_prestarted(self, claim, worker_handlers.SUBPROCESS_LOCK)
    return _SubprocessWorker


def _run_prestarted(handler, claim: Callable[[], Any], lock) -> None:
    """What Beam's SubprocessSdkWorker.run does, with a started worker process (`claim()`,
    pipeline/worker_processes.Worker): serves the
    worker's log records (as 'Worker: ...' records of local_job_service's logger), hands it
    the environment and waits for it; a non-zero exit raises Beam's RuntimeError."""
    import grpc
    from apache_beam.portability.api import beam_fn_api_pb2_grpc, endpoints_pb2
    from apache_beam.runners.portability import local_job_service
    from apache_beam.utils import thread_pool_executor
    from google.protobuf import json_format, text_format

    def descriptor(url: str) -> str:
        return text_format.MessageToString(endpoints_pb2.ApiServiceDescriptor(url=url))

    logs = grpc.server(thread_pool_executor.shared_unbounded_instance(),
                       options=[('grpc.http2.max_pings_without_data', 0),
                                ('grpc.http2.max_ping_strikes', 0)])
    port = logs.add_insecure_port('[::]:0')
    logs.start()
    beam_fn_api_pb2_grpc.add_BeamFnLoggingServicer_to_server(
        local_job_service.BeamFnLoggingServicer(), logs)
    environment = dict(
        os.environ,
        CONTROL_API_SERVICE_DESCRIPTOR=descriptor(handler.control_address),
        LOGGING_API_SERVICE_DESCRIPTOR=descriptor(f'localhost:{port}'),
        PIPELINE_OPTIONS=json_format.MessageToJson(
            handler.provision_info.provision_info.pipeline_options),
        WORKER_ID=handler.worker_id)
    with lock:
        worker = claim()
    try:
        try:
            worker.start(environment)
        except OSError:   # It died before it started: its exit code says how.
            pass
        if worker.process.wait():
            raise RuntimeError(
                f'Worker subprocess exited with return code {worker.process.returncode}')
    finally:
        worker.kill()
        logs.stop(0)


def job_id(result) -> str:
    """The id of the job `result` is a handle of (Dataflow's result has a method for it)."""
    return str(result.job_id() if callable(getattr(result, 'job_id', None)) else result._job_id)


def portable_result(endpoint: str, job: str):
    """A handle of the job `job` of the job service at `endpoint`, as the portable runner makes
    the handle of a job it submits."""
    import grpc
    from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc
    from apache_beam.runners.portability.portable_runner import PipelineResult
    service = beam_job_api_pb2_grpc.JobServiceStub(grpc.insecure_channel(endpoint))
    service.GetState(beam_job_api_pb2.GetJobStateRequest(job_id=job), timeout=30)   # It exists.
    return PipelineResult(
        service, job, service.GetMessageStream(beam_job_api_pb2.JobMessagesRequest(job_id=job)),
        service.GetStateStream(beam_job_api_pb2.GetJobStateRequest(job_id=job)))


def dataflow_result(options, job: str):
    """A handle of the Dataflow job `job` (project and region from `options`)."""
    from apache_beam.runners.dataflow.dataflow_runner import DataflowPipelineResult, DataflowRunner
    from apache_beam.runners.dataflow.internal import apiclient
    runner = DataflowRunner()
    runner.dataflow_client = apiclient.DataflowApplicationClient(options)
    return DataflowPipelineResult(runner.dataflow_client.get_job(job), runner, options)


def fused_stages(pipeline) -> list[str]:
    """The names of the stages Beam's FnApiRunner (the local runner's) fuses the unrun
    `pipeline` into: its own fusion of the job's proto, as a run would execute it."""
    from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner
    _, stages = FnApiRunner().create_stages(pipeline.to_runner_api())
    return [stage.name for stage in stages]

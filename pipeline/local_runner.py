"""The runner of local runs: Beam's FnApiRunner, as DirectRunner uses it, without DirectRunner's
first attempt at PrismRunner.

Beam's DirectRunner hands every pipeline it can to PrismRunner first, and Prism downloads its
binary from the internet on first use: offline that attempt fails after a second and DirectRunner
falls back to the FnApiRunner; online the run goes to another runner (other worker model, other
failure handling, a rerun on the fallback if Prism fails a submitted job). A local run here always
uses the FnApiRunner, with DirectRunner's flags (--direct_num_workers, --direct_running_mode), and
never touches the network. `--runner=PrismRunner` stays an explicit choice.

Its worker processes are pipeline/worker_processes.py's: the command line forks them once its
imports are done, and Beam's handler of a subprocess worker is given one instead of starting
`python -m ...sdk_worker_main` once the pipeline runs. At the end of a run they are stopped all at
once: Beam stops them one after the other, and each takes about half a second to exit.
"""
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.portability import python_urns
from apache_beam.portability.api import beam_fn_api_pb2_grpc, beam_provision_api_pb2, endpoints_pb2
from apache_beam.runners.portability import local_job_service
from apache_beam.runners.portability.fn_api_runner import fn_runner, worker_handlers
from apache_beam.runners.portability.portable_runner import JobServiceHandle
from apache_beam.runners.runner import PipelineRunner
from apache_beam.utils import thread_pool_executor
from google.protobuf import json_format, text_format

from pipeline import console, worker_processes

DIRECT_NAMES = ('directrunner', 'direct')


def is_direct(options: PipelineOptions) -> bool:
    """Whether the flags ask for DirectRunner (also by leaving --runner out)."""
    runner = options.view_as(StandardOptions).runner
    return runner is None or str(runner).lower() in DIRECT_NAMES


class _Workers(worker_handlers.WorkerHandlerManager):
    """Beam's worker handlers of a run, closed together."""

    def close_all(self) -> None:
        handlers = {h for listed in self._cached_handlers.values() for h in listed}
        with ThreadPoolExecutor(max(1, len(handlers))) as pool:
            list(pool.map(_close, handlers))
        self._cached_handlers.clear()
        super().close_all()   # The rest: the servers Beam started for the workers.


def _close(handler) -> None:
    try:
        handler.close()
    except Exception:   # A worker that died already: the run says so itself; the log keeps why.
        logging.getLogger(console.TRACE).info('closing worker %s', handler, exc_info=True)


@worker_handlers.WorkerHandler.register_environment(python_urns.SUBPROCESS_SDK, bytes)
class _SubprocessWorker(worker_handlers.SubprocessSdkWorkerHandler):
    """Beam's handler of a subprocess worker, run in a process of worker_processes."""

    def start_worker(self) -> None:
        self.worker_thread = threading.Thread(name='run_worker', target=self._run)
        self.worker_thread.start()

    def _run(self) -> None:
        """What Beam's SubprocessSdkWorker.run does, with a started worker process: serves the
        worker's log records (as 'Worker: ...' records of local_job_service's logger), hands it
        the environment and waits for it; a non-zero exit raises Beam's RuntimeError."""
        logs = grpc.server(thread_pool_executor.shared_unbounded_instance(),
                           options=[('grpc.http2.max_pings_without_data', 0),
                                    ('grpc.http2.max_ping_strikes', 0)])
        port = logs.add_insecure_port('[::]:0')
        logs.start()
        beam_fn_api_pb2_grpc.add_BeamFnLoggingServicer_to_server(
            local_job_service.BeamFnLoggingServicer(), logs)
        environment = dict(
            os.environ,
            CONTROL_API_SERVICE_DESCRIPTOR=_descriptor(self.control_address),
            LOGGING_API_SERVICE_DESCRIPTOR=_descriptor(f'localhost:{port}'),
            PIPELINE_OPTIONS=json_format.MessageToJson(
                self.provision_info.provision_info.pipeline_options),
            WORKER_ID=self.worker_id)
        with worker_handlers.SUBPROCESS_LOCK:
            worker = worker_processes.claim()
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


def _descriptor(url: str) -> str:
    return text_format.MessageToString(endpoints_pb2.ApiServiceDescriptor(url=url))


class LocalRunner(PipelineRunner):
    """Runs a batch pipeline on the FnApiRunner with every option given to the workers."""

    def run_pipeline(self, pipeline, options: PipelineOptions):
        fn_runner.WorkerHandlerManager = _Workers
        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        provision = fn_runner.ExtendedProvisionInfo(
            beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
        return fn_runner.FnApiRunner(provision_info=provision).run_pipeline(pipeline, options)


def runner_for(options: PipelineOptions) -> PipelineRunner | None:
    """The runner object for a pipeline with these options: ours for DirectRunner, else None
    (Beam builds the runner --runner names)."""
    return LocalRunner() if is_direct(options) else None

"""The runner of local runs: Beam's FnApiRunner, as DirectRunner uses it, without DirectRunner's
first attempt at PrismRunner.

Beam's DirectRunner hands every pipeline it can to PrismRunner first, and Prism downloads its
binary from the internet on first use: offline that attempt fails after a second and DirectRunner
falls back to the FnApiRunner; online the run goes to another runner (other worker model, other
failure handling, a rerun on the fallback if Prism fails a submitted job). A local run here always
uses the FnApiRunner, with DirectRunner's flags (--direct_num_workers, --direct_running_mode), and
never touches the network. `--runner=PrismRunner` stays an explicit choice.

At the end of a run its worker processes are stopped all at once: Beam stops them one after the
other, and each takes about half a second to exit.
"""
import logging
from concurrent.futures import ThreadPoolExecutor

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.portability.fn_api_runner import fn_runner, worker_handlers
from apache_beam.runners.portability.portable_runner import JobServiceHandle
from apache_beam.runners.runner import PipelineRunner

from pipeline import console

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

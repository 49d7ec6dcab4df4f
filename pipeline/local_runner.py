"""The runner of local runs: Beam's FnApiRunner, as DirectRunner uses it, without DirectRunner's
first attempt at PrismRunner.

Beam's DirectRunner hands every pipeline it can to PrismRunner first, and Prism downloads its
binary from the internet on first use: offline that attempt fails after a second and DirectRunner
falls back to the FnApiRunner; online the run goes to another runner (other worker model, other
failure handling, a rerun on the fallback if Prism fails a submitted job). A local run here always
uses the FnApiRunner, with DirectRunner's flags (--direct_num_workers, --direct_running_mode), and
never touches the network. `--runner=PrismRunner` stays an explicit choice.

Its worker processes are the ones the command line forked (pipeline/worker_processes.py), handed
to the runner through pipeline/beam_internals.py.
"""
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineRunner

from pipeline import beam_internals, worker_processes


class LocalRunner(PipelineRunner):
    """Runs a batch pipeline on the FnApiRunner with every option given to the workers."""

    def run_pipeline(self, pipeline, options: PipelineOptions):
        with beam_internals.prestarted_workers(worker_processes.claim):
            return beam_internals.fn_api_runner(options).run_pipeline(pipeline, options)

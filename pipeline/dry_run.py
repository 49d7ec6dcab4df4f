"""`--dry_run=true` with `--runner=DataflowRunner`: what a submission would send, without sending
it. The job is built as a submission builds it (Beam's option checks, the job graph, the package
staged for the workers) and printed with the plan's estimate; nothing is written anywhere.

Without Google Cloud credentials it works offline: the buckets are not checked (it says so), and
the input must be on local disk (its top folders decide the job's graph, and it is planned).
"""
from apache_beam.options.pipeline_options import (
    DebugOptions, GoogleCloudOptions, PipelineOptions, SetupOptions, WorkerOptions)

from pipeline import job, plan
from pipeline.dataflow import build_worker_package, one_build_at_a_time
from pipeline.errors import DatasetError, beam_refusal, printable
from pipeline.io import fileio
from pipeline.launch import Launch
from pipeline.inputs import registry
from pipeline.sources import input_paths


def describe(launch: Launch, signed_in: bool) -> str:
    """Builds the Dataflow job of `launch` without submitting it; returns what would be
    submitted. `signed_in`: there are credentials for the gs:// paths (else none is touched)."""
    flags = launch.converter
    remote = next((p for p in input_paths(flags) if p and fileio.is_gcs(p)), None)
    if not signed_in and remote:
        raise DatasetError(f'{remote} is read to build the job (its splits, labels and listing): '
                           'a dry run without Google Cloud credentials needs the input on local '
                           'disk; or sign in (gcloud auth application-default login)')
    planned = _plan_here(launch)
    if not signed_in:   # Else Beam looks for credentials, retrying for a minute, before going on.
        launch = launch.replaced(no_auth=True)
    prepared = job.prepare(launch, check_buckets=signed_in)   # No lock; nothing written.
    try:
        with one_build_at_a_time(prepared.launch.beam):
            graph = prepared.pipeline.run().job.proto_pipeline
    except ValueError as exc:   # Beam's checks of the Dataflow options.
        raise (beam_refusal(exc) or exc) from None
    cloud = prepared.launch.beam.view_as(GoogleCloudOptions)
    lines = ['Dry run: nothing submitted.',
             f'Checked: the buckets of the input and of {prepared.settings.output_dir}, with your '
             'credentials' if signed_in else
             'No Google Cloud credentials found: the buckets were not checked (sign in with gcloud '
             'auth application-default login and run it again to check them)',
             f'Dataflow options: project {cloud.project}, region {cloud.region}, temp '
             f'{cloud.temp_location}, staging {cloud.staging_location or cloud.temp_location}',
             f'Job graph: {len(graph.components.transforms)} steps in these stages: '
             + ', '.join(_stages(graph)),
             f'Workers: {_workers(prepared.launch.beam)}',
             *_local_inputs(flags),
             'Staged for the workers: ' + ', '.join(
                 f'{name} ({size / 1e3:.0f} KB)' for name, size in build_worker_package(
                     prepared.launch.beam)),
             '', 'Plan (listed here, with the Dataflow estimate):', plan.format_plan(planned)]
    return '\n'.join(lines)


def _stages(graph) -> list[str]:
    """The names of the job's stages: the transforms directly under the pipeline's root."""
    transforms = graph.components.transforms
    top = list(graph.root_transform_ids)
    while len(top) == 1 and transforms[top[0]].subtransforms:   # A wrapper around them all.
        top = list(transforms[top[0]].subtransforms)
    return [transforms[t].unique_name for t in top]


def _local_inputs(flags) -> list[str]:
    """A line for inputs on this machine, which a submitted job could not read."""
    local = [p for p in registry.input_paths(flags) if not fileio.is_gcs(p)]
    if not local:
        return []
    return [f'Input on this machine ({", ".join(printable(p) for p in local)}): listed and planned '
            'here; the job itself needs it on gs:// (Dataflow workers read only Cloud Storage)']


def _workers(options: PipelineOptions) -> str:
    workers = options.view_as(WorkerOptions)
    threads = options.view_as(DebugOptions).number_of_worker_harness_threads
    code = (f'SDK container {workers.sdk_container_image}' if workers.sdk_container_image
            else f'this package built from {options.view_as(SetupOptions).setup_file}')
    return (f'{workers.machine_type}, {workers.num_workers or 1} at first and up to '
            f'{workers.max_num_workers} ({workers.autoscaling_algorithm or "THROUGHPUT_BASED"} '
            f'autoscaling), {threads} harness threads per SDK process, {workers.disk_size_gb} GB '
            f'disk; code: {code}')


def _plan_here(launch: Launch) -> dict:
    """The plan of the input, listed by a local runner (the Dataflow job would list the same),
    with the Dataflow estimate only."""
    local = launch.replaced(runner='DirectRunner', plan_only=True, dry_run=False, output_dir=None)
    document = job.plan(local)
    return plan.estimate({k: v for k, v in document.items() if k != 'estimate'},
                         reencode=launch.converter.reencode)

"""Worker defaults and code shipping for Google Cloud Dataflow runs.

The defaults suit an image job: decoding is CPU-bound and a worker thread holds one decoded
image at a time (up to --max_image_pixels x 3 bytes, 270 MB at the default), so a few threads
per vCPU keep the CPUs busy without risking memory. Every one can be overridden by its flag.
"""
import contextlib
import fcntl
import os
import tarfile
import tempfile

from apache_beam.options.pipeline_options import (
    DebugOptions, GoogleCloudOptions, PipelineOptions, SetupOptions, WorkerOptions)

from pipeline.errors import DatasetError, printable

WORKER_DEFAULTS = {  # flag: (options view, value)
    'machine_type': (WorkerOptions, 'n2-standard-4'),      # 4 vCPU, 16 GB: 4 GB per process.
    'disk_size_gb': (WorkerOptions, 30),                   # Images stream; nothing staged.
    'max_num_workers': (WorkerOptions, 32),
    'number_of_worker_harness_threads': (DebugOptions, 4),  # Per process: reads overlap decoding.
}
SETUP_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'setup.py')


def apply_worker_defaults(options: PipelineOptions, given: set[str]) -> None:
    """Fills in worker settings the user did not give (`given`: the flags set), and ships this
    package to workers."""
    for name, (view, value) in WORKER_DEFAULTS.items():
        if name not in given:
            setattr(options.view_as(view), name, value)
    setup = options.view_as(SetupOptions)
    if setup.setup_file or options.view_as(WorkerOptions).sdk_container_image:
        return
    if not os.path.exists(SETUP_FILE):
        raise DatasetError('workers need this package: pass --setup_file=PATH/setup.py (from a '
                           'checkout) or --sdk_container_image=IMAGE (see dataflow_templates/)')
    setup.setup_file = SETUP_FILE


def check_flags(options: PipelineOptions, dry_run: bool) -> None:
    """What a Dataflow job needs and Beam would check only once the input is listed: a project,
    and --temp_location and --staging_location as gs:// folders (workers and the service read
    them); a dry run, offline, --temp_location (without it Beam makes a default bucket, which
    needs the service). Checked before anything touches the network."""
    cloud = options.view_as(GoogleCloudOptions)
    if not cloud.project:
        raise DatasetError('--runner=DataflowRunner needs --project=PROJECT_ID, the Google Cloud '
                           'project the job runs in (and --region=REGION, e.g. us-central1, '
                           'unless gcloud config has compute/region)')
    if dry_run and not cloud.temp_location:
        raise DatasetError('--dry_run=true needs --temp_location=gs://BUCKET/FOLDER (the folder '
                           'the job would keep its temporary files in): without it Beam creates '
                           'a default bucket, which a dry run does not')
    for flag in ('temp_location', 'staging_location'):
        value = getattr(cloud, flag)
        if value and not value.startswith('gs://'):
            raise DatasetError(f'--{flag}={value} is not a Cloud Storage folder; Dataflow needs '
                               f'--{flag}=gs://BUCKET/FOLDER')


def check_paths(output_dir: str | None, inputs: list[str], dry_run: bool) -> None:
    """Dataflow's workers see Cloud Storage, not this machine: the output must be on gs://, and
    so must the inputs of a job submitted (a dry run lists and plans a local input here)."""
    if output_dir and not output_dir.startswith('gs://'):
        raise DatasetError(f'--output_dir={printable(output_dir)} is on this machine, and a '
                           'Dataflow job writes to Cloud Storage: give --output_dir=gs://BUCKET/'
                           'FOLDER')
    local = next((path for path in inputs if not path.startswith('gs://')), None)
    if local and not dry_run:
        raise DatasetError(f'{printable(local)} is on this machine, and Dataflow workers read '
                           f'only Cloud Storage: copy it to a bucket (gcloud storage cp -r '
                           f'{printable(local)} gs://BUCKET/FOLDER) and give that path')


@contextlib.contextmanager
def one_build_at_a_time(options: PipelineOptions):
    """Locks --setup_file while its package is built (by a submission, a dry run, or the staged
    files listed): two builds of one source folder at once write the same folders in it."""
    setup_file = options.view_as(SetupOptions).setup_file
    if not setup_file or not os.path.isfile(setup_file):
        yield
        return
    with open(setup_file, 'rb') as lock:   # A lock needs no write access to the file.
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_worker_package(options: PipelineOptions) -> list[tuple[str, int]]:
    """Builds the files a submission stages for the workers (the package from --setup_file and
    the list of the submitting environment's packages) in a folder that is then removed, and
    checks that the package holds this code; returns (staged name, bytes) of each."""
    from apache_beam.portability.api import beam_runner_api_pb2 as api
    from apache_beam.runners.portability.stager import Stager
    staged = []
    with tempfile.TemporaryDirectory(prefix='image-tfrecords-staging-') as folder, \
            one_build_at_a_time(options):
        for resource in Stager.create_job_resources(options, folder):
            path = api.ArtifactFilePayload.FromString(resource.type_payload).path
            name = api.ArtifactStagingToRolePayload.FromString(resource.role_payload).staged_name
            if name == 'workflow.tar.gz':
                _check_package(path)
            staged.append((name, os.path.getsize(path)))
    return staged


def _check_package(path: str) -> None:
    with tarfile.open(path) as archive:
        names = {n.split('/', 1)[-1] for n in archive.getnames()}
    missing = [m for m in ('pipeline/job.py', 'transforms/write_shards.py') if m not in names]
    if missing:
        raise DatasetError(f'the package built from --setup_file lacks {", ".join(missing)}; '
                           'pass the setup.py of this repository')

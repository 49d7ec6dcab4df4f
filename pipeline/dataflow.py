"""Worker defaults and code shipping for Google Cloud Dataflow runs.

The defaults suit an image job: decoding is CPU-bound and a worker thread holds one decoded
image at a time (up to --max_image_pixels x 3 bytes, 270 MB at the default), so a few threads
per vCPU keep the CPUs busy without risking memory. Every one can be overridden by its flag.
"""
import os

from apache_beam.options.pipeline_options import (
    DebugOptions, PipelineOptions, SetupOptions, StandardOptions, WorkerOptions)

from pipeline.formats.errors import DatasetError

WORKER_DEFAULTS = {  # flag: (options view, value)
    'machine_type': (WorkerOptions, 'n2-standard-4'),      # 4 vCPU, 16 GB: 4 GB per process.
    'disk_size_gb': (WorkerOptions, 30),                   # Images stream; nothing staged.
    'max_num_workers': (WorkerOptions, 32),
    'number_of_worker_harness_threads': (DebugOptions, 4),  # Per process: reads overlap decoding.
}
SETUP_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'setup.py')


def is_dataflow(options: PipelineOptions) -> bool:
    return 'dataflow' in str(options.view_as(StandardOptions).runner or '').lower()


def apply_dataflow_defaults(options: PipelineOptions, given: set[str]) -> None:
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

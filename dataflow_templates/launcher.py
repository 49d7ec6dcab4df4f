"""Flex Template entry point (FLEX_TEMPLATE_PYTHON_PY_FILE).

The template launcher runs this with every parameter as --name=value, plus the runner, project,
region and template location it chose. It builds the job, hands it to Dataflow and returns at
once; the dataset appears under --output_dir when the job ends.

The workers run this same image: its build writes the image's own name into SDK_CONTAINER_IMAGE
(dataflow_templates/cloudbuild.yaml), and the job gets --sdk_container_image=that unless the
launch names another, so a launch from the console needs no image parameter. An image built
without it leaves the workers on Dataflow's default image, which installs this package from the
setup file (FLEX_TEMPLATE_PYTHON_SETUP_FILE).
"""
import os
import sys
from collections.abc import Mapping

IMAGE_FLAGS = ('--sdk_container_image', '--worker_harness_container_image')


def with_worker_image(argv: list[str], environ: Mapping[str, str]) -> list[str]:
    """`argv`, plus --sdk_container_image=$SDK_CONTAINER_IMAGE if that is set and `argv` names no
    worker image of its own."""
    image = environ.get('SDK_CONTAINER_IMAGE')
    if not image or any(arg.split('=', 1)[0] in IMAGE_FLAGS for arg in argv):
        return argv
    return [*argv, f'--sdk_container_image={image}']


if __name__ == '__main__':
    from pipeline import run
    sys.exit(run.main(with_worker_image(sys.argv[1:], os.environ)))

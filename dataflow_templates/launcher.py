"""Flex Template entry point (FLEX_TEMPLATE_PYTHON_PY_FILE).

The template launcher runs this with every parameter as --name=value, plus the runner, project,
region and template location it chose. It builds the job, hands it to Dataflow and returns at
once; the dataset appears under --output_dir when the job ends.
"""
import sys

from pipeline import run

if __name__ == '__main__':
    sys.exit(run.main())

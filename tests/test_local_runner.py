"""Which flags get the local runner (pipeline/local_runner.py); tests/test_sample.py shows the
default command line never starts PrismRunner."""
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline import local_runner


@pytest.mark.parametrize('flags,ours', [
    ([], True), (['--runner=DirectRunner'], True), (['--runner=direct'], True),
    (['--runner=PrismRunner'], False), (['--runner=PortableRunner'], False),
    (['--runner=DataflowRunner'], False)])
def test_only_direct_runner_flags_get_the_local_runner(flags, ours):
    runner = local_runner.runner_for(PipelineOptions(flags))
    assert isinstance(runner, local_runner.LocalRunner) is ours

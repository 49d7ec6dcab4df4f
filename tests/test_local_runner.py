"""Local runs use the FnApiRunner that the tests exercise, never Beam's PrismRunner, also on a
machine where Prism's binary is at hand (as it is after one download with internet access)."""
import os
import platform
import stat
import zipfile

import apache_beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline import local_runner
from tests.helpers import run_cli

def _plant_prism(home, marker) -> None:
    """A cached Prism binary where Beam looks for one, which leaves `marker` when started."""
    name = f'apache_beam-v{apache_beam.__version__}-prism-{platform.system().lower()}-amd64'
    cache = home / '.apache_beam' / 'cache' / 'prism' / 'bin'
    cache.mkdir(parents=True)
    binary = cache / name
    binary.write_text(f'#!/bin/sh\ntouch {marker}\nexit 1\n')
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    with zipfile.ZipFile(cache / f'{name}.zip', 'w') as archive:
        archive.write(binary, name)


@pytest.mark.slow
@pytest.mark.skipif(platform.machine().lower() not in ('x86_64', 'amd64'), reason='amd64 binary name')
def test_the_default_run_never_starts_prism(tmp_path):
    marker = tmp_path / 'prism-was-started'
    _plant_prism(tmp_path, marker)
    env = dict(os.environ, HOME=str(tmp_path))
    result = run_cli('--verbose', env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    assert 'Prism' not in result.stderr + result.stdout
    assert 'Wrote dataset to sample_tfrecords' in result.stdout


@pytest.mark.parametrize('flags,ours', [
    ([], True), (['--runner=DirectRunner'], True), (['--runner=direct'], True),
    (['--runner=PrismRunner'], False), (['--runner=PortableRunner'], False),
    (['--runner=DataflowRunner'], False)])
def test_only_direct_runner_flags_get_the_local_runner(flags, ours):
    runner = local_runner.runner_for(PipelineOptions(flags))
    assert isinstance(runner, local_runner.LocalRunner) is ours

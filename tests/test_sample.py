"""The command line without flags: it converts a generated sample into ./sample_tfrecords on the
local runner (FnApiRunner), never Beam's PrismRunner, also on a machine where Prism's binary is
at hand (as it is after one download with internet access); the sample looks like photos, so
the near-duplicate check compares every image."""
import os
import platform
import stat
import zipfile

import apache_beam
import pytest

from tests.helpers import run_cli

pytestmark = pytest.mark.slow


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
    assert 'leakage: no near-duplicates across splits' in result.stdout
    assert 'flat image' not in result.stdout

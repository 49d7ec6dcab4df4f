"""The command line without flags, as the README's first command runs it (a process of its own,
its workers forked): it converts a generated sample into ./sample_tfrecords on the local runner
(FnApiRunner), never Beam's PrismRunner, also on a machine where Prism's binary is at hand (as it
is after one download with internet access); the sample looks like photos, so the
near-duplicate check compares every image; nothing is left in the temp folder; running it again
replaces the sample output."""
import os
import platform
import stat
import zipfile

import apache_beam
import pytest

from tests.helpers import cli, run_cli

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
def test_the_default_run_converts_the_sample_never_starts_prism_and_leaves_nothing(tmp_path):
    marker, temp, work = tmp_path / 'prism-was-started', tmp_path / 'tmp', tmp_path / 'work'
    _plant_prism(tmp_path / 'home', marker)
    temp.mkdir()
    work.mkdir()
    env = dict(os.environ, HOME=str(tmp_path / 'home'), TMPDIR=str(temp))
    result = run_cli('--verbose', env=env, cwd=work)
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    assert 'Prism' not in result.stderr + result.stdout
    assert 'shard 1/1 written' in result.stderr
    assert '242 inputs in ' in result.stdout and ', start-up included (' in result.stdout
    assert 'Wrote dataset to sample_tfrecords' in result.stdout
    assert ("Load it with:\n  import tensorflow_datasets as tfds\n  "
            "tfds.builder_from_directory('sample_tfrecords')") in result.stdout
    assert 'leakage: no near-duplicates across splits' in result.stdout
    assert 'flat image' not in result.stdout
    assert sorted(n for n in os.listdir(work / 'sample_tfrecords') if 'tfrecord' in n) == [
        'dataset-test.tfrecord-00000-of-00001', 'dataset-train.tfrecord-00000-of-00001',
        'dataset-validation.tfrecord-00000-of-00001']
    assert [os.path.join(d, n) for d, _, names in os.walk(temp) for n in names] == []
    assert not [n for n in os.listdir(temp) if n.startswith('sample_images_')]
    assert cli(cwd=work).returncode == 0   # Running it again replaces the sample output.

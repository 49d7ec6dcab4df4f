"""Both ends of the Apache Beam range setup.py declares: the suite runs on the newest release the
registry holds (what a fresh install takes); here the oldest converts the generated sample and
writes the same bytes as the newest on the same input."""
import os
import re
import subprocess
import sys

import apache_beam
import pytest

from pipeline.sample_data import write_sample_dataset
from tests.helpers import convert, output_files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OLDEST = re.search(r"BEAM_OLDEST = '([^']+)'", open(os.path.join(REPO, 'setup.py')).read())[1]


@pytest.fixture(scope='module')
def oldest_beam(tmp_path_factory) -> dict:
    """An environment whose Apache Beam is the oldest supported release (installed from the
    registry into a folder of its own, the rest of this environment's packages beside it)."""
    target = tmp_path_factory.mktemp('beam-oldest')
    subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '--no-deps', '--target',
                    str(target), f'apache-beam=={OLDEST}'], check=True, timeout=600,
                   capture_output=True)
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), REPO]))


def _command(*argv, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'pipeline.run', *argv], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_oldest_beam_supported_runs_the_sample_and_writes_the_newests_bytes(oldest_beam,
                                                                              tmp_path):
    version = subprocess.run([sys.executable, '-c', 'import apache_beam; print(apache_beam.__version__)'],
                             env=oldest_beam, capture_output=True, text=True, check=True).stdout
    # The oldest, and another than this environment's (the newest, on a fresh install).
    assert version.strip() == OLDEST != apache_beam.__version__
    sample = _command(env=oldest_beam, cwd=tmp_path)
    assert sample.returncode == 0, sample.stderr
    assert 'Wrote dataset to sample_tfrecords' in sample.stdout
    inputs = f'{tmp_path}/sample_input'
    os.rename(f'{tmp_path}/sample_tfrecords', f'{tmp_path}/oldest_sample')
    write_sample_dataset(inputs)
    oldest = _command(f'--input_dir={inputs}', f'--output_dir={tmp_path}/oldest', env=oldest_beam)
    assert oldest.returncode == 0, oldest.stderr
    convert(f'--input_dir={inputs}', f'--output_dir={tmp_path}/newest')   # This environment's.
    assert output_files(f'{tmp_path}/oldest') == output_files(f'{tmp_path}/newest')

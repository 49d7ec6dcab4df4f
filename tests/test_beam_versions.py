"""Both ends of the Apache Beam range setup.py declares: the suite runs on the newest release the
registry holds (what a fresh install takes); here the oldest converts the generated sample and
writes the same bytes as the newest on the same input. And a Beam without the parser class
pipeline/beam_internals.py takes from it: the command parses its flags with the fallback."""
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


# `python -m pipeline.run` with Beam's parser class gone from its module, as from a release that
# renamed it: Beam's own code still finds it (a name a module lacks is looked up in builtins), the
# converter's (beam_internals.options_parser, which asks the module) takes its fallback.
_WITHOUT_BEAMS_PARSER = (
    'import builtins, runpy; from apache_beam.options import pipeline_options; '
    'builtins._BeamArgumentParser = vars(pipeline_options).pop("_BeamArgumentParser"); '
    'runpy.run_module("pipeline.run", run_name="__main__", alter_sys=True)')


def _command(*argv, env=None, cwd=None, beams_parser=True) -> subprocess.CompletedProcess:
    command = ['-m', 'pipeline.run'] if beams_parser else ['-c', _WITHOUT_BEAMS_PARSER]
    return subprocess.run([sys.executable, *command, *argv], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_oldest_beam_supported_runs_the_sample_and_writes_the_newests_bytes(oldest_beam,
                                                                              tmp_path):
    """The sample with Beam's parser; the conversion with the fallback parser."""
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
    oldest = _command(f'--input_dir={inputs}', f'--output_dir={tmp_path}/oldest', env=oldest_beam,
                      beams_parser=False)
    assert oldest.returncode == 0, oldest.stderr
    convert(f'--input_dir={inputs}', f'--output_dir={tmp_path}/newest')   # This environment's.
    assert output_files(f'{tmp_path}/oldest') == output_files(f'{tmp_path}/newest')


@pytest.mark.slow
def test_without_beams_parser_class_the_command_still_parses_its_flags_and_prints_its_help():
    helped = _command('--help', beams_parser=False)
    assert helped.returncode == 0, helped.stderr
    assert '--input_dir' in helped.stdout and '--jpeg_quality' in helped.stdout
    misspelt = _command('--input_dir=in', '--jpeg_qualty=90', beams_parser=False)
    assert misspelt.returncode == 2
    assert 'unknown flag --jpeg_qualty; did you mean --jpeg_quality?' in misspelt.stderr

"""Which flags get the local runner (pipeline/local_runner.py), and its door to Beam's internals
(pipeline/beam_internals.py); tests/test_sample.py shows the default command line never starts
PrismRunner."""
import subprocess
import sys

import apache_beam
import pytest

from pipeline import beam_internals
from pipeline.launch import RunnerKind, resolve
from pipeline.testing import imagemaker
from tests.helpers import convert, output_files, write_tree


@pytest.mark.parametrize('flags,kind', [
    ([], RunnerKind.LOCAL), (['--runner=DirectRunner'], RunnerKind.LOCAL),
    (['--runner=direct'], RunnerKind.LOCAL), (['--runner=PrismRunner'], RunnerKind.OTHER),
    (['--runner=PortableRunner'], RunnerKind.OTHER),
    (['--runner=DataflowRunner', '--project=p'], RunnerKind.DATAFLOW)])
def test_only_direct_runner_flags_get_the_local_runner(flags, kind):
    assert resolve(flags).runner is kind


def test_this_beam_has_every_internal_the_local_runner_uses():
    assert beam_internals.missing() is None


@pytest.mark.slow
def test_a_beam_without_an_internal_runs_on_its_own_workers_with_one_line(tmp_path):
    """The door's fallback: a name taken away, the run starts Beam's own worker processes and
    writes the same dataset as any other run."""
    inputs = write_tree(tmp_path / 'in', {f'{split}/c{i % 2}/{i}.jpg': imagemaker.jpeg(40, 30, seed=i)
                                          for split in ('train', 'test') for i in range(6)})
    taken = ('from apache_beam.runners.portability.portable_runner import JobServiceHandle\n'
             'del JobServiceHandle.encode_pipeline_options\n'
             'import runpy, sys\n'
             'sys.argv[0] = "pipeline.run"\n'
             'runpy.run_module("pipeline.run", run_name="__main__", alter_sys=True)\n')
    result = subprocess.run([sys.executable, '-c', taken, f'--input_dir={inputs}',
                             f'--output_dir={tmp_path}/fallback', '--direct_num_workers=2',
                             '--direct_running_mode=multi_processing'],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lacking = [line for line in result.stderr.splitlines() if 'lacks' in line]
    assert lacking == [f'this Apache Beam ({apache_beam.__version__}) lacks apache_beam.runners.'
                       'portability.portable_runner:JobServiceHandle.encode_pipeline_options: its '
                       'worker processes start as Beam starts them, which is slower']
    convert(f'--input_dir={inputs}', f'--output_dir={tmp_path}/usual')
    assert output_files(f'{tmp_path}/fallback') == output_files(f'{tmp_path}/usual')

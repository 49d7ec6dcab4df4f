"""The same conversion through Beam's portable job API (the protocol of Dataflow Runner v2,
Flink and Spark): an embedded job service with a LOOPBACK environment, against DirectRunner;
and which jobs the command line hands to a service instead of running them to the end."""
import os

import pytest

from pipeline import job
from pipeline.launch import resolve
from pipeline.testing import imagemaker
from tests.helpers import cli, convert, output_files, read_split, write_tree

PORTABLE = ['--runner=PortableRunner', '--job_endpoint=embed', '--environment_type=LOOPBACK']


@pytest.fixture(scope='module')
def inputs(tmp_path_factory) -> list[str]:
    """The flags of a conversion of two splits with a broken image."""
    files = {f'{split}/c{i % 3}/{i}.jpg': imagemaker.jpeg(30, 20, seed=i)
             for split in ('train', 'test') for i in range(40 if split == 'train' else 9)}
    files['train/c0/broken.jpg'] = b'not an image'
    inputs = write_tree(tmp_path_factory.mktemp('in'), files)
    return [f'--input_dir={inputs}', '--num_shards=3', '--max_error_ratio=0.1']


@pytest.fixture(scope='module')
def direct(inputs, tmp_path_factory) -> dict:
    """The files DirectRunner writes."""
    out = str(tmp_path_factory.mktemp('direct'))
    convert(*inputs, f'--output_dir={out}')
    return output_files(out)


@pytest.mark.slow
def test_portable_runner_writes_the_same_bytes_as_direct_runner(tmp_path, inputs, direct):
    summary = job.convert([*inputs, f'--output_dir={tmp_path}/portable', *PORTABLE])
    assert output_files(f'{tmp_path}/portable') == direct
    assert (summary['splits']['train']['records'], summary['splits']['train']['skipped']) == (40, 1)
    assert len(read_split(f'{tmp_path}/portable', 'test')) == 9


@pytest.mark.slow
def test_command_line_runs_an_in_process_portable_job_to_the_end(tmp_path, inputs, direct):
    portable = cli(*inputs, f'--output_dir={tmp_path}/portable', *PORTABLE)
    assert portable.returncode == 0, portable.stderr
    assert 'Traceback' not in portable.stderr
    assert not os.path.exists(f'{tmp_path}/portable/.lock')
    assert output_files(f'{tmp_path}/portable') == direct
    assert f' to {tmp_path}/portable. Load it with:' in portable.stdout
    assert 'submitted' not in portable.stdout


@pytest.mark.parametrize('flags,remote', [
    ([], False),
    (['--runner=DirectRunner'], False),
    (PORTABLE, False),
    (['--runner=PortableRunner', '--job_endpoint=localhost:8099', '--environment_type=LOOPBACK'],
     False),   # Its workers call back into this process.
    (['--runner=PortableRunner', '--job_endpoint=embed', '--environment_type=DOCKER'], False),
    (['--runner=FlinkRunner', '--environment_type=LOOPBACK'], False),
    (['--runner=PrismRunner'], False),
    (['--runner=PortableRunner', '--job_endpoint=flink-master:8099'], True),   # DOCKER workers.
    (['--runner=PortableRunner', '--job_endpoint=10.0.0.2:8099',
      '--environment_type=EXTERNAL', '--environment_config=10.0.0.3:50000'], True),
    (['--runner=DataflowRunner', '--project=p', '--region=us-central1'], True),
])
def test_only_jobs_handed_to_a_remote_service_are_left_running(flags, remote):
    assert resolve(flags).remote is remote

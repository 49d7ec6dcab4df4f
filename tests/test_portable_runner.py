"""The same conversion through Beam's portable job API (the protocol of Dataflow Runner v2,
Flink and Spark): an embedded job service with a LOOPBACK environment, against DirectRunner."""
from pipeline import job
from tests import imagemaker
from tests.helpers import output_files, read_split, write_tree

PORTABLE = ['--runner=PortableRunner', '--job_endpoint=embed', '--environment_type=LOOPBACK']


def test_portable_runner_writes_the_same_bytes_as_direct_runner(tmp_path):
    files = {f'{split}/c{i % 3}/{i}.jpg': imagemaker.jpeg(30, 20, seed=i)
             for split in ('train', 'test') for i in range(40 if split == 'train' else 9)}
    files['train/c0/broken.jpg'] = b'not an image'
    root = write_tree(tmp_path / 'in', files)
    flags = [f'--input_dir={root}', '--num_shards=3', '--max_error_ratio=0.1']
    summary = job.convert([*flags, f'--output_dir={tmp_path}/portable', *PORTABLE])
    job.convert([*flags, f'--output_dir={tmp_path}/direct'])
    assert output_files(f'{tmp_path}/portable') == output_files(f'{tmp_path}/direct')
    assert (summary['splits']['train']['records'], summary['splits']['train']['skipped']) == (40, 1)
    assert len(read_split(f'{tmp_path}/portable', 'test')) == 9

"""The plan preview: what a conversion will write and cost, with nothing converted or written."""
import dataclasses
import json
import os
import re

import pytest

from pipeline.testing import archivemaker, imagemaker
from tests.helpers import cli, write_tree


def _plan_cli(*argv):
    return cli('--plan_only', *argv)


@pytest.mark.slow
def test_plan_only_lists_and_plans_without_writing(tmp_path):
    files = {f'train/c{i % 2}/{i}.jpg': imagemaker.jpeg(40, 30, seed=i) for i in range(30)}
    files.update({f'test/c0/{i}.jpg': imagemaker.jpeg(40, 30, seed=100 + i) for i in range(5)})
    files['train/c0/.DS_Store'] = b'hidden'
    root = write_tree(tmp_path / 'in', files)
    out = tmp_path / 'out'
    result = _plan_cli(f'--input_dir={root}', f'--output_dir={out}', '--num_shards=3',
                       '--plan_format=json')
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    train_bytes = sum(len(v) for k, v in files.items() if k.startswith('train/') and 'DS_' not in k)
    listing = plan['splits']['train'].pop('listing')   # What a rerun compares (job.py).
    assert re.fullmatch('[0-9a-f]{16}', listing) and listing != plan['splits']['test']['listing']
    assert plan['splits']['train'] == {
        'inputs': 30, 'ignored': 1, 'labels': 2, 'shards': 3, 'chunks': 1,
        'input_bytes': train_bytes, 'shard_bytes': train_bytes // 3}
    assert plan['splits']['test']['inputs'] == 5 and plan['splits']['test']['shards'] == 3
    assert plan['labels'] == 2 and plan['estimate']['images'] == 35
    assert plan['estimate']['dataflow_workers_for_one_hour'] == 1
    assert not out.exists()

    text = _plan_cli(f'--input_dir={root}', '--num_shards=3')
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split() == ['split', 'inputs', 'ignored', 'labels', 'shards', 'chunks',
                                'input', 'GB', 'MB/shard']
    assert lines[1].split()[:6] == ['train', '30', '1', '2', '3', '1']
    assert '35 images' in text.stdout and 'images/s per vCPU' in text.stdout


@pytest.mark.slow
def test_plan_of_a_csv_estimates_its_bytes_from_a_sample(tmp_path):
    image = imagemaker.jpeg(40, 30)
    (tmp_path / 'img.jpg').write_bytes(image)
    for i in range(2000):
        os.symlink(tmp_path / 'img.jpg', tmp_path / f'l{i}.jpg')
    (tmp_path / 'train.csv').write_text(''.join(f'l{i}.jpg,c{i % 3}\n' for i in range(2000)))
    result = _plan_cli(f'--csv_train={tmp_path}/train.csv', '--plan_format=json')
    assert result.returncode == 0, result.stderr
    train = json.loads(result.stdout)['splits']['train']
    # Measured for a sample (one in 64 by key hash); every image has the same size.
    assert (train['inputs'], train['labels'], train['input_bytes']) == (2000, 3, 2000 * len(image))


def _document(images: int) -> dict:
    return {'labels': 1000, 'splits': {'train': {
        'inputs': images, 'ignored': 0, 'labels': 1000, 'shards': 1024, 'chunks': images // 128,
        'input_bytes': images * 110_000, 'shard_bytes': images * 110_000 // 1024}}}


def test_a_plan_that_reads_faster_than_a_new_bucket_serves_says_how_long_the_reads_take():
    from pipeline import plan
    small = plan.estimate(_document(1_281_167))['estimate']
    assert small['read_limited_seconds'] is None
    assert small['reads_per_second'] <= plan.BUCKET_READS_PER_SECOND
    assert 'a bucket serves at first' not in plan.format_plan(plan.estimate(_document(1_281_167)))

    large = plan.estimate(_document(100_000_000))
    e = large['estimate']
    assert e['reads_per_second'] > plan.BUCKET_READS_PER_SECOND
    # At 5,000 reads/s doubling every 20 minutes, 10^8 reads take about 73 minutes.
    assert 4300 < e['read_limited_seconds'] < 4450
    text = plan.format_plan(large)
    assert 'more than the ~5,000 object reads/s a bucket serves at first' in text
    assert f'at least {e["read_limited_seconds"] / 3600:.1f} h' in text
    assert 'one work item per vCPU' in text


@pytest.mark.slow
def test_an_input_archive_of_every_split_is_named_once(tmp_path):
    files = {f'{split}/c{i % 2}/{i}.jpg': imagemaker.jpeg(20, 20, seed=i)
             for split in ('train', 'test') for i in range(4)}
    (tmp_path / 'data.tar.gz').write_bytes(archivemaker.tar(files, 'gz'))
    result = _plan_cli(f'--input_dir={tmp_path}/data.tar.gz')
    assert result.returncode == 0, result.stderr
    assert ('1 gzip-compressed archive(s), each listed in one pass and read again in one pass per '
            'chunk of its members (gzip cannot be split; an uncompressed .tar is read by ranged '
            f'reads): {tmp_path}/data.tar.gz\n') in result.stdout


def test_the_time_here_is_the_plans_own_time_and_the_sampled_rate_on_the_workers_and_cores():
    from pipeline import plan
    rate = {'images': 280, 'seconds': 0.28, 'seconds_per_image': 0.001,
            'machine_cpu_seconds_per_image': 0.001}
    document = dict(_document(10_000), local_rate=rate)   # 78 chunks.
    here = plan.Here(cores=2, workers=2, planning_seconds=5.28)
    e = plan.estimate(document, here)['estimate']
    # The plan's 5.28 s less the sample's 0.28 s, and 10,000 x 1 ms on two workers.
    assert (e['here']['fixed_seconds'], e['here']['converting_seconds']) == pytest.approx((5, 5))
    assert e['seconds_here'] == pytest.approx(10) and e['cores_here'] == 2
    text = plan.format_plan(plan.estimate(document, here))
    assert ('Here: ~10 s for the same command without --plan_only: 5 s of start-up, listing and '
            'planning (as this plan took them), and 5 s converting at 2,000 images/s, the rate '
            'measured now: 280 sampled inputs converted with these options by one worker') in text
    # Other processes (or a local storage emulator) used a core more per image meanwhile.
    busy = dict(document, local_rate=dict(rate, machine_cpu_seconds_per_image=0.002))
    assert plan.estimate(busy, here)['estimate']['here']['converting_seconds'] == pytest.approx(10)
    # To a gs:// output the bytes go back through the storage: its share (beyond the worker's
    # own CPU) counts twice.
    storage = dict(document, local_rate=dict(rate, worker_cpu_seconds_per_image=0.0005))
    to_cloud = plan.Here(cores=2, workers=2, planning_seconds=5.28, output_in_cloud=True)
    assert plan.estimate(storage, to_cloud)['estimate']['here']['converting_seconds'] == \
        pytest.approx(7.5)
    # Its requests to the output, each as long as the one timed after planning: with 78 chunks
    # and 4 shards, 82 parts, 40 + (5 x 82 + 6 x 4) / 2 workers = 257 one after another.
    timed = dataclasses.replace(to_cloud, request_seconds=0.01)
    four = dict(storage, splits={'train': dict(document['splits']['train'], shards=4)})
    e = plan.estimate(four, timed)['estimate']['here']
    assert (e['storage_requests_seconds'], e['fixed_seconds']) == pytest.approx((2.57, 7.57))
    assert '3 s of requests to the gs:// output' in plan.here_line(e)
    one_chunk = dict(document, splits={'train': dict(document['splits']['train'], chunks=1)})
    assert plan.estimate(one_chunk, here)['estimate']['here']['workers'] == 1
    assert plan.estimate(document)['estimate']['seconds_here'] is None   # Dataflow only.


"""The plan preview: what a conversion will write and cost, with nothing converted or written."""
import dataclasses
import glob
import json
import os
import re

import pytest
from PIL import Image

from pipeline.testing import archivemaker, imagemaker
from tests.helpers import cli, output_files, write_tree


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
    # Every input sampled: the records' bytes, each JPEG kept as it is plus its features.
    output = plan['splits']['train'].pop('output_bytes')
    assert train_bytes < output < train_bytes + 30 * 1000
    assert plan['splits']['train'] == {
        'inputs': 30, 'ignored': 1, 'labels': 2, 'shards': 3, 'chunks': 1,
        'input_bytes': train_bytes, 'output_sampled': 35, 'shard_bytes': output // 3}
    assert plan['splits']['test']['inputs'] == 5 and plan['splits']['test']['shards'] == 3
    # Re-encoding every image costs the Dataflow estimate its CPU too.
    reencoded = _plan_cli(f'--input_dir={root}', '--num_shards=3', '--plan_format=json',
                          '--reencode')
    from pipeline.plan import IMAGES_PER_VCPU_SECOND, REENCODE_CPU_SECONDS
    assert json.loads(reencoded.stdout)['estimate']['vcpu_hours'] == pytest.approx(
        plan['estimate']['vcpu_hours'] * (1 + REENCODE_CPU_SECONDS * IMAGES_PER_VCPU_SECOND))
    assert plan['labels'] == 2 and plan['estimate']['images'] == 35
    assert plan['estimate']['dataflow_workers_for_one_hour'] == 1
    assert not out.exists()

    text = _plan_cli(f'--input_dir={root}', '--num_shards=3')
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split() == ['split', 'inputs', 'ignored', 'labels', 'shards', 'chunks',
                                'input', 'GB', 'output', 'GB', 'MB/shard']
    assert lines[1].split()[:6] == ['train', '30', '1', '2', '3', '1']
    assert '35 images' in text.stdout and 'images/s per vCPU' in text.stdout
    assert 'out (estimated from the records of 35 sampled inputs converted with these options)' \
        in text.stdout
    # In the test's process (no worker processes): the memory of one process, at least this
    # plan's peak.
    memory = plan['estimate']['memory_here']
    assert memory['workers'] == 0 and memory['largest_worker_bytes'] == 0
    assert memory['together_bytes'] == memory['launcher_bytes'] >= memory['plan_launcher_bytes'] > 0
    assert re.search(r'^Memory here: ~[\d,]+ MB in one process: ', text.stdout, re.M)


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
    assert ('1 gzip-compressed archive(s), each listed in one pass and decompressed once more into '
            'the temporary folder (as much disk as its members take uncompressed), then read '
            f'by ranged reads: {tmp_path}/data.tar.gz\n') in result.stdout
    # Its members are timed here (read in one pass first), as the conversion converts them.
    assert 'Here: ' in result.stdout and 'the rate measured now: ' in result.stdout


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


def _png_and_jpeg_tree(count: int) -> dict:
    """A quarter PNG photos (~55 KB, re-encoded as JPEGs of ~10 KB), the rest JPEG photos
    (~6 KB, kept as they are): the records weigh about 0.4 of the input."""
    files = {}
    for i in range(count):
        png = i % 4 == 0
        photo = Image.fromarray(imagemaker.photo(*(192, 192) if png else (128, 128), seed=i))
        files[f'train/c{i % 3}/{i}.{"png" if png else "jpg"}'] = (
            imagemaker.encode(photo, 'PNG') if png else imagemaker.encode(photo, 'JPEG', quality=90))
    return files


@pytest.mark.slow
def test_shards_of_reencoded_inputs_are_sized_by_their_output(tmp_path):
    """600 inputs of which 150 PNGs, aiming at 0.5 MB shards: the plan estimates the output
    from the 300 sampled inputs it converts, and the run writes the shards it planned, each
    near the target (sized by the input bytes, there were more than twice as many, each less
    than half the target); two worker processes write the same bytes."""
    root = write_tree(tmp_path / 'in', _png_and_jpeg_tree(600))
    out, target = tmp_path / 'out', 0.5 * (1 << 20)
    flags = [f'--input_dir={root}', f'--output_dir={out}', '--target_shard_mb=0.5']
    planned = _plan_cli(*flags, '--plan_format=json')
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)['splits']['train']
    assert plan['output_sampled'] == 300
    assert plan['input_bytes'] / target > 2 * plan['shards']
    result = cli(*flags)
    assert result.returncode == 0, result.stderr
    sizes = [os.path.getsize(p) for p in glob.glob(f'{out}/dataset-train.tfrecord-*')]
    assert len(sizes) == plan['shards']   # The plan's shards.
    # The plan's output within 5% of what was written (0.6% measured); the shards within 10%
    # of the target on average (the count is rounded), each within 30% (~60 records, a quarter
    # of them larger: 0.80-1.14 measured).
    assert abs(plan['output_bytes'] / sum(sizes) - 1) < 0.05, (plan['output_bytes'], sum(sizes))
    assert abs(sum(sizes) / len(sizes) / target - 1) < 0.1, sizes
    assert all(0.7 < size / target < 1.3 for size in sizes), sizes
    two = cli(*flags[:1], f'--output_dir={tmp_path}/two', '--target_shard_mb=0.5',
              '--direct_running_mode=multi_processing', '--direct_num_workers=2')
    assert two.returncode == 0, two.stderr
    assert output_files(f'{tmp_path}/two') == output_files(out)


def test_the_output_is_estimated_by_a_line_through_the_sampled_inputs():
    from fractions import Fraction
    from transforms.sharding import output_estimate, output_line
    # Kept as they are: each record is its input and 500 bytes more, at any size.
    kept = [['train', size, size + 500] for size in (1000, 5000, 100_000)]
    assert output_line(kept) == (500, 1)
    assert output_estimate(10, 2_000_000, output_line(kept)) == 2_005_000
    # Re-encoded PNGs (a quarter of their bytes) beside JPEGs kept: the line through both.
    mixed = [['train', 40_000, 10_500], ['test', 40_000, 10_500], ['train', 6000, 6500]]
    a, b = output_line(mixed)
    assert (a, b) == (6500 - 6000 * Fraction(4000, 34000), Fraction(4000, 34000))
    # A size unknown: the mean per input. No sample: the input bytes.
    unknown = [['train', None, 900], ['train', 700, 1200]]
    assert output_line(unknown) == (1050, 0)
    assert output_estimate(4, 0, output_line(unknown), unknown) == 4200
    assert output_estimate(4, 12_345, None) == 12_345


def test_the_memory_here_is_the_plans_peaks_and_what_the_run_holds_beyond_them():
    from pipeline import plan
    mb = 1 << 20
    memory = {'peak_bytes': 200 * mb, 'shared_bytes': 140 * mb, 'ref_bytes': 250.0,
              'filed_bytes_per_record': 532.0, 'source_chars': 50.0}
    document = dict(_document(200_000), local_rate={'memory': memory})   # 1,024 shards.
    here = plan.Here(cores=2, workers=2, planning_seconds=9, launcher_peak_bytes=250 * mb)
    m = plan.estimate(document, here)['estimate']['memory_here']
    # Per worker 100,000 inputs: their refs held and written (2 x 25 MB, and 140 bytes each),
    # 53.2 MB of filed hashes written out (x3), 196 records of a shard joined (700 bytes each).
    assert m['inputs_per_worker'] == 100_000
    assert m['listing_bytes'] == 2 * 25_000_000 + 14_000_000
    assert m['filing_bytes'] == 3 * 53_200_000 and m['join_bytes'] == 196 * 700
    assert m['largest_worker_bytes'] == 200 * mb + 3 * 53_200_000
    # The launcher: its plan's peak and 1 KB per part (1,562 chunks and 1,024 shards).
    assert m['launcher_bytes'] == 250 * mb + (1562 + 1024) * 1024
    assert m['together_bytes'] == m['launcher_bytes'] + 2 * (m['largest_worker_bytes'] - 140 * mb)
    assert plan.memory_line(m).startswith(
        'Memory here: ~677 MB in all, the launcher ~253 MB and each of 2 worker(s) up to ~352 MB')
    # A budget's worth held at most: 1,000,000 inputs per worker write 64 MiB at a time.
    big = plan.estimate(dict(document, splits={'train': dict(
        document['splits']['train'], inputs=2_000_000)}), here)['estimate']['memory_here']
    assert big['filing_bytes'] == 3 * (64 << 20)
    # In one process: all of it in the launcher.
    one = plan.estimate(document, dataclasses.replace(here, workers=1, one_process=True))
    m = one['estimate']['memory_here']
    assert (m['workers'], m['largest_worker_bytes'], m['inputs_per_worker']) == (0, 0, 200_000)
    assert m['together_bytes'] == m['launcher_bytes'] == 250 * mb + (1562 + 1024) * 1024 + 3 * (64 << 20)
    assert plan.estimate(_document(10))['estimate']['memory_here'] is None   # Dataflow only.


def test_the_sample_weighs_each_input_as_its_record_and_a_broken_one_nothing(tmp_path):
    """The sample of every bundle's listing, converted on one worker as the conversion converts
    it: an input of each split weighs its record, a broken file nothing."""
    from pipeline.base.refs import ExampleRef
    from pipeline.base.settings import ConversionSettings
    from transforms import local_rate
    from transforms.labels import LabelMap
    from transforms.listing import Listed
    files = _png_and_jpeg_tree(24)
    files['validation/c1/broken.jpg'] = b'\xff\xd8\xff' + bytes(50)
    root = write_tree(tmp_path / 'in', files)
    paths = [os.path.join(root, name) for name in sorted(files)]
    refs = [ExampleRef(('train', 'validation', 'test')[i % 3], path, path,
                       os.path.basename(path), 'c0', size=os.path.getsize(path))
            for i, path in enumerate(paths)]
    listed = [Listed(sample=refs[:13]), Listed(sample=refs[13:])]   # Two bundles' samples.
    label_map = LabelMap(('c0',), (('c0', 0),))
    settings = ConversionSettings('sample', ('train', 'validation', 'test'))
    measured = local_rate.measure_sample(listed, label_map, settings)
    weighed = measured['weighed']
    assert measured['converted_by_run'] and len(weighed) == 25
    assert sorted(w[2] == 0 for w in weighed) == [False] * 24 + [True]
    assert len({w[0] for w in weighed}) == 3

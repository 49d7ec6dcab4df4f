"""verify: passes on a sound dataset and names each kind of damage precisely."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from pipeline.output import records
from pipeline.tools.verify import verify
from pipeline.testing import imagemaker
from tests.helpers import convert, shard_paths, write_tree

SHARED = imagemaker.jpeg(50, 50, seed=99)


@pytest.fixture(scope='module')
def dataset(tmp_path_factory):
    files = {f'train/c{c}/{i}.jpg': imagemaker.jpeg(40, 30, seed=c * 100 + i) for c in range(3) for i in range(6)}
    files.update({f'test/c{c}/{i}.jpg': imagemaker.jpeg(40, 30, seed=1000 + c * 100 + i) for c in range(3) for i in range(2)})
    root = write_tree(tmp_path_factory.mktemp('in'), files)
    out = str(tmp_path_factory.mktemp('out') / 'ds')
    convert(f'--input_dir={root}', f'--output_dir={out}', '--num_shards=3')
    return out


@pytest.fixture
def copy(dataset, tmp_path):
    target = str(tmp_path / 'copy')
    shutil.copytree(dataset, target)
    return target


@pytest.mark.slow
def test_sound_dataset_passes(dataset):
    assert verify(dataset, processes=2) == []


@pytest.mark.slow
def test_the_command_reads_a_local_dataset_without_apache_beam(dataset):
    """`python -m pipeline.verify` is a dataset checker, not a pipeline: with Beam made
    unimportable it still checks every shard."""
    without_beam = ('import sys; sys.modules["apache_beam"] = None; import runpy; '
                    'runpy.run_module("pipeline.verify", run_name="__main__")')
    result = subprocess.run([sys.executable, '-c', without_beam, dataset], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith('leakage: 0 cluster(s) of near-duplicates span splits')
    assert lines[1].split()[:6] == ['train', '18', 'records', '3', 'tfrecord', 'shards']
    assert result.stdout.endswith('OK: no problems found\n')


def test_flipped_byte_is_found_with_shard_and_record(copy):
    path = shard_paths(copy, 'train')[1]
    data = bytearray(open(path, 'rb').read())
    data[200] ^= 0x40
    open(path, 'wb').write(bytes(data))
    problems = verify(copy, processes=1)
    [problem] = problems
    assert problem.startswith(f'train shard 1 ({os.path.basename(path)}) record 0: data '
                              'checksum mismatch (and so: ')


def test_truncated_shard(copy):
    path = shard_paths(copy, 'train')[0]
    data = open(path, 'rb').read()
    open(path, 'wb').write(data[:-100])
    problems = verify(copy, processes=1)
    name = os.path.basename(path)
    [problem] = problems   # Its count and its split's, which disagree, are summed in it.
    assert problem.startswith(f'train shard 0 ({name}) record ')
    assert ': file ends inside the record data (and so: ' in problem


def test_missing_shard_and_shard_from_another_run(copy):
    os.remove(shard_paths(copy, 'test')[2])
    stale = os.path.join(copy, 'dataset-train.tfrecord-00004-of-00005')
    shutil.copy(shard_paths(copy, 'train')[0], stale)
    problems = verify(copy, processes=1)
    assert 'dataset-test.tfrecord-00002-of-00003: missing shard' in problems
    assert ('dataset-train.tfrecord-00004-of-00005: not part of this dataset (a shard from another '
            'run or dataset); remove it') in problems


def test_count_mismatch_in_dataset_info(copy):
    path = os.path.join(copy, 'dataset_info.json')
    info = json.load(open(path))
    info['splits'][0]['shardLengths'][0] = str(int(info['splits'][0]['shardLengths'][0]) + 1)
    json.dump(info, open(path, 'w'))
    problems = verify(copy, processes=1)
    split = info['splits'][0]['name']
    assert problems == [f'{split} shard 0 ({os.path.basename(shard_paths(copy, split)[0])}): '
                        f'{int(info["splits"][0]["shardLengths"][0]) - 1} records, dataset_info.json '
                        f'says {info["splits"][0]["shardLengths"][0]}',
                        'dataset_info.json: not the file the run wrote (its SHA-256 is not the '
                        'one summary.json notes)']


def test_wrong_label(copy):
    path = shard_paths(copy, 'train')[2]
    with open(path, 'rb') as stream:
        raw = list(records.read_records(stream))
    example = {k: (v[0] if len(v) == 1 else v) for k, v in records.decode_example(raw[1]).items()}
    example[records.LABEL] = (example[records.LABEL] + 1) % 3
    raw[1] = records.encode_example(example)
    open(path, 'wb').write(b''.join(records.frame_record(r) for r in raw))
    problems = verify(copy, processes=1)
    text = example[records.TEXT].decode()
    name = os.path.basename(path)
    assert problems == [f"train shard 2 ({name}) record 1: label {example[records.LABEL]} is "
                        f"'c{example[records.LABEL]}' in the label names but the record says "
                        f"{text!r}",
                        f'train shard 2 ({name}): its records are not those the run wrote '
                        'there, in that order (summary.json: shards swapped, records reordered '
                        'or replaced?)']


@pytest.mark.slow
def test_copies_within_and_across_splits_are_findings(tmp_path, capsys):
    """Byte-identical images under other names, within a split and across splits: the
    converter commits them, so verify prints them as findings and finds no problem."""
    root = write_tree(tmp_path / 'in', {'train/a/x.jpg': SHARED, 'train/a/y.jpg': imagemaker.jpeg(seed=1),
                                        'train/b/x2.jpg': SHARED, 'test/a/z.jpg': SHARED})
    out = str(tmp_path / 'out')
    convert(f'--input_dir={root}', f'--output_dir={out}')
    assert verify(out, processes=1) == []
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ('exact copies within a split: 1 record(s) hold the image of an earlier '
                        'record of their split (train 1); a data-quality finding, not damage')
    assert lines[1].startswith('  e.g. train shard 0 record ')
    assert {lines[1].split(' (')[1].split(')')[0], lines[1].split(' (')[2].split(')')[0]} == {
        f'{root}/train/a/x.jpg', f'{root}/train/b/x2.jpg'}
    assert lines[2] == ('exact copies across splits: 1 image(s) of a split are in an earlier '
                        'split too (test 1); see leakage.jsonl')


@pytest.mark.slow
def test_cli_exit_codes(dataset, copy):
    ok = subprocess.run([sys.executable, '-m', 'pipeline.tools.verify', dataset, '--sample=0.5'],
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and 'OK: no problems found' in ok.stdout
    os.remove(shard_paths(copy, 'train')[0])
    bad = subprocess.run([sys.executable, '-m', 'pipeline.tools.verify', copy], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and 'missing shard' in bad.stderr


@pytest.mark.slow
def test_held_lock_and_leftover_temp_folders_are_warnings_with_their_size(copy):
    """Only folders that carry this tool's marker are its temporary folders."""
    for run_id, marker in [('0123456789abcdef', 'running'), ('fedcba9876543210', 'committed'),
                           ('00000000000000aa', None)]:
        os.makedirs(os.path.join(copy, f'.tmp-{run_id}', 'parts'))
        with open(os.path.join(copy, f'.tmp-{run_id}', 'parts', 'p.tfrecord'), 'wb') as stream:
            stream.write(b'x' * 2_500_000)
        if marker:
            with open(os.path.join(copy, f'.tmp-{run_id}', '.image-tfrecords-run.json'), 'w') as f:
                json.dump({'run_id': run_id, 'state': marker}, f)
    with open(os.path.join(copy, '.lock'), 'w') as stream:
        json.dump({'token': 't', 'run_id': 'r1', 'host': 'h', 'pid': 7, 'started': 's\x1b[2J'},
                  stream)
    result = subprocess.run([sys.executable, '-m', 'pipeline.verify', copy], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0 and 'OK: no problems found' in result.stdout
    assert result.stderr.splitlines() == [
        f'warning: {copy}/.lock: held by run r1 on host h, pid 7, started s\\x1b[2J; a run on '
        'another host or a Dataflow job holds it; once it is not running any more, pass '
        '--break_lock',
        f'warning: {copy}/.tmp-0123456789abcdef: temporary folder of an unfinished run (2.5 MB); '
        'rerunning it resumes from there, --clean_temp or --overwrite removes it',
        f'warning: {copy}/.tmp-fedcba9876543210: left by run fedcba9876543210, whose commit '
        'finished (2.5 MB); the next run on this folder removes it']


def test_a_folder_that_does_not_exist_is_no_folder_or_holds_only_an_unfinished_run_says_so(tmp_path, capsys):
    from pipeline.tools.verify import main as verify_main
    assert verify_main([f'{tmp_path}/none']) == 2
    assert capsys.readouterr().err.splitlines() == [
        f'error: {tmp_path}/none does not exist: give the --output_dir of a conversion']
    (tmp_path / 'file').write_bytes(b'')
    os.mkfifo(tmp_path / 'fifo')   # Never opened: a reader would wait for a writer.
    for name in ('file', 'fifo'):
        assert verify_main([f'{tmp_path}/{name}']) == 2
        assert capsys.readouterr().err.splitlines() == [
            f'error: {tmp_path}/{name} is not a folder: give the --output_dir of a conversion']
    assert verify_main(['gs://My-Bucket/out']) == 2   # No client's retries nor traceback.
    assert capsys.readouterr().err.splitlines() == [
        "error: gs://My-Bucket/out: 'My-Bucket' is not a bucket name (3-63 lowercase letters, "
        'digits, dashes, underscores and dots, a letter or digit at each end)']
    run = tmp_path / 'out' / '.tmp-0123456789abcdef'
    run.mkdir(parents=True)
    (run / '.image-tfrecords-run.json').write_text('{"run_id": "0123456789abcdef", '
                                                   '"state": "running"}')
    assert verify_main([f'{tmp_path}/out']) == 2
    assert capsys.readouterr().err.splitlines() == [
        f'error: {tmp_path}/out has no readable dataset_info.json and labels.txt (a JSON object '
        f'and a text file of this tool); it holds {run}: temporary folder of an unfinished run '
        '(0.0 MB); rerunning it resumes from there, --clean_temp or --overwrite removes it']

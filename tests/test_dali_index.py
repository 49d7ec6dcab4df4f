"""--dali_index: SHARD.idx beside each TFRecord shard, in the format of NVIDIA DALI's
tfrecord2idx, written, committed (locally, on Cloud Storage, after a kill), and checked by verify.

Each index is compared with one computed here from the shard's own framing (u64 length, u32
CRC, data, u32 CRC), and each line is read back with TensorFlow's random-access record reader.
"""
import contextlib
import glob
import io
import json
import os
import shutil
import signal
import struct

import pytest

from pipeline.output import dali_index
from pipeline.testing import imagemaker
from pipeline.testing.gcs_servers import BUCKET, download, upload
from pipeline.tools.verify import main as verify_main
from tests.helpers import Answer, cli, killed_at, output_files, write_tree

IMAGES = {f'{split}/c{i % 3}/{split}{i}.jpg': imagemaker.jpeg(30 + i % 7, 20, seed=i + seed)
          for split, seed, n in (('train', 0, 24), ('validation', 1000, 9)) for i in range(n)}


def _framing_index(shard: bytes) -> bytes:
    """The index tfrecord2idx would write: per record 'offset size' (framing included)."""
    lines, offset = [], 0
    while offset < len(shard):
        (length,) = struct.unpack('<Q', shard[offset:offset + 8])
        size = 8 + 4 + length + 4
        lines.append(f'{offset} {size}\n')
        offset += size
    assert offset == len(shard)
    return ''.join(lines).encode()


def _check_indexes(files: dict) -> int:
    """Asserts every TFRecord shard in `files` ({name: bytes}) has its exact index, and nothing
    else has one; returns the number of indexes."""
    shards = sorted(n for n in files if '.tfrecord-' in n and not n.endswith('.idx'))
    assert sorted(n for n in files if n.endswith('.idx')) == [f'{n}.idx' for n in shards]
    for name in shards:
        assert files[f'{name}.idx'] == _framing_index(files[name]), name
    return len(shards)


def _verify(out: str) -> Answer:
    """`python -m pipeline.verify OUT --processes=1`, run in this process."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = verify_main([out, '--processes=1'])
    return Answer(code, stdout.getvalue(), stderr.getvalue())


@pytest.fixture(scope='module')
def inputs(tmp_path_factory) -> str:
    """IMAGES as a folder layout, shared by the module's tests (none changes it)."""
    return write_tree(tmp_path_factory.mktemp('dali') / 'in', IMAGES)


# Without the check for copies across splits (--leakage=off), but where copies are dropped: what
# is tested is the indexes, and the check's Beam stages take half of a small conversion's time.
NO_LEAKAGE_CHECK = '--leakage=off'
FLAGS = ['--num_shards=3', '--dali_index', NO_LEAKAGE_CHECK]


@pytest.fixture(scope='module')
def indexed(inputs, tmp_path_factory) -> tuple[str, Answer]:
    """(output folder, the command's answer) of IMAGES converted once with FLAGS: the dataset
    the module's tests read, copy and compare with."""
    out = str(tmp_path_factory.mktemp('indexed') / 'out')
    run = cli(f'--input_dir={inputs}', f'--output_dir={out}', *FLAGS)
    assert run.returncode == 0, run.stderr
    return out, run


@pytest.mark.slow
def test_indexes_match_the_shards_framing_and_verify_checks_them(tmp_path, inputs, indexed):
    import tensorflow as tf
    from tensorflow.python.lib.io import tf_record
    out, run = indexed
    assert '# or with NVIDIA DALI: fn.readers.tfrecord(path=shards, index_path=' in run.stdout
    files = output_files(out)
    assert _check_indexes(files) == 6
    assert json.loads(files['summary.json'])['dali_index'] is True
    shard = f'{out}/dataset-train.tfrecord-00001-of-00003'
    reader = tf_record.tf_record_random_reader(shard)
    expected = list(tf.data.TFRecordDataset(shard).as_numpy_iterator())
    lines = files['dataset-train.tfrecord-00001-of-00003.idx'].decode().splitlines()
    assert len(lines) == len(expected) == 8
    for line, record in zip(lines, expected):   # Each line is where TensorFlow finds a record.
        offset, size = map(int, line.split(' '))
        assert reader.read(offset) == (record, offset + size)
    checked = _verify(out)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    tampered = str(tmp_path / 'tampered')
    shutil.copytree(out, tampered)
    index = f'{tampered}/dataset-validation.tfrecord-00002-of-00003.idx'
    lines = open(index).read().splitlines(keepends=True)
    offset, size = lines[1].split()
    lines[1] = f'{offset} {int(size) + 1}\n'
    open(index, 'w').write(''.join(lines))
    os.remove(f'{tampered}/dataset-train.tfrecord-00000-of-00003.idx')
    failed = _verify(tampered)
    assert failed.returncode == 1
    assert (f'validation shard 2 (dataset-validation.tfrecord-00002-of-00003) index '
            f'dataset-validation.tfrecord-00002-of-00003.idx: line 2 is {lines[1].strip()!r}, '
            f"not '{offset} {size}' (offset and size of the shard's record 1)\n") in failed.stderr
    assert ('train shard 0 (dataset-train.tfrecord-00000-of-00003) index '
            'dataset-train.tfrecord-00000-of-00003.idx: missing') in failed.stderr
    assert failed.stderr.count('.idx') == 2

    again = str(tmp_path / 'again')   # Another command: it replaces the dataset.
    shutil.copytree(out, again)
    replaced = cli(f'--input_dir={inputs}', f'--output_dir={again}', '--num_shards=3',
                   '--overwrite', NO_LEAKAGE_CHECK)
    assert replaced.returncode == 0, replaced.stderr
    assert not glob.glob(f'{again}/*.idx') and not glob.glob(f'{again}/.*')
    assert 'DALI' not in replaced.stdout
    assert json.loads(open(f'{again}/summary.json').read())['dali_index'] is False
    assert _verify(again).returncode == 0


@pytest.mark.slow
def test_both_formats_index_the_tfrecord_shards_alike(tmp_path, inputs):
    flags = [f'--input_dir={inputs}', '--num_shards=2', '--dali_index', NO_LEAKAGE_CHECK]
    assert cli(*flags, f'--output_dir={tmp_path}/tf').returncode == 0
    both = cli(*flags, f'--output_dir={tmp_path}/both', '--output_format=array_record,tfrecord')
    assert both.returncode == 0, both.stderr
    files = output_files(f'{tmp_path}/both')
    assert _check_indexes(files) == 4
    indexes = {n: data for n, data in files.items() if n.endswith('.idx')}
    assert indexes == {n: data for n, data in output_files(f'{tmp_path}/tf').items()
                       if n.endswith('.idx')}
    assert _verify(f'{tmp_path}/both').returncode == 0
    shutil.copy(f'{tmp_path}/both/dataset-train.tfrecord-00000-of-00002.idx',
                f'{tmp_path}/both/dataset-train.array_record-00000-of-00002.idx')
    beside = _verify(f'{tmp_path}/both')
    assert beside.returncode == 1
    assert beside.stderr == ('dataset-train.array_record-00000-of-00002.idx: a DALI index '
                             'beside dataset-train.array_record-00000-of-00002, a shard in '
                             'array_record (DALI indexes TFRecord shards only); remove it\n')


@pytest.mark.slow
def test_copies_dropped_from_the_shards_are_dropped_from_the_indexes(tmp_path):
    copies = {f'validation/c{i % 3}/copy{i}.jpg': IMAGES[f'train/c{i % 3}/train{i}.jpg']
              for i in range(0, 24, 5)}
    inputs = write_tree(tmp_path / 'in', {**IMAGES, **copies})
    out = str(tmp_path / 'out')
    run = cli(f'--input_dir={inputs}', f'--output_dir={out}', '--num_shards=2',
              '--leakage=drop', '--dali_index')
    assert run.returncode == 0, run.stderr
    summary = json.loads(open(f'{out}/summary.json').read())
    assert summary['splits']['validation']['dropped_copies'] == len(copies) == 5
    assert _check_indexes(output_files(out)) == 4
    checked = _verify(out)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    summary['splits']['validation']['dropped_copies'] -= 1   # And one input fewer: accounted.
    summary['splits']['validation']['inputs'] -= 1
    open(f'{out}/summary.json', 'w').write(json.dumps(summary))
    tampered = _verify(out)
    assert tampered.returncode == 1
    assert tampered.stderr == ('summary.json: validation has 4 dropped_copies, leakage.jsonl lists '
                               '5 members of later splits\n')


@pytest.mark.slow
def test_array_record_alone_is_refused_in_one_line(tmp_path, inputs):
    refused = cli(f'--input_dir={inputs}', f'--output_dir={tmp_path}/out',
                  '--output_format=array_record', '--dali_index')
    assert refused.returncode == 2
    assert refused.stderr == ('error: --dali_index indexes TFRecord shards and --output_format='
                              'array_record writes none; add tfrecord to --output_format or '
                              'leave --dali_index out\n')
    assert not os.path.exists(tmp_path / 'out')


@pytest.mark.slow
@pytest.mark.parametrize('kill_at', ['shard:2', 'commit:install:1'])
def test_killed_run_resumed_writes_the_same_indexes(tmp_path, inputs, indexed, kill_at):
    flags = [f'--input_dir={inputs}', *FLAGS]
    out = str(tmp_path / 'out')
    killed = killed_at(kill_at, *flags, f'--output_dir={out}')
    assert killed.returncode == -signal.SIGKILL
    if kill_at.startswith('shard'):   # Two shards, each with its index, staged; none committed.
        assert len(glob.glob(f'{out}/.tmp-*/shards/*.idx')) == 2
        assert not [n for n in os.listdir(out) if not n.startswith('.')]
    resumed = cli(*flags, f'--output_dir={out}')
    assert resumed.returncode == 0, resumed.stderr
    if kill_at.startswith('shard'):
        assert resumed.stderr.count('reused from an earlier attempt') == 2
    else:
        assert 'completed the interrupted commit' in resumed.stderr
    assert output_files(out) == output_files(indexed[0])
    assert _check_indexes(output_files(out)) == 6


@pytest.mark.slow
def test_indexes_on_cloud_storage(gcs, tmp_path):
    source = upload(IMAGES, 'raw')
    flags = [f'--input_dir={source}', *FLAGS]
    out = f'gs://{BUCKET}/out'
    run = cli(*flags, f'--output_dir={out}')
    assert run.returncode == 0, run.stderr
    assert cli(*flags, f'--output_dir={tmp_path}/local').returncode == 0
    remote = download('out')
    assert _check_indexes(remote) == 6
    assert remote == output_files(f'{tmp_path}/local')
    checked = _verify(out)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_index_lines_and_the_first_bad_line():
    assert dali_index.index_bytes([30, 17, 1040]) == b'0 30\n30 17\n47 1040\n'
    assert dali_index.problem(b'0 30\n30 17\n47 1040\n', [30, 17, 1040]) is None
    assert dali_index.problem(b'0 30\n30 17\n47 1040', [30, 17, 1040]) == \
        'line 3 does not end in a newline'
    assert dali_index.problem(b'0 30\r\n30 17\r\n', [30, 17]) == \
        "line 1 is '0 30\\r', not '0 30' (offset and size of the shard's record 0)"
    assert dali_index.problem(b'0 30\n', [30, 17]) == \
        "line 2 is missing: '30 17' (offset and size of the shard's record 1)"
    assert dali_index.problem(b'0 30\n30 17\n9 9\n', [30, 17]) == \
        "line 3 is '9 9', past the last of the shard's 2 records"

"""Every input accounted for (a record, a reported error or a counted "ignored" entry), and
every mistake a one-line answer."""
import json
import os
import runpy
import subprocess
import sys

import pytest

from pipeline.output import records
from pipeline.testing import imagemaker
from tests.helpers import cli, convert, read_split, write_tree

# Conversions that succeed run without the check for copies across splits (--leakage=off): what
# is tested is how inputs are counted, and the check's Beam stages take half of a small
# conversion's time. The failing runs, whose every line is checked, keep it.
NO_LEAKAGE_CHECK = '--leakage=off'


def _reasons(out: str, split: str) -> dict:
    lines = [json.loads(line) for line in open(os.path.join(out, f'errors-{split}.jsonl'))]
    return {os.path.basename(e['source']): e['reason'] for e in lines}


@pytest.mark.slow
def test_hostile_folder_every_input_is_a_record_an_error_or_ignored(tmp_path):
    root = write_tree(tmp_path / 'in', {
        'train/cat/ok1.jpg': imagemaker.jpeg(30, 20, seed=1),
        'train/cat/ok2.jpg': imagemaker.jpeg(30, 20, seed=2),
        **{f'train/flat{i}.jpg': imagemaker.jpeg(30, 20, seed=10 + i) for i in range(3)},
        'train/cat/.hidden_dir/in_hidden.jpg': imagemaker.jpeg(30, 20, seed=3),
        'train/cat/.DS_Store': b'finder',
        'train/.cache/x.jpg': imagemaker.jpeg(30, 20, seed=4),
        'train/bad/broken.jpg': b'\xff\xd8 not a jpeg',
        'train/bad/notes.txt': b'text',
        'test/cat/t.jpg': imagemaker.jpeg(30, 20, seed=5),
    })
    os.symlink('/no/such/target.jpg', f'{root}/train/cat/dangling.jpg')
    os.symlink('loop.jpg', f'{root}/train/cat/loop.jpg')
    out = str(tmp_path / 'out')
    summary = convert(f'--input_dir={root}', f'--output_dir={out}', '--max_error_ratio=1',
                      NO_LEAKAGE_CHECK)
    train = summary['splits']['train']
    assert (train['inputs'], train['records'], train['skipped'], train['ignored']) == (9, 2, 7, 3)
    assert train['classes'] == {'bad': 0, 'cat': 2} and train['empty_classes'] == ['bad']
    reasons = _reasons(out, 'train')
    assert {n: reasons[n] for n in ('flat0.jpg', 'dangling.jpg', 'loop.jpg')} == {
        'flat0.jpg': f'not in a class folder: move it to {root}/train/<class>/flat0.jpg',
        'dangling.jpg': 'symbolic link whose target does not exist',
        'loop.jpg': 'symbolic link loop'}
    assert set(reasons) == {'flat0.jpg', 'flat1.jpg', 'flat2.jpg', 'dangling.jpg', 'loop.jpg',
                            'broken.jpg', 'notes.txt'}
    assert sorted(r[records.FILENAME] for r in read_split(out, 'train', hashed=False)) == [
        'ok1.jpg', 'ok2.jpg']
    assert open(os.path.join(out, 'labels.txt')).read() == 'bad\ncat\n'


@pytest.mark.slow
def test_hostile_csvs_are_read_as_the_csv_module_reads_them(tmp_path):
    images = {'a.jpg': imagemaker.jpeg(30, 20, seed=1), 'we\nird.jpg': imagemaker.jpeg(30, 20, seed=2),
              'b.jpg': imagemaker.jpeg(30, 20, seed=3), 'c.jpg': imagemaker.jpeg(30, 20, seed=4)}
    write_tree(tmp_path, images)
    (tmp_path / 'train.csv').write_bytes(
        '\ufeffuri,label\r\na.jpg,x\r\n"we\nird.jpg",y\r\nb.jpg,x,extra\r\nc.jpg,y\r\n'.encode())
    out = str(tmp_path / 'out')
    summary = convert(f'--csv_train={tmp_path}/train.csv', f'--output_dir={out}',
                      '--max_error_ratio=0.5', NO_LEAKAGE_CHECK)
    train = summary['splits']['train']
    assert (train['inputs'], train['records'], train['skipped'], train['ignored']) == (4, 3, 1, 0)
    assert open(os.path.join(out, 'labels.txt')).read() == 'x\ny\n'   # No phantom 'label' class.
    assert _reasons(out, 'train') == {'train.csv:5': f'{tmp_path}/train.csv line 5: 3 fields, '
                                      'expected 2 (uri,label); name further columns in the header '
                                      'line to make them features'}
    assert sorted(r[records.FILENAME] for r in read_split(out, 'train', hashed=False)) == [
        'a.jpg', 'c.jpg', 'we\nird.jpg']



@pytest.mark.slow
def test_csv_header_columns_become_features_and_sizes(tmp_path):
    write_tree(tmp_path, {'a.jpg': imagemaker.jpeg(30, 20, seed=1), 'c.jpg': imagemaker.jpeg(30, 20)})
    (tmp_path / 'train.csv').write_text('path,label,size,photographer\n'
                                        'a.jpg,x,100,Ann\nc.jpg,y,12,"Bo, Jr."\nd.jpg,y,big,Cy\n')
    out = str(tmp_path / 'out')
    summary = convert(f'--csv_train={tmp_path}/train.csv', f'--output_dir={out}',
                      '--max_error_ratio=0.5', NO_LEAKAGE_CHECK)
    assert (summary['splits']['train']['records'], summary['splits']['train']['skipped']) == (2, 1)
    assert _reasons(out, 'train') == {
        'train.csv:4': f"{tmp_path}/train.csv line 4: size 'big' is not a whole number of bytes"}
    import tensorflow as tf
    rows = read_split(out, 'train', {'photographer': tf.io.FixedLenFeature([], tf.string)},
                      hashed=False)
    assert sorted((r[records.FILENAME], r['photographer']) for r in rows) == [
        ('a.jpg', 'Ann'), ('c.jpg', 'Bo, Jr.')]


@pytest.mark.parametrize('typo,expected', [
    ('--num_shard=4', 'error: unknown flag --num_shard; did you mean --num_shards?'),
    ('--input-dir={inputs}', 'error: unknown flag --input-dir; did you mean --input_dir?'),
])
def test_typod_flags_are_an_error_naming_the_nearest_flag(tmp_path, typo, expected):
    inputs = write_tree(tmp_path / 'in', {'train/a/1.jpg': imagemaker.jpeg(20, 20)})
    out = tmp_path / 'out'
    result = cli(typo.format(inputs=inputs), f'--output_dir={out}', cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f'{expected} (python -m pipeline.run --help lists the flags; Beam and runner flags are '
        'accepted as well)']
    assert not out.exists() and not (tmp_path / 'sample_tfrecords').exists()


def test_output_without_input_is_an_error_not_the_sample(tmp_path):
    result = cli(f'--output_dir={tmp_path}/out')
    assert result.returncode == 2 and result.stderr.splitlines() == [
        'error: give one input: --input_dir (with --csv_<split> for splits it does not hold), '
        '--csv_<split>, --config or --webdataset SPLIT=PATTERN (got none)']
    assert not (tmp_path / 'out').exists()


FAILURES = {
    'empty split': "error: split 'test' has no examples; add images for it or leave the split "
                   'out of the input',
    'error ratio': "error: 1 of 31 inputs of split 'train' (3.2%) could not be converted, more "
                   'than --max_error_ratio 0.01; nothing was committed. See ',
}


def _inputs_that_fail(root, case: str) -> str:
    files = {f'train/c/{i}.jpg': imagemaker.jpeg(40, 30, seed=i) for i in range(30)}
    if case == 'error ratio':
        files['train/c/bad.jpg'] = b'not an image'
    inputs = write_tree(root, files)
    if case == 'empty split':
        os.makedirs(f'{inputs}/test/c')
    return inputs


def _only_the_last_line_is_an_error(stderr: str) -> str:
    """The error line of a failed run, after progress and shard lines only."""
    lines = stderr.splitlines()
    assert 'Traceback' not in stderr
    assert [n for n, line in enumerate(lines) if line.startswith('error: ')] == [len(lines) - 1]
    assert all(line.startswith('converting: ') or ' shard ' in line for line in lines[:-1]), lines
    return lines[-1]


@pytest.mark.slow
@pytest.mark.parametrize('case', FAILURES)
def test_a_failing_run_prints_one_line_and_no_traceback(tmp_path, case):
    inputs = _inputs_that_fail(tmp_path / 'in', case)
    given = ['--max_error_ratio=0.01'] if case == 'error ratio' else []   # No few files more.
    result = cli(f'--input_dir={inputs}', f'--output_dir={tmp_path}/out/ds', *given)
    assert result.returncode == 2
    assert _only_the_last_line_is_an_error(result.stderr).startswith(FAILURES[case])


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_no_traceback(tmp_path):
    """A 64 KB file system of its own, in a private mount namespace: a process of its own."""
    inputs = _inputs_that_fail(tmp_path / 'in', 'full disk')
    out = f'{tmp_path}/out'
    os.makedirs(out)
    argv = ['unshare', '--mount', '--map-root-user', 'sh', '-c',
            f'mount -t tmpfs -o size=64k tmpfs {out} && exec "$@"', 'sh',
            sys.executable, '-m', 'pipeline.run', f'--input_dir={inputs}', f'--output_dir={out}/ds']
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    line = _only_the_last_line_is_an_error(result.stderr)
    assert line.startswith(f'error: cannot write {out}/ds/.tmp-')
    assert line.endswith(': No space left on device; free some space or choose another '
                         '--output_dir')


@pytest.mark.slow
def test_more_shards_than_inputs_is_said_in_one_line(tmp_path):
    inputs = write_tree(tmp_path / 'in', {f'train/c/{i}.jpg': imagemaker.jpeg(20, 20, seed=i)
                                          for i in range(7)})
    result = cli(f'--input_dir={inputs}', f'--output_dir={tmp_path}/out', '--num_shards=100',
                 NO_LEAKAGE_CHECK)
    assert result.returncode == 0, result.stderr
    assert 'train: --num_shards 100 is more than its 7 inputs; writing 7 shards' \
        in result.stderr.splitlines()
    assert len([n for n in os.listdir(tmp_path / 'out') if 'tfrecord' in n]) == 7


def test_report_without_matplotlib_says_which_extra_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, 'matplotlib', None)   # As where it is not installed.
    monkeypatch.setattr(sys, 'argv', ['x', str(tmp_path)])
    with pytest.raises(SystemExit) as ended:
        runpy.run_module('pipeline.tools.report', run_name='__main__')
    assert ended.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: the report needs matplotlib: pip install -e '.[report]' (or pip install matplotlib)"]

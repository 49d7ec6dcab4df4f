"""Nothing lost or half-written: overwrite rules, failed runs, error ratio, duplicates, CLI errors."""
import json
import os

import pytest

from pipeline.errors import DatasetError
from pipeline.testing import imagemaker
from tests.helpers import cli, convert, output_files, read_split, shard_paths, write_tree


# Conversions run without the check for copies across splits (--leakage=off): what is tested is
# what a run keeps, refuses and replaces, and the check's Beam stages take half of a small
# conversion's time.
NO_LEAKAGE_CHECK = '--leakage=off'


def _convert(*argv, **kwargs) -> dict:
    """helpers.convert with NO_LEAKAGE_CHECK."""
    return convert(*argv, NO_LEAKAGE_CHECK, **kwargs)


def _cli(*argv, **kwargs):
    """helpers.cli with NO_LEAKAGE_CHECK."""
    return cli(*argv, NO_LEAKAGE_CHECK, **kwargs)


def _error(*argv, **kwargs) -> str:
    with pytest.raises(Exception) as info:
        _convert(*argv, **kwargs)
    message = DatasetError.find_in(info.value)
    assert message is not None, info.value
    return message


@pytest.fixture
def images(tmp_path):
    return write_tree(tmp_path / 'in', {f'train/c{i % 2}/{i}.jpg': imagemaker.jpeg(30, 20, seed=i)
                                        for i in range(8)})


@pytest.mark.slow
def test_existing_dataset_is_refused_then_fully_replaced_with_overwrite(tmp_path, images):
    out = str(tmp_path / 'out')
    _convert(f'--input_dir={images}', f'--output_dir={out}', '--num_shards=3', '--dataset_name=old')
    assert len(shard_paths(out, 'train')) == 3
    message = _error(f'--input_dir={images}', f'--output_dir={out}')
    assert message.startswith(f'{out} already holds a dataset (')
    assert message.endswith('pass --overwrite to replace it or choose another --output_dir')
    (tmp_path / 'out' / 'notes.md').write_text('not ours')
    # As earlier versions wrote it: the class names under the name they gave them (nested TFDS
    # features), and a summary.json without the digests of the metadata files.
    os.rename(f'{out}/image.class.label.labels.txt', f'{out}/image-class-label.labels.txt')
    with open(f'{out}/summary.json') as stream:
        summary = json.load(stream)
    del summary['digests']
    with open(f'{out}/summary.json', 'w') as stream:
        json.dump(summary, stream)
    _convert(f'--input_dir={images}', f'--output_dir={out}', '--overwrite', '--dataset_name=new')
    names = sorted(os.listdir(out))
    assert [n for n in names if 'tfrecord' in n] == ['new-train.tfrecord-00000-of-00001']
    assert 'notes.md' in names and not any(n.startswith('.tmp-') for n in names)
    assert [n for n in names if n.endswith('.labels.txt')] == ['image.class.label.labels.txt']


@pytest.mark.slow
def test_error_ratio_failure_commits_nothing_and_keeps_previous_dataset(tmp_path, images):
    out = str(tmp_path / 'out')
    _convert(f'--input_dir={images}', f'--output_dir={out}')
    before = {n: open(os.path.join(out, n), 'rb').read() for n in os.listdir(out)
              if not n.startswith('.')}
    for i in range(3):
        (tmp_path / 'in' / 'train' / 'c0' / f'bad{i}.jpg').write_bytes(b'\xff\xd8garbage')
    message = _error(f'--input_dir={images}', f'--output_dir={out}', '--overwrite')
    assert message.startswith("3 of 11 inputs of split 'train' (27.3%) could not be converted, "
                              'more than --max_error_ratio 0.01; nothing was committed. See ')
    report = message.split('See ')[1].split(' for each')[0]
    assert report.startswith(out + '/.tmp-') and 'bad0.jpg' in open(report).read()
    after = {n: open(os.path.join(out, n), 'rb').read() for n in os.listdir(out)
             if not n.startswith('.')}
    assert after == before
    assert not [n for n in os.listdir(os.path.dirname(report)) if n.endswith('.tfrecord')]


@pytest.mark.slow
def test_failed_run_leaves_no_final_named_shards(tmp_path, images):
    """The run fails in its commit step, after every shard was written."""
    (tmp_path / 'in' / 'train' / 'c0' / 'bad.jpg').write_bytes(b'not an image')
    out = str(tmp_path / 'out')
    message = _error(f'--input_dir={images}', f'--output_dir={out}', '--num_shards=3')
    assert message.startswith("1 of 9 inputs of split 'train' (11.1%) could not be converted")
    temp = [n for n in os.listdir(out) if n.startswith('.tmp-')]
    assert len(temp) == 1
    assert len([n for n in os.listdir(os.path.join(out, temp[0], 'shards'))
                if n.endswith('.tfrecord')]) == 3
    assert sorted(n for n in os.listdir(out) if not n.startswith('.tmp-')) == []


@pytest.mark.slow
def test_duplicates_are_an_error_or_dropped_and_reported(tmp_path, images):
    csv = tmp_path / 'train.csv'
    csv.write_text(f'{images}/train/c0/0.jpg,a\n{images}/train/c1/1.jpg,b\n{images}/train/c0/0.jpg,a\n')
    message = _error(f'--csv_train={csv}', f'--output_dir={tmp_path}/a')
    assert message == (f"split 'train' lists 1 input(s) more than once, e.g. {images}/train/c0/0.jpg; "
                       'remove the duplicates or pass --skip_duplicates to drop them')
    summary = _convert(f'--csv_train={csv}', f'--output_dir={tmp_path}/b', '--skip_duplicates',
                      '--max_error_ratio=0.5')
    train = summary['splits']['train']
    assert (train['inputs'], train['records'], train['skipped']) == (3, 2, 1)
    assert 'duplicate' in open(tmp_path / 'b' / 'errors-train.jsonl').read()
    assert len(read_split(str(tmp_path / 'b'), 'train', hashed=False)) == 2


@pytest.mark.slow
def test_empty_split_is_an_error(tmp_path, images):
    os.makedirs(tmp_path / 'in' / 'test' / 'c0')
    message = _error(f'--input_dir={images}', f'--output_dir={tmp_path}/out')
    assert message == "split 'test' has no examples; add images for it or leave the split out of the input"


@pytest.mark.parametrize('argv,expected', [
    (['--input_dir=/no/such/folder', '--output_dir={out}'],
     'error: cannot list folder /no/such/folder: No such file or directory'),
    (['--csv_train=/no/such.csv', '--output_dir={out}'],
     'error: --csv_train /no/such.csv does not exist; give the path of a CSV file with uri,label lines'),
    (['--csv_train=/x.csv', '--config=x:Y', '--output_dir={out}'],
     'error: give one input: --input_dir (with --csv_<split> for splits it does not hold), '
     '--csv_<split>, --config or --webdataset SPLIT=PATTERN (got --csv_*, --config)'),
    (['--config=nosuchmodule:Cfg', '--output_dir={out}'],
     "error: --config nosuchmodule:Cfg: cannot import it (No module named 'nosuchmodule'); is the module on PYTHONPATH?"),
    (['--input_dir=/tmp', '--output_dir={out}', '--jpeg_quality=0'], 'error: --jpeg_quality must be 1..100'),
])
def test_cli_errors_are_one_line(tmp_path, argv, expected):
    result = cli(*(arg.format(out=tmp_path / 'out') for arg in argv))
    assert result.returncode == 2
    assert result.stderr.strip() == expected


def test_cli_help_documents_every_flag():
    from pipeline.options import converter_flag_names
    result = cli('--help')
    assert result.returncode == 0
    for name in converter_flag_names():
        assert f'--{name}' in result.stdout, name


def test_output_inside_the_input_is_refused_in_one_line(tmp_path, images):
    for out in (f'{images}/train/out', images):
        result = cli(f'--input_dir={images}', f'--output_dir={out}')
        assert result.returncode == 2
        assert result.stderr.strip() == (
            f'error: --output_dir {out} is inside --input_dir {images}; the next run would read '
            'the dataset as input. Choose an output folder outside the input')
    assert not os.path.exists(f'{images}/train/out')


def _converted_once(tmp_path, images) -> tuple[list[str], dict]:
    """(the flags converting `images` into tmp_path/out, the files they wrote)."""
    argv = [f'--input_dir={images}', f'--output_dir={tmp_path}/out']
    assert _cli(*argv).returncode == 0
    return argv, output_files(f'{tmp_path}/out')


@pytest.mark.slow
def test_rerunning_a_finished_command_says_so_and_exits_0(tmp_path, images):
    argv, before = _converted_once(tmp_path, images)
    again = _cli(*argv)
    assert again.returncode == 0, again.stderr
    run_id = json.loads(before['summary.json'])['run_id']
    assert again.stderr.strip() == (
        f'{tmp_path}/out already holds the dataset of this command (run {run_id}) and its input '
        'is unchanged; nothing to do')
    assert 'inputs/s' not in again.stdout
    assert '8 inputs, converted by an earlier run of this command; nothing converted now' in (
        again.stdout)
    assert output_files(f'{tmp_path}/out') == before
    other = _cli(*argv, '--jpeg_quality=80')
    assert other.returncode == 2 and 'already holds a dataset (' in other.stderr


@pytest.mark.slow
def test_rerunning_a_csv_conversion_with_a_shard_count_finds_its_input_unchanged(tmp_path,
                                                                               image_folders):
    """A CSV gives no sizes; listing it again to compare measures what the conversion measured
    (none, with --num_shards), so the same input has the same fingerprint."""
    root = image_folders(300)
    rows = ''.join(f'{root}/train/c{i % 3}/{i}.jpg,c{i % 3}\n' for i in range(300))
    (tmp_path / 'train.csv').write_text('path,label\n' + rows)
    argv = [f'--csv_train={tmp_path}/train.csv', f'--output_dir={tmp_path}/out', '--num_shards=2']
    assert _cli(*argv).returncode == 0
    again = _cli(*argv)
    assert again.returncode == 0, again.stderr
    assert again.stderr.strip().endswith('and its input is unchanged; nothing to do')


@pytest.mark.slow
def test_a_rerun_after_the_input_changed_says_what_changed_and_converts_nothing(tmp_path, images):
    argv, before = _converted_once(tmp_path, images)
    refusal = (f'error: {tmp_path}/out holds the dataset of this command, but its input changed '
               'since ({}); pass --overwrite to convert again')
    write_tree(images, {'train/c0/new.jpg': imagemaker.jpeg(30, 20, seed=99)})
    added = _cli(*argv)
    assert (added.returncode, added.stderr.strip()) == (2, refusal.format('train: 9 inputs now, 8 then'))
    os.remove(f'{images}/train/c0/new.jpg')
    write_tree(images, {'train/c0/0.jpg': imagemaker.jpeg(32, 20, seed=0)})   # Rewritten.
    modified = _cli(*argv)
    assert (modified.returncode, modified.stderr.strip()) == (2, refusal.format(
        'train: 8 inputs as then, but other names, sizes or labels'))
    assert output_files(f'{tmp_path}/out') == before
    rebuilt = _cli(*argv, '--overwrite')
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads(open(f'{tmp_path}/out/summary.json').read())['splits']['train']['records'] == 8

"""`python -m pipeline.tools.verify` checks every file of a dataset against what the run wrote:
each tampering below is one line naming the file, exit 1, never a traceback."""
import json
import os
import sys

import pytest
from PIL import Image

from pipeline.output import metadata
from pipeline.testing import imagemaker
from tests.helpers import convert, run_measured, shard_paths, write_tree
from pipeline.testing.datasets import copy_of, edit_json, read_shard, run_verify, swap, write_shard

@pytest.fixture(scope='module')
def dataset(tmp_path_factory) -> str:
    files = {f'train/c{i % 3}/{i}.jpg': imagemaker.jpeg(40, 30, seed=i) for i in range(18)}
    files['train/c0/bad.jpg'] = b'not an image'
    root = write_tree(tmp_path_factory.mktemp('in'), files)
    out = str(tmp_path_factory.mktemp('out') / 'ds')
    convert(f'--input_dir={root}', f'--output_dir={out}', '--num_shards=6',
            '--max_error_ratio=0.5')
    return out


@pytest.fixture
def copy(dataset, tmp_path) -> str:
    return copy_of(dataset, tmp_path)


def _swap_shards(out: str) -> list[str]:
    """Two shards of as many records (so dataset_info.json cannot tell them apart) swapped."""
    with open(os.path.join(out, 'dataset_info.json')) as stream:
        lengths = json.load(stream)['splits'][0]['shardLengths']
    first, second = next((i, j) for i in range(len(lengths)) for j in range(i + 1, len(lengths))
                         if lengths[i] == lengths[j])
    paths = [shard_paths(out, 'train')[i] for i in (first, second)]
    sizes = [os.path.getsize(path) for path in paths]
    assert sizes[0] != sizes[1]
    swap(*paths)
    return [f'train shard {index} ({os.path.basename(path)}): {size} bytes, summary.json says '
            f'{noted} (shards swapped or replaced?)'
            for index, path, size, noted in zip((first, second), paths, sizes[::-1], sizes)]


def _reorder_class_names(out: str) -> list[str]:
    path = os.path.join(out, 'image.class.label.labels.txt')
    with open(path) as stream:
        names = stream.read().splitlines()
    with open(path, 'w') as stream:
        stream.write(''.join(f'{name}\n' for name in reversed(names)))
    return ['image.class.label.labels.txt: not the class names of labels.txt in their order; '
            'TFDS would name the labels wrongly']


def _float_height(out: str) -> list[str]:
    def edit(features):
        features['featuresDict']['features']['image/height']['tensor']['dtype'] = 'float32'
    edit_json(os.path.join(out, 'features.json'), edit)
    return ['features.json: image/height is not described as this tool describes it (int)']


def _edit_record_count(out: str) -> list[str]:
    def edit(summary):
        summary['splits']['train']['records'] += 1
    edit_json(os.path.join(out, 'summary.json'), edit)
    return ['summary.json: train has 19 records, the dataset has 18']


def _empty_error_report(out: str) -> list[str]:
    open(os.path.join(out, 'errors-train.jsonl'), 'w').close()
    return ['errors-train.jsonl: 0 entries, summary.json says 1 skipped inputs']


def _edit_leakage(out: str) -> list[str]:
    with open(os.path.join(out, 'leakage.jsonl'), 'w') as stream:
        stream.write('{"members": 5}\n')
    return ['leakage.jsonl: line 1 is not a cluster this tool wrote']


@pytest.mark.parametrize('tamper', [_swap_shards, _reorder_class_names, _float_height,
                                    _edit_record_count, _empty_error_report, _edit_leakage])
def test_tampered_file_is_one_line(copy, tamper):
    expected = tamper(copy)
    result = run_verify(copy)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == expected
    assert result.stdout.endswith(f'{len(expected)} problem(s)\n')


def _older(*keys: str):
    """summary.json as a version before it noted `keys` of the train split, its digests and
    its own wrote it."""
    def edit(summary):
        del summary['digests'], summary[metadata.SUMMARY_DIGEST]
        for key in keys:
            del summary['splits']['train'][key]
    return edit


OLDER = [  # What verify says of a dataset of a version before summary.json noted digests.
    'summary.json: notes no SHA-256 of itself (summary_digest), so what verify cannot recompute '
    'from the records (the run id, the options, the listings) is not checked: written by a '
    'version before it noted one, or edited',
    'summary.json: notes no SHA-256 of dataset_info.json and 6 more files (digests), so their '
    'bytes are not checked: written by a version before it noted them, or edited']


def test_a_dataset_written_before_summary_noted_shards_and_digests_gets_every_other_check(copy):
    """Its missing digests are a problem each, and its files are still checked against each
    other: the class names, for one."""
    edit_json(os.path.join(copy, 'summary.json'), _older('shard_bytes'))
    result = run_verify(copy)
    assert result.returncode == 1
    assert result.stderr.splitlines() == OLDER
    expected = _reorder_class_names(copy)
    assert run_verify(copy).stderr.splitlines() == expected + OLDER


def _many_shard_lengths(count: int):
    def tamper(out: str) -> None:
        def edit(info):
            info['splits'][0]['shardLengths'] = ['1'] * count
        edit_json(os.path.join(out, 'dataset_info.json'), edit)
    return tamper


def _huge_journal(out: str) -> None:
    with open(os.path.join(out, '.commit.json'), 'wb') as stream:
        stream.truncate(3 << 29)   # 1.5 GiB of zeros, sparse.


@pytest.mark.parametrize('tamper, expected', [
    (_many_shard_lengths(10_000_000), 'dataset_info.json holds more than 8,000,000 JSON values'),
    (_many_shard_lengths(1_000_001),
     'dataset_info.json does not describe a dataset this tool can read (split train lists '
     '1000001 shards, more than the 1000000 this tool writes)'),
    (_huge_journal, '.commit.json holds more than 256 MiB')],
    ids=['ten-million-shards', 'a-million-and-one-shards', 'huge-journal'])
def test_oversized_metadata_is_refused_in_one_line_within_bounded_memory(copy, tamper,
                                                                          expected):
    tamper(copy)
    result, peak = run_measured(sys.executable, '-m', 'pipeline.tools.verify', copy,
                                '--processes=1')
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f'error: {copy}/') and expected in line
    assert peak < 1 << 30


def _equal_records(tmp_path, *flags: str) -> str:
    """A dataset of 12 records of one length: JPEGs of one length (kept as they are) under
    names of one length, wherever the keys' hashes put them. Converted without the check for
    copies across splits (--leakage=off): what is tested is how verify tells records apart, and
    the check's Beam stages take half of a small conversion's time."""
    by_length = {}
    for red in range(256):
        image = imagemaker.encode(Image.new('RGB', (40, 30), (red, 0, 0)), 'JPEG')
        by_length.setdefault(len(image), set()).add(image)
    images = sorted(max(by_length.values(), key=len))[:12]
    assert len(images) == 12
    files = {f'train/c0/a{i:02d}.jpg': image for i, image in enumerate(images)}
    out = str(tmp_path / 'out')
    convert(f'--input_dir={write_tree(tmp_path / "in", files)}', f'--output_dir={out}',
            '--leakage=off', *flags)
    return out


@pytest.fixture(scope='module')
def equal_records(tmp_path_factory):
    """copy(tmp_path, shards): a copy in tmp_path of _equal_records in that many shards, each
    number of shards converted once."""
    made = {}

    def copy(tmp_path, shards: int) -> str:
        if shards not in made:
            made[shards] = _equal_records(tmp_path_factory.mktemp(f'equal{shards}'),
                                          f'--num_shards={shards}')
        return copy_of(made[shards], tmp_path)
    return copy


def _records_moved(where: str) -> list[str]:
    return [f'train shard {index} ({os.path.basename(path)}): its records are not those the '
            'run wrote there, in that order (summary.json: shards swapped, records reordered '
            'or replaced?)' for index, path in where]


def test_two_records_swapped_within_a_shard_are_named(tmp_path, equal_records):
    """The last two records of a shard swapped: its bytes and first record are unchanged."""
    out = equal_records(tmp_path, 2)
    path = shard_paths(out, 'train')[0]
    found = read_shard(path)
    assert len(found) >= 3
    found[-2:] = found[:-3:-1]
    write_shard(path, found)
    result = run_verify(out)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == _records_moved([(0, path)])


def test_two_records_of_equal_length_swapped_between_shards_are_named(tmp_path, equal_records):
    out = equal_records(tmp_path, 4)
    paths = shard_paths(out, 'train')
    first, fourth = read_shard(paths[0]), read_shard(paths[3])
    assert len(first) >= 2 and len(fourth) >= 2 and len(first[-1]) == len(fourth[-1])
    first[-1], fourth[-1] = fourth[-1], first[-1]
    write_shard(paths[0], first)
    write_shard(paths[3], fourth)
    result = run_verify(out)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == _records_moved([(0, paths[0]), (3, paths[3])])


def test_a_dataset_noting_only_first_records_gets_their_check(tmp_path, equal_records):
    """Datasets of the version before summary.json noted each shard's content: their first
    records tell two swapped shards apart."""
    out = equal_records(tmp_path, 6)
    edit_json(os.path.join(out, 'summary.json'), _older('shard_content'))
    assert run_verify(out).stderr.splitlines() == [
        OLDER[0], OLDER[1].replace('dataset_info.json and 6', 'dataset_info.json and 5')]
    first, second = shard_paths(out, 'train')[:2]
    swap(first, second)
    result = run_verify(out)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        f'train shard {index} ({os.path.basename(path)}): its first record is not the one the '
        'run wrote there (summary.json: shards swapped or replaced?)'
        for index, path in enumerate((first, second))] + [
        OLDER[0], OLDER[1].replace('dataset_info.json and 6', 'dataset_info.json and 5')]


def test_two_shards_of_equal_size_swapped_are_named(tmp_path, equal_records):
    """Shards of equal bytes: only their records tell them apart."""
    out = equal_records(tmp_path, 6)
    first, second = shard_paths(out, 'train')[:2]
    assert os.path.getsize(first) == os.path.getsize(second)
    swap(first, second)
    result = run_verify(out)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        f'train shard {index} ({os.path.basename(path)}): its records are not those the run '
        'wrote there, in that order (summary.json: shards swapped, records reordered or '
        'replaced?)' for index, path in enumerate((first, second))]



def _deep_line(name: str):
    def tamper(out: str) -> list[str]:
        with open(os.path.join(out, name), 'w') as stream:
            stream.write('[' * 200_000 + ']' * 200_000 + '\n')
        return [f"{name}: line 1 is not an entry of split 'train'"]
    return tamper


def _long_line(out: str) -> list[str]:
    with open(os.path.join(out, 'errors-train.jsonl'), 'w') as stream:
        stream.write('{"split": "train", "source": "' + 'x' * (2 << 20) + '"}\n')
    return ["errors-train.jsonl: line 1 is not an entry of split 'train'"]


@pytest.mark.parametrize('tamper', [_deep_line('errors-train.jsonl'),
                                    _deep_line('damaged-train.jsonl'), _long_line],
                         ids=['deep-errors', 'deep-damaged', 'long-line'])
def test_a_hostile_report_line_is_one_line(copy, tamper):
    expected = tamper(copy)
    result = run_verify(copy)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == expected


def _many_lines(name: str, line: bytes):
    def tamper(out: str) -> None:
        with open(os.path.join(out, name), 'wb') as stream:
            stream.write(line * (30_000_000 // len(line)))
    return tamper


@pytest.mark.parametrize('tamper, expected', [
    (_many_lines('errors-train.jsonl', b'{}\n'),
     "errors-train.jsonl: line 1 is not an entry of split 'train'"),
    (_many_lines('errors-train.jsonl', b'{"split": "train", "source": "x"}\n'),
     'errors-train.jsonl: more than 1 entries, summary.json says 1'),
    (_many_lines('leakage.jsonl', b'{"split":"train"}\n'),
     'leakage.jsonl: line 1 is not a cluster this tool wrote')],
    ids=['empty-objects', 'entries', 'leakage'])
def test_a_large_report_is_read_a_line_at_a_time(copy, tamper, expected):
    """30 MB of lines: the old reader held them all parsed (several times the file)."""
    tamper(copy)
    result, peak = run_measured(sys.executable, '-m', 'pipeline.tools.verify', copy,
                                '--processes=1')
    assert result.returncode == 1, result.stderr
    assert expected in result.stderr.splitlines()
    assert peak < 150 << 20


def test_a_shard_count_not_the_summarys_is_one_line_without_reading_shards(copy):
    _many_shard_lengths(999_999)(copy)
    result, peak = run_measured(sys.executable, '-m', 'pipeline.tools.verify', copy,
                                '--processes=1')
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        'dataset_info.json: train lists 999999 shards, summary.json says 6; no shard was read']
    assert peak < 500 << 20


def test_a_shard_count_not_the_folders_is_one_line_without_a_summary(copy):
    _many_shard_lengths(999_999)(copy)
    os.remove(os.path.join(copy, 'summary.json'))
    result, peak = run_measured(sys.executable, '-m', 'pipeline.tools.verify', copy,
                                '--processes=1')
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        'dataset_info.json: lists 999999 shards, the folder holds 6 and has no summary.json of '
        'this dataset; no shard was read']
    assert peak < 500 << 20


def test_many_problems_of_one_kind_are_capped(copy):
    """36 shards listed, 30 of them absent: twenty of each kind of problem named (missing,
    unreadable), the rest counted by kind in one last line."""
    def edit(info):
        info['splits'][0]['shardLengths'] += ['0'] * 30
    def noted(summary):
        summary['splits']['train']['shards'] += 30
    edit_json(os.path.join(copy, 'dataset_info.json'), edit)
    edit_json(os.path.join(copy, 'summary.json'), noted)
    lines = run_verify(copy).stderr.splitlines()
    missing = [line for line in lines if line.endswith('-of-00036: missing shard')]
    assert len(missing) == 20
    assert lines[-1] == ('... and 26 more problem(s) of the kinds shown above, not shown: '
                         "missing shard (16 more); [Errno N] No such file or directory: '...' "
                         '(10 more)')

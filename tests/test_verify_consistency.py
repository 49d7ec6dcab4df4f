"""verify agrees with the converter and trusts nothing it can check: a dataset the converter
committed (exact copies within a split, near-duplicates across splits, a damaged JPEG skipped,
DALI indexes) passes with its findings printed; summary.json is checked against the records,
the files present and leakage.jsonl; each check runs on its own, so a shard with several
problems gets a line for each. verify's main runs in-process on tampered copies of one dataset."""
import io
import json
import os
import shutil

import pytest
from PIL import Image

from benchmarks.fuzz_verify_metadata import fuzz
from pipeline.output import records
from pipeline.testing import imagemaker
from tests.helpers import convert, shard_paths as _paths, write_tree
from pipeline.testing.datasets import (copy_of, edit_json, read_shard, rewrite_summary, run_verify,
                                       swap, write_shard)


def _photo(seed: int, quality: int = 90) -> bytes:
    return imagemaker.encode(Image.fromarray(imagemaker.photo(48 + seed % 5, 36, seed=seed)),
                             'JPEG', quality=quality)


def _inputs() -> dict:
    """Train: 12 photos and 3 exact copies under other names (two of train/c0/0.jpg, one of
    train/c1/3.jpg), a damaged JPEG; test: 3 photos and a re-encoded train/c0/4.jpg."""
    files = {f'train/c{i % 2}/{i}.jpg': _photo(i) for i in range(12)}
    files.update({'train/c0/copy_a.jpg': files['train/c0/0.jpg'],
                  'train/c1/copy_b.jpg': files['train/c0/0.jpg'],
                  'train/c1/copy_c.jpg': files['train/c1/3.jpg']})
    whole = _photo(50)
    files['train/c0/broken.jpg'] = whole[:len(whole) // 2] + bytes(len(whole) - len(whole) // 2)
    files.update({f'test/c{i % 2}/t{i}.jpg': _photo(100 + i) for i in range(3)})
    files['test/c0/near.jpg'] = imagemaker.encode(Image.open(io.BytesIO(files['train/c0/4.jpg'])),
                                                  'JPEG', quality=40)
    return files


@pytest.fixture(scope='module')
def dataset(tmp_path_factory) -> str:
    root = write_tree(tmp_path_factory.mktemp('in'), _inputs())
    out = str(tmp_path_factory.mktemp('out') / 'ds')
    convert(f'--input_dir={root}', f'--output_dir={out}', '--num_shards=2', '--dali_index',
            '--max_error_ratio=0.5')
    return out


@pytest.fixture
def copy(dataset, tmp_path) -> str:
    return copy_of(dataset, tmp_path)


def _verify(path: str) -> tuple[int, list[str], list[str]]:
    """verify's main on `path`: (exit code, lines of stdout, lines of stderr)."""
    result = run_verify(path)
    return result.returncode, result.stdout.splitlines(), result.stderr.splitlines()


def _edit_summary(out: str, edit) -> None:
    edit_json(os.path.join(out, 'summary.json'), edit)


def _source(record: bytes) -> str:
    return records.decode_example(record)[records.SOURCE][0].decode()


def shard_paths(out: str, split: str) -> list[str]:
    """The split's TFRecord shards (not their indexes)."""
    return [path for path in _paths(out, split) if not path.endswith('.idx')]


def _name(path: str) -> str:
    return os.path.basename(path)


def test_a_committed_dataset_with_copies_and_near_duplicates_passes_with_its_findings(dataset):
    code, out, err = _verify(dataset)
    assert (code, err) == (0, [])
    root = os.path.dirname(os.path.dirname(os.path.dirname(
        _source(read_shard(shard_paths(dataset, 'test')[0])[0]))))
    copies = [line for line in out if line.startswith('  e.g. ')]
    assert out[0] == ('exact copies within a split: 3 record(s) hold the image of an earlier '
                      'record of their split (train 3); a data-quality finding, not damage')
    assert len(copies) == 3 and all(' is a copy of ' in line for line in copies)
    named = {os.path.relpath(n.split(' (')[1].split(')')[0], root) for n in
             (part for line in copies for part in line.split(' is a copy of '))}
    assert named <= {'train/c0/0.jpg', 'train/c0/copy_a.jpg', 'train/c1/copy_b.jpg',
                     'train/c1/3.jpg', 'train/c1/copy_c.jpg'}
    assert out[4].startswith('leakage: 1 cluster(s) of near-duplicates span splits')
    assert out[-1] == 'OK: no problems found'


def test_the_exact_copies_the_run_noted_are_compared(copy):
    def noted(count):
        def edit(summary):
            summary['splits']['train']['exact_copies'] = count
            summary['splits']['test']['exact_copies'] = 0
        return edit
    rewrite_summary(copy, noted(3))
    assert _verify(copy)[0] == 0
    rewrite_summary(copy, noted(2))
    assert _verify(copy)[1:] == (
        _verify(copy)[1], ['summary.json: train has 2 exact_copies, the records give 3'])


@pytest.mark.slow
def test_damaged_jpegs_kept_are_a_finding(tmp_path):
    """--damaged_images=keep stores them as they are: verify names them and passes."""
    files = {f'train/c{i % 2}/{i}.jpg': _photo(i) for i in range(4)}
    files['train/c0/broken.jpg'] = _inputs()['train/c0/broken.jpg']
    root, out = write_tree(tmp_path / 'in', files), str(tmp_path / 'out')
    convert(f'--input_dir={root}', f'--output_dir={out}', '--damaged_images=keep')
    code, lines, err = _verify(out)
    assert (code, err) == (0, [])
    at = lines.index('damaged JPEGs kept (--damaged_images=keep): 1 (train 1); see '
                     'damaged-SPLIT.jsonl')
    assert lines[at + 1].startswith('  e.g. train shard 0 record ')
    assert f' ({root}/train/c0/broken.jpg): damaged JPEG (strict libjpeg-turbo): ' in lines[at + 1]


def _idx(out: str, split: str, index: int) -> str:
    return shard_paths(out, split)[index] + '.idx'


def _dali_index_false(out: str) -> list[str]:
    _edit_summary(out, lambda s: s.update(dali_index=False))
    return [f'summary.json: dali_index is False, yet 4 TFRecord shard(s) have a DALI index '
            f'(e.g. {_name(_idx(out, "test", 0))}); the run that wrote the dataset wrote none']


def _dali_index_false_and_indexes_damaged(out: str) -> list[str]:
    _dali_index_false(out)   # Its edit, and then the indexes damaged too.
    os.remove(_idx(out, 'train', 1))
    path = _idx(out, 'train', 0)
    lines = open(path).read().splitlines(keepends=True)
    offset, size = lines[0].split()
    open(path, 'w').write(''.join([f'{offset} {int(size) + 1}\n', *lines[1:]]))
    shard = _name(shard_paths(out, 'train')[0])
    return [f'summary.json: dali_index is False, yet 3 TFRecord shard(s) have a DALI index '
            f'(e.g. {_name(_idx(out, "test", 0))}); the run that wrote the dataset wrote none',
            f"train shard 0 ({shard}) index {shard}.idx: line 1 is '{offset} {int(size) + 1}', "
            f"not '{offset} {size}' (offset and size of the shard's record 0)"]


def _index_of_no_shard(out: str) -> list[str]:
    stray = os.path.join(out, 'dataset-train.tfrecord-00007-of-00009.idx')
    shutil.copy(_idx(out, 'train', 0), stray)
    return ['dataset-train.tfrecord-00007-of-00009.idx: the DALI index of no shard of this '
            'dataset; remove it']


def _run_id(out: str) -> list[str]:
    _edit_summary(out, lambda s: s.update(run_id='not-a-run-id'))
    return ["summary.json: its run id 'not-a-run-id' is not one this tool gives (16 "
            'hexadecimal digits)']


def _clusters(out: str) -> list[str]:
    _edit_summary(out, lambda s: s['leakage'].update(clusters=7))
    return ['summary.json: leakage clusters is 7, the records give 1']


def _between(out: str) -> list[str]:
    _edit_summary(out, lambda s: s['leakage'].update(between={'train/validation': 1}))
    return ["summary.json: leakage between is {'train/validation': 1}, the records give "
            "{'train/test': 1}"]


def _passed_through(out: str) -> list[str]:
    _edit_summary(out, lambda s: s['splits']['test'].update(passed_through=5))
    return ['summary.json: test has 5 passed_through, not a count of its 4 records']


def _leakage_deleted(out: str) -> list[str]:
    os.remove(os.path.join(out, 'leakage.jsonl'))
    return ['leakage.jsonl: missing (summary.json says the run checked leakage, '
            '--leakage=report); rerun the conversion with --overwrite to write it again']


def _leakage_off(out: str) -> list[str]:
    _edit_summary(out, lambda s: s.update(leakage={'action': 'off'}))
    return ['leakage.jsonl: present, yet summary.json says --leakage=off',
            'summary.json: --leakage=off, yet the records carry perceptual hashes (image/phash); '
            'a run with --leakage=off writes none']


def _dropped_copies(out: str) -> list[str]:
    def edit(summary):
        summary['splits']['test']['dropped_copies'] = 1
        summary['splits']['test']['inputs'] += 1
    _edit_summary(out, edit)
    return ['summary.json: test has 1 dropped_copies, yet --leakage=report drops none']


def _file_formats(out: str) -> list[str]:
    _edit_summary(out, lambda s: s.update(file_formats=['array_record', 'tfrecord']))
    return ["summary.json: file_formats ['array_record', 'tfrecord'], dataset_info.json "
            "declares ['tfrecord']"]


def _empty_classes(out: str) -> list[str]:
    _edit_summary(out, lambda s: s['splits']['test'].update(empty_classes=['c1']))
    return ["summary.json: test has empty_classes ['c1'], its classes without records are []"]


def _damaged_kept(out: str) -> list[str]:
    _edit_summary(out, lambda s: s.update(damaged_images='keep'))
    return ["damaged-train.jsonl: line 1 says 'skip', summary.json says --damaged_images=keep",
            'summary.json: train has 1 damaged, the records hold 0 damaged JPEGs '
            '(--damaged_images=keep keeps each)']


@pytest.mark.parametrize('tamper', [
    _dali_index_false, _dali_index_false_and_indexes_damaged, _index_of_no_shard, _run_id,
    _clusters, _between, _passed_through, _leakage_deleted, _leakage_off, _dropped_copies,
    _file_formats, _empty_classes, _damaged_kept])
def test_a_summary_that_says_otherwise_than_the_files_is_named(copy, tamper):
    expected = tamper(copy)
    code, out, err = _verify(copy)
    assert (code, err) == (1, expected)
    assert out[-1] == f'{len(expected)} problem(s)'


def test_a_shard_that_is_a_folder_is_named_and_the_rest_still_checked(copy):
    """It has no records: its problem, with what disagrees because of it summed, no
    traceback."""
    path = shard_paths(copy, 'test')[1]
    held = len(read_shard(path))
    os.remove(path)
    os.mkdir(path)
    code, _, err = _verify(copy)
    assert code == 1
    assert held and err[0] == f'{_name(path)}: missing shard' and len(err) == 2
    assert err[1].startswith(f'test shard 1 ({_name(path)}) not a regular file (a folder, pipe '
                             'or device) (and so: ')


def _content_line(index: int, path: str) -> str:
    return (f'train shard {index} ({_name(path)}): its records are not those the run wrote '
            'there, in that order (summary.json: shards swapped, records reordered or replaced?)')


def _index_line(index: int, path: str, line: int, found: str, wanted: str) -> str:
    return (f"train shard {index} ({_name(path)}) index {_name(path)}.idx: line {line} is "
            f"'{found}', not '{wanted}' (offset and size of the shard's record {line - 1})")


def _first_difference(a: str, b: str) -> tuple[int, str, str]:
    """(number, line of a's index, line of b's) of the first line where two shards' indexes
    differ (the records' sizes follow from the inputs' paths, so two shards may begin alike)."""
    lines = zip(open(a + '.idx').read().splitlines(), open(b + '.idx').read().splitlines())
    return next((n, x, y) for n, (x, y) in enumerate(lines, 1) if x != y)


def test_records_reordered_beside_an_index_are_named_twice(copy):
    """The index's line mismatch and the shard's content: two checks, two lines."""
    path = shard_paths(copy, 'train')[0]
    found = read_shard(path)
    at = next(i for i in range(len(found) - 1) if len(found[i]) != len(found[i + 1]))
    found[at:at + 2] = found[at + 1], found[at]
    index = open(path + '.idx').read().splitlines()
    write_shard(path, found)
    offset = int(index[at].split()[0])
    code, _, err = _verify(copy)
    assert (code, err) == (1, [
        _index_line(0, path, at + 1, index[at], f'{offset} {len(found[at]) + 16}'),
        _content_line(0, path)])


def test_an_edited_record_beside_an_index_is_named_for_each_problem(copy):
    """A record's label edited (and framed again): its label, and the shard's content."""
    path = shard_paths(copy, 'train')[1]
    found = read_shard(path)
    example = {k: v[0] for k, v in records.decode_example(found[0]).items()}
    example[records.LABEL] = 1 - example[records.LABEL]
    found[0] = records.encode_example(example)
    write_shard(path, found)
    text = example[records.TEXT].decode()
    other = f'c{example[records.LABEL]}'
    code, _, err = _verify(copy)
    assert (code, err) == (1, [
        f"train shard 1 ({_name(path)}) record 0: label {example[records.LABEL]} is {other!r} "
        f"in the label names but the record says {text!r}", _content_line(1, path)])


def test_two_shards_swapped_beside_their_indexes_are_named_for_each_problem(copy):
    first, second = shard_paths(copy, 'train')
    sizes = [os.path.getsize(first), os.path.getsize(second)]
    lengths = [len(read_shard(first)), len(read_shard(second))]
    assert lengths[0] != lengths[1]
    line, of_first, of_second = _first_difference(first, second)
    swap(first, second)
    code, _, err = _verify(copy)
    assert code == 1
    assert err == [
        _index_line(0, first, line, of_first, of_second),
        f'train shard 0 ({_name(first)}): {lengths[1]} records, dataset_info.json says '
        f'{lengths[0]}',
        _index_line(1, second, line, of_second, of_first),
        f'train shard 1 ({_name(second)}): {lengths[0]} records, dataset_info.json says '
        f'{lengths[1]}',
        f'train shard 0 ({_name(first)}): {sizes[1]} bytes, summary.json says {sizes[0]} '
        '(shards swapped or replaced?)',
        f'train shard 1 ({_name(second)}): {sizes[0]} bytes, summary.json says {sizes[1]} '
        '(shards swapped or replaced?)']


def _edit_leakage(out: str, edit) -> dict:
    path = os.path.join(out, 'leakage.jsonl')
    [line] = [json.loads(text) for text in open(path)]
    edit(line)
    with open(path, 'w') as stream:
        stream.write(json.dumps(line) + '\n')
    return line


def test_an_edited_leakage_entry_names_its_cluster_and_the_member_that_differs(copy):
    original = {}
    def rename(line):
        original.update(line['members'])
        line['members']['test'] = ['/elsewhere/near.jpg']
        line['closest']['distance'] += 3
    line = _edit_leakage(copy, rename)
    [train] = original['train']
    [place] = [f'test shard {shard} record {number}'
               for shard, path in enumerate(shard_paths(copy, 'test'))
               for number, record in enumerate(read_shard(path))
               if _source(record) == original['test'][0]]
    code, _, err = _verify(copy)
    assert (code, err) == (1, [
        f'leakage.jsonl: line 1, the cluster of {train} (train): lists /elsewhere/near.jpg '
        f'(test), which no record is; leaves out {place}, which the records put in it; its '
        f'closest pair names {original["test"][0]} (test), not one of its members; its closest '
        f'pair is {line["closest"]["distance"]} bits apart, the records give '
        f'{line["closest"]["distance"] - 3}'])


def test_a_leakage_entry_whose_closest_pair_is_edited_names_what_the_records_say(copy):
    def edit(line):
        line['closest']['distance'] += 5
        line['closest']['exact'] = True
    line = _edit_leakage(copy, edit)
    pair = [f'{line["closest"][f"source_{end}"]} ({line["closest"][f"split_{end}"]})'
            for end in 'ab']
    code, _, err = _verify(copy)
    assert (code, err) == (1, [
        f'leakage.jsonl: line 1, the cluster of {pair[0]}: its closest pair is '
        f'{line["closest"]["distance"]} bits apart, the records\' hashes of {pair[0]} and '
        f'{pair[1]} are {line["closest"]["distance"] - 5} apart; its closest pair is marked '
        "exact, the records' images are not identical"])


def test_a_leakage_entry_deleted_names_the_cluster_it_leaves_out(copy):
    open(os.path.join(copy, 'leakage.jsonl'), 'w').close()
    code, _, err = _verify(copy)
    assert code == 1
    assert err[0].startswith('leakage.jsonl: does not list the cluster of train shard ')
    assert err[0].endswith(' (2 images) that the records give')


def test_verify_on_mutated_summary_and_leakage_files_ends_as_promised(dataset):
    """A few seconds of the fuzzer `python -m benchmarks.fuzz_verify_metadata` runs for
    minutes: exit 0 or 1, each stderr line naming a file, bounded, within bounded memory."""
    assert fuzz(dataset, seconds=3, seed=7) >= 10

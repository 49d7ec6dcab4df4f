"""What a run reads back from its temporary folder is data, checked before it is used: a file
changed there while the run is on is never executed (a listed input's ref is decoded, not
unpickled: pipeline/inputs/ref_codec.py) nor used (a sorted run's blocks are checked against
the digests its description holds: pipeline/io/sorted_runs.py), and work an earlier attempt
left is reused only when its bytes match the digest its sidecar holds (transforms/resume.py);
else it is done again, with a line saying so, and the dataset is the one an uninterrupted run
writes."""
import dataclasses
import glob
import json
import os
import pickle
import shutil
import signal
import struct

import pytest

from pipeline.inputs import ref_codec
from pipeline.testing import imagemaker
from tests.helpers import IN_PROCESS, cli, killed_at, output_files, stopped_at
from transforms.copies import COPY

FLAGS = ['--num_shards=4', '--leakage=off', *IN_PROCESS]


class _Plant:
    """What unpickled creates a file: a stand-in for any code a pickle can run."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return open, (self.marker, 'w')


def _plant_pickles(folder: str, marker: str) -> int:
    """Replaces the first payload of every listed run under `folder` with a pickle of the same
    length that would create `marker`; returns how many it replaced."""
    planted = 0
    for path in glob.glob(f'{folder}/.tmp-*/listed/*.run'):
        with open(path, 'r+b') as run:
            _, length = struct.unpack('>QI', run.read(12))
            bomb = pickle.dumps(_Plant(marker), pickle.HIGHEST_PROTOCOL)
            assert len(bomb) <= length
            run.write(bomb.ljust(length, b'\0'))
            planted += 1
    return planted


@pytest.mark.slow
def test_a_pickle_planted_in_a_listed_run_is_never_run(tmp_path, image_folders):
    out, marker = str(tmp_path / 'out'), str(tmp_path / 'ran')
    planted = []
    answer = stopped_at('listed:1', lambda: planted.append(_plant_pickles(out, marker)),
                        f'--input_dir={image_folders(60)}', f'--output_dir={out}', *FLAGS)
    assert planted[0] >= 1
    assert not os.path.exists(marker)
    assert answer.returncode == 2, answer.stderr
    assert 'Traceback' not in answer.stderr
    lines = [line for line in answer.stderr.splitlines() if 'was changed under it' in line]
    assert len(lines) == 1 and '/listed/' in lines[0] and lines[0].startswith('error: ')


@pytest.fixture(scope='module')
def inputs(image_folders):
    return image_folders(600)   # 5 chunks of about 128 in 4 shards.


@pytest.fixture(scope='module')
def reference(inputs, tmp_path_factory) -> dict:
    out = str(tmp_path_factory.mktemp('reference'))
    answer = cli(f'--input_dir={inputs}', f'--output_dir={out}', *FLAGS)
    assert answer.returncode == 0, answer.stderr
    return output_files(out)


def _flip_a_bit(path: str) -> None:
    """Flips one bit of an image's bytes (the size is unchanged)."""
    with open(path, 'r+b') as stream:
        stream.seek(os.path.getsize(path) // 2)
        byte = stream.read(1)[0]
        stream.seek(-1, os.SEEK_CUR)
        stream.write(bytes([byte ^ 0x10]))


@pytest.mark.slow
@pytest.mark.parametrize('piece,line', [
    ('parts', 'redoing chunk '), ('shards', 'differs from its record (digest)')])
def test_a_finished_piece_with_a_flipped_bit_is_made_again(tmp_path, inputs, reference, piece,
                                                          line):
    flags = [f'--input_dir={inputs}', f'--output_dir={tmp_path / "out"}', *FLAGS]
    assert killed_at('shard:2', *flags).returncode == -signal.SIGKILL
    finished = sorted(path.removesuffix('.json') for path in
                      glob.glob(f'{tmp_path}/out/.tmp-*/{piece}/*.tfrecord.json'))
    finished = [path for path in finished if os.path.exists(path)]
    assert finished
    _flip_a_bit(finished[0])
    rerun = cli(*flags)
    assert rerun.returncode == 0, rerun.stderr
    said = [text for text in rerun.stderr.splitlines() if line in text]
    assert len(said) >= 1 and finished[0] in said[0], rerun.stderr
    assert output_files(str(tmp_path / 'out')) == reference


@pytest.mark.slow
def test_a_parquet_image_blob_with_a_flipped_bit_is_read_again(tmp_path):
    from tests.test_parquet_input import _rows, _write
    _write(tmp_path / 'in/data/train-00000-of-00001.parquet', _rows('train', 160))  # 3 spans.
    flags = [f'--input_dir={tmp_path}/in', '--num_shards=2', '--leakage=off', *IN_PROCESS]
    out = str(tmp_path / 'out')
    assert killed_at('group:2', *flags, f'--output_dir={out}').returncode == -signal.SIGKILL
    blob = sorted(glob.glob(f'{out}/.tmp-*/groups/*.images'))[0]
    _flip_a_bit(blob)
    rerun = cli(*flags, f'--output_dir={out}')
    assert rerun.returncode == 0, rerun.stderr
    said = [text for text in rerun.stderr.splitlines() if blob in text]
    assert len(said) == 1 and 'differs from its record (digest)' in said[0], rerun.stderr
    reference = str(tmp_path / 'reference')
    assert cli(*flags, f'--output_dir={reference}').returncode == 0
    assert output_files(out) == output_files(reference)


@pytest.mark.slow
def test_a_sidecar_without_digests_an_older_layout_is_not_reused(tmp_path, inputs, reference):
    flags = [f'--input_dir={inputs}', f'--output_dir={tmp_path / "out"}', *FLAGS]
    assert killed_at('chunk:3', *flags).returncode == -signal.SIGKILL
    sidecars = glob.glob(f'{tmp_path}/out/.tmp-*/parts/*.tfrecord.json')
    assert sidecars
    for path in sidecars:
        with open(path) as stream:
            fields = json.load(stream)
        fields.pop('digests', None)
        with open(path, 'w') as stream:
            json.dump(fields, stream)
    rerun = cli(*flags)
    assert rerun.returncode == 0, rerun.stderr
    assert 'chunks converted by an earlier attempt' not in rerun.stdout, rerun.stdout
    assert output_files(str(tmp_path / 'out')) == reference


def _cut_listed_runs(folder: str) -> None:
    for path in glob.glob(f'{folder}/.tmp-*/listed/*.run'):
        os.truncate(path, os.path.getsize(path) // 2)


@pytest.mark.slow
def test_a_listed_run_cut_short_under_the_run_ends_it_in_one_line(tmp_path, image_folders):
    out = str(tmp_path / 'out')
    answer = stopped_at('listed:1', lambda: _cut_listed_runs(out),
                        f'--input_dir={image_folders(60)}', f'--output_dir={out}', *FLAGS)
    assert answer.returncode == 2, answer.stderr
    assert 'Traceback' not in answer.stderr
    lines = [line for line in answer.stderr.splitlines() if 'was changed under it' in line]
    assert len(lines) == 1 and '/listed/' in lines[0], answer.stderr
    assert 'it is shorter than it was written' in lines[0]


def _rewrite_first_ref(folder: str, source: str, keep_size: bool) -> list[str]:
    """Rewrites every listed run under `folder` with its first ref's source made `source` (a
    valid ref under the same key; its filename padded or cut so that the run keeps its size
    when `keep_size`); returns the runs rewritten."""
    rewritten = []
    for path in glob.glob(f'{folder}/.tmp-*/listed/*.run'):
        with open(path, 'rb') as run:
            data = run.read()
        key, length = struct.unpack_from('>QI', data)
        ref = ref_codec.decode(data[12:12 + length])
        payload = ref_codec.encode(dataclasses.replace(ref, source=source))
        if keep_size:
            cut = length - len(payload)
            filename = ref.filename + 'x' * cut if cut >= 0 else ref.filename[:cut]
            payload = ref_codec.encode(dataclasses.replace(ref, source=source, filename=filename))
            assert len(payload) == length
        with open(path, 'wb') as run:
            run.write(struct.pack('>QI', key, len(payload)) + payload + data[12 + length:])
        rewritten.append(path)
    return rewritten


def _ended_in_one_line(answer, out: str, rewritten: list[str]) -> None:
    """The run ended in one error line naming a file rewritten under it, and committed nothing."""
    assert rewritten
    assert answer.returncode == 2, answer.stderr
    assert 'Traceback' not in answer.stderr
    lines = [line for line in answer.stderr.splitlines() if 'was changed under it' in line]
    assert len(lines) == 1 and lines[0].startswith('error: '), answer.stderr
    assert any(path in lines[0] for path in rewritten), answer.stderr
    assert not glob.glob(f'{out}/*.tfrecord*'), 'no dataset is committed'


@pytest.mark.slow
@pytest.mark.parametrize('keep_size', [True, False])
def test_a_listed_run_rewritten_with_a_valid_ref_to_an_outside_image_ends_the_run(
        tmp_path, tmp_path_factory, image_folders, keep_size):
    out, outside = str(tmp_path / 'out'), str(tmp_path_factory.mktemp('o') / 'private.jpg')
    with open(outside, 'wb') as image:
        image.write(imagemaker.jpeg(24, 16, seed=10_000))
    rewritten = []
    answer = stopped_at('listed:1',
                        lambda: rewritten.extend(_rewrite_first_ref(out, outside, keep_size)),
                        f'--input_dir={image_folders(60)}', f'--output_dir={out}', *FLAGS)
    _ended_in_one_line(answer, out, rewritten)
    for path in glob.glob(f'{out}/**/*.tfrecord*', recursive=True):
        with open(path, 'rb') as written:
            assert outside.encode() not in written.read(), path


def _copy_a_digest(folder: str) -> list[str]:
    """Gives the second record of every filed run the first's digest (valid rows: a copy that
    is none); returns the runs rewritten."""
    rewritten = []
    for path in glob.glob(f'{folder}/.tmp-*/filed/*.run'):
        with open(path, 'r+b') as run:
            first = run.read(12 + COPY.itemsize)
            run.seek(12 + COPY.itemsize + 12)
            run.write(first[12:12 + 8])   # Its 'sha' (copies.COPY), the same bytes.
        rewritten.append(path)
    return rewritten


@pytest.mark.slow
def test_a_filed_run_rewritten_with_valid_rows_ends_the_run(tmp_path, image_folders):
    out = str(tmp_path / 'out')
    rewritten = []
    answer = stopped_at('filed:1', lambda: rewritten.extend(_copy_a_digest(out)),
                        f'--input_dir={image_folders(60)}', f'--output_dir={out}', *FLAGS)
    _ended_in_one_line(answer, out, rewritten)


def _copy_piece(first: str, second: str, swap: bool) -> None:
    """Gives the piece `second` (a part or shard) the files and the sidecar's fields (all but
    which piece it is) of `first`, and with `swap` `first` those of `second`: what anyone who can
    write the folder can do between two attempts."""
    sides = [json.load(open(f'{path}.json')) for path in (first, second)]
    for name in set(sides[0]) - {'split', 'shard', 'chunk', 'temp_path'}:
        sides[1][name], sides[0][name] = sides[0][name], sides[1][name] if swap else sides[0][name]
    for path, fields in zip((first, second), sides):
        with open(f'{path}.json', 'w') as stream:
            json.dump(fields, stream)
    for suffix in ('', '.errors.jsonl', '.damaged.jsonl'):
        if swap:
            os.rename(first + suffix, f'{first}.swap')
            os.rename(second + suffix, first + suffix)
            os.rename(f'{first}.swap', second + suffix)
        else:
            shutil.copy(first + suffix, second + suffix)


@pytest.mark.slow
@pytest.mark.parametrize('swap', [False, True])
@pytest.mark.parametrize('piece', ['parts', 'shards'])
def test_a_piece_and_its_sidecar_copied_over_another_are_made_again(
        tmp_path, inputs, reference, piece, swap):
    flags = [f'--input_dir={inputs}', f'--output_dir={tmp_path / "out"}', *FLAGS]
    assert killed_at('shard:2', *flags).returncode == -signal.SIGKILL
    finished = sorted(path.removesuffix('.json') for path in
                      glob.glob(f'{tmp_path}/out/.tmp-*/{piece}/train-*.tfrecord.json'))
    finished = [path for path in finished if os.path.exists(path)]
    assert len(finished) >= 2
    _copy_piece(finished[0], finished[1], swap)
    rerun = cli(*flags)
    assert rerun.returncode == 0, rerun.stderr
    assert output_files(str(tmp_path / 'out')) == reference
    said = [line for line in rerun.stderr.splitlines() if 'not sealed for this piece' in line]
    assert any(finished[1] in line for line in said), rerun.stderr


@pytest.mark.slow
def test_work_written_under_another_key_is_not_reused(tmp_path, monkeypatch, inputs, reference):
    flags = [f'--input_dir={inputs}', f'--output_dir={tmp_path / "out"}', *FLAGS]
    assert killed_at('shard:2', *flags).returncode == -signal.SIGKILL
    monkeypatch.setenv('XDG_CONFIG_HOME', str(tmp_path / 'another-home'))
    rerun = cli(*flags)
    assert rerun.returncode == 0, rerun.stderr
    said = [line for line in rerun.stderr.splitlines() if 'written under another key' in line]
    assert len(said) == 1 and 'not sealed' not in rerun.stderr, rerun.stderr
    assert 'chunks converted by an earlier attempt' not in rerun.stdout, rerun.stdout
    assert output_files(str(tmp_path / 'out')) == reference


def _pickle_every_file(folder: str) -> None:
    for path in glob.glob(f'{folder}/.tmp-*/**', recursive=True):
        if os.path.isfile(path) and not path.endswith('.image-tfrecords-run.json'):
            with open(path, 'wb') as stream:
                stream.write(pickle.dumps(_Plant(f'{folder}.ran')))


@pytest.mark.slow
@pytest.mark.parametrize('point', ['chunk:1', 'shard:1'])
def test_a_sidecar_changed_under_the_run_ends_it_in_one_line(tmp_path, image_folders, point):
    out = str(tmp_path / 'out')
    answer = stopped_at(point, lambda: _pickle_every_file(out),
                        f'--input_dir={image_folders(60)}', f'--output_dir={out}', *FLAGS)
    assert answer.returncode == 2, answer.stderr
    assert not os.path.exists(f'{out}.ran')
    assert 'Traceback' not in answer.stderr and 'RuntimeError' not in answer.stderr
    lines = [line for line in answer.stderr.splitlines() if 'is gone or changed' in line]
    assert len(lines) == 1 and lines[0].startswith(f'error: {out}/.tmp-'), answer.stderr
    assert '/parts/train-' in lines[0] and '.tfrecord.json, which this run wrote' in lines[0]


@pytest.mark.slow
def test_a_key_file_open_to_others_is_refused_and_nothing_is_reused(tmp_path, monkeypatch,
                                                                     inputs, reference):
    monkeypatch.setenv('XDG_CONFIG_HOME', str(tmp_path / 'home'))
    flags = [f'--input_dir={inputs}', f'--output_dir={tmp_path / "out"}', *FLAGS]
    assert killed_at('shard:2', *flags).returncode == -signal.SIGKILL
    key = tmp_path / 'home/image-tfrecords/resume.key'
    assert (os.stat(key).st_mode & 0o777, os.stat(key.parent).st_mode & 0o777) == (0o600, 0o700)
    os.chmod(key, 0o644)
    rerun = cli(*flags)
    assert rerun.returncode == 0, rerun.stderr
    said = [line for line in rerun.stderr.splitlines() if str(key) in line]
    assert len(said) == 1 and 'is open to other users' in said[0], rerun.stderr
    assert 'not sealed' not in rerun.stderr, rerun.stderr
    assert 'chunks converted by an earlier attempt' not in rerun.stdout, rerun.stdout
    assert output_files(str(tmp_path / 'out')) == reference

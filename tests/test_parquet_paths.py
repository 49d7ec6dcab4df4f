"""Parquet rows whose images are stored by their paths (pipeline/inputs/parquet_row_groups.py):
an `Image` column made from paths (`{bytes: None, path}`) and a column of path strings named with
--image_column, as a user writes them with `datasets` from the folder their images are in; and a
resumed run after such files are written again."""
import contextlib
import glob
import json
import os
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import launch, sources
from pipeline.output import records
from pipeline.testing import imagemaker
from tests.helpers import cli, plain_split

# What is tested is where an image is read from: no check for copies across splits.
NO_LEAKAGE_CHECK = '--leakage=off'
IMAGES = {f'flowers/{name}/{name}{i}.jpg': imagemaker.jpeg(24, 16, seed=10 * n + i)
          for n, name in enumerate(['daisy', 'rose']) for i in range(3)}


def _start_folder(tmp_path) -> str:
    """`data/` with the images under flowers/, as the user's folder they start the command in."""
    for relative, data in IMAGES.items():
        os.makedirs(tmp_path / 'data' / os.path.dirname(relative), exist_ok=True)
        (tmp_path / 'data' / relative).write_bytes(data)
    return str(tmp_path / 'data')


def _to_parquet(start: str, path: str, paths: list, labels: list, cast=True) -> None:
    """A parquet file `path` as `datasets` writes it from a dict of paths relative to `start`
    (an Image column when `cast`, else a column of text), written from `start`, as datasets
    wants: it measures the files there. A path to no file there names one that is gone."""
    import datasets
    gone = [p for p in paths if p and not os.path.exists(os.path.join(start, p))]
    with contextlib.chdir(start):
        for made in gone:
            open(made, 'wb').close()
        table = datasets.Dataset.from_dict({'image': paths, 'label': labels})
        if cast:
            table = table.cast_column('image', datasets.Image())
        os.makedirs(os.path.dirname(path), exist_ok=True)
        table.to_parquet(path)
        for made in gone:
            os.remove(made)


def _errors(out: str, split='train') -> list[tuple[str, str]]:
    found = glob.glob(f'{out}/errors-{split}.jsonl') or glob.glob(f'{out}/.tmp-*/errors-{split}.jsonl')
    with open(found[0]) as stream:
        return [(e['source'], e['reason']) for e in map(json.loads, stream)]


def _stored(out: str, split='train') -> dict[str, bytes]:
    return {r[records.FILENAME]: r[records.ENCODED] for r in plain_split(out, split)}


@pytest.mark.slow
def test_relative_paths_are_read_beside_the_parquet_file_else_from_the_start_folder(tmp_path):
    start = _start_folder(tmp_path)
    beside = imagemaker.jpeg(24, 16, seed=99)   # Another rose0.jpg, beside the parquet file.
    os.makedirs(f'{start}/pq/flowers/rose')
    with open(f'{start}/pq/flowers/rose/rose0.jpg', 'wb') as stream:
        stream.write(beside)
    paths = sorted(IMAGES) + ['flowers/rose/gone.jpg']
    _to_parquet(start, 'pq/train.parquet', paths, [p.split('/')[1] for p in paths])
    result = cli('--input_dir=pq', '--output_dir=out', '--label_column=label',
                 '--max_error_ratio=0.2', NO_LEAKAGE_CHECK, cwd=start)
    assert result.returncode == 0, result.stderr
    # The parquet file's folder is looked in first: its rose0.jpg is the one read.
    assert _stored(f'{start}/out') == {os.path.basename(p): IMAGES[p] for p in IMAGES} | {
        'rose0.jpg': beside}
    assert _errors(f'{start}/out') == [(
        'pq/train.parquet:row 6',
        "no image: column image holds no bytes, and its relative path names no file in the parquet "
        "file's folder (pq/flowers/rose/gone.jpg) or in the folder the command was started in "
        f'({start}/flowers/rose/gone.jpg); run the command from the folder the paths are '
        'relative to, put the images beside the parquet file, or write the file with the images '
        'in it (datasets embeds them in push_to_hub)')]


@pytest.mark.slow
def test_a_column_of_path_strings_is_read_as_paths_once_named(tmp_path):
    start = _start_folder(tmp_path)
    paths = sorted(IMAGES) + ['flowers/daisy/gone.jpg', None]
    _to_parquet(start, 'pq/train.parquet', paths, [f'c{i % 2}' for i in range(len(paths))],
                cast=False)
    written = pq.read_table(f'{start}/pq/train.parquet')
    faulty = pa.Array.from_buffers(   # Not UTF-8, and too long: pyarrow writes either unchecked.
        pa.string(), 2, [None, pa.py_buffer(np.array([0, 2, 5002], np.int32).tobytes()),
                         pa.py_buffer(b'\xff\xfe' + b'a' * 5000)])
    pq.write_table(pa.concat_tables([written, pa.table(
        {'image': faulty, 'label': ['c0', 'c1']}, schema=written.schema)]),
        f'{start}/pq/train.parquet')
    flags = ['--input_dir=pq', '--output_dir=out', '--label_column=label', NO_LEAKAGE_CHECK]
    refused = cli(*flags, cwd=start)
    assert refused.returncode == 2 and refused.stderr.splitlines()[-1] == (
        'error: pq/train.parquet: no column is an Image feature (columns: image, label); '
        'choose one with --image_column')
    result = cli(*flags, '--image_column=image', '--max_error_ratio=0.5', cwd=start)
    assert result.returncode == 0, result.stderr
    assert sorted(_stored(f'{start}/out').values()) == sorted(IMAGES.values())
    assert sorted(_errors(f'{start}/out')) == [
        ('pq/train.parquet:row 6',
         "no image: the relative path in column image names no file in the parquet file's folder "
         '(pq/flowers/daisy/gone.jpg) or in the folder the command was started in '
         f'({start}/flowers/daisy/gone.jpg); run the command from the folder the paths are '
         'relative to, put the images beside the parquet file, or write the file with the images '
         'in it (datasets embeds them in push_to_hub)'),
        ('pq/train.parquet:row 7', 'no image (column image holds no path)'),
        ('pq/train.parquet:row 8', 'no image: the path in column image is not valid UTF-8; '
         'write it again, or write the file with the images in it (datasets embeds them in '
         'push_to_hub)'),
        ('pq/train.parquet:row 9', 'no image: the path in column image is 5,000 bytes long (a '
         'path may be 4,096 at most); write it again, or write the file with the images in it '
         '(datasets embeds them in push_to_hub)')]


def test_a_column_of_neither_images_nor_paths_is_refused_in_one_line(tmp_path):
    import datasets
    os.makedirs(tmp_path / 'pq')
    datasets.Dataset.from_dict({'image': [1, 2], 'label': ['a', 'b']}).to_parquet(
        str(tmp_path / 'pq/train.parquet'))
    result = cli(f'--input_dir={tmp_path}/pq', f'--output_dir={tmp_path}/out', '--plan_only',
                 '--image_column=image', '--label_column=label')
    assert result.returncode == 2 and result.stderr.splitlines()[-1] == (
        f'error: {tmp_path}/pq/train.parquet: column image holds int64, not images (binary, a '
        '{bytes, path} struct, or text: their paths); name the image column with --image_column')


def _rows(source) -> list:
    """The listed refs of every span of a source's files, each span pickled and read back as a
    worker gets it."""
    refs = []
    for partition in source.partitions:
        for span in partition.split_further():
            refs += list(pickle.loads(pickle.dumps(span)).examples())
    return refs


def test_workers_get_the_start_folder_as_data_and_dataflow_workers_none(tmp_path, monkeypatch):
    """What a forked or remote worker reads does not depend on its own current folder; on
    Dataflow a path relative to the launcher's folder is not read, and the reason says so."""
    start = _start_folder(tmp_path)
    paths = sorted(IMAGES)[:2]
    _to_parquet(start, 'pq/train.parquet', paths, ['a', 'b'])
    monkeypatch.chdir(start)
    local = _rows(sources.resolve_source(launch.resolve(
        [f'--input_dir={start}/pq', '--output_dir=out', '--label_column=label']).converter))
    # Resolved as a dry run resolves it: a job submitted must have its input on gs://.
    remote = _rows(sources.resolve_source(launch.resolve(
        [f'--input_dir={start}/pq', '--output_dir=gs://bucket/out', '--label_column=label',
         '--runner=DataflowRunner', '--project=p', '--region=us-central1',
         '--temp_location=gs://bucket/tmp', '--dry_run=true']).converter))
    monkeypatch.chdir(tmp_path)   # A worker whose own current folder is another.
    assert [ref.data for ref in local[0].group.read(local)] == [IMAGES[p] for p in paths]
    found = list(remote[0].group.read(remote))
    assert [ref.problem for ref in found] == [
        "no image: column image holds no bytes, and its relative path names no file in the "
        f"parquet file's folder ({start}/pq/{path}); a path relative to the folder the command "
        'was started in is not read on DataflowRunner, whose workers cannot see that folder: '
        'write the paths absolute (gs://), or write the file with the images in it (datasets '
        'embeds them in push_to_hub)' for path in paths]


@pytest.mark.slow
def test_a_rewritten_file_is_converted_again_and_an_unchanged_one_reused(tmp_path):
    """A run whose train rows all failed (their paths relative to another folder) left its
    chunks; the train file written again with absolute paths is converted again, the
    validation file, unchanged, is reused, and the progress counts only that as reused."""
    start = _start_folder(tmp_path)
    train, validation = sorted(IMAGES)[:4], sorted(IMAGES)[4:]
    _to_parquet(start, 'pq/train.parquet', train, [p.split('/')[1] for p in train])
    _to_parquet(start, 'pq/validation.parquet', [f'{start}/{p}' for p in validation],
                [p.split('/')[1] for p in validation])
    flags = [f'--input_dir={start}/pq', '--output_dir=out', '--label_column=label',
             NO_LEAKAGE_CHECK]
    os.makedirs(tmp_path / 'elsewhere')
    failed = cli(*flags, cwd=tmp_path / 'elsewhere')
    assert failed.returncode == 2 and 'nothing was committed' in failed.stderr
    out = f'{tmp_path}/elsewhere/out'
    [temp] = glob.glob(f'{out}/.tmp-*')
    _to_parquet(start, 'pq/train.parquet', [f'{start}/{p}' for p in train],
                [p.split('/')[1] for p in train])
    result = cli(*flags, cwd=tmp_path / 'elsewhere')
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[:2] == [
        f'resuming run {os.path.basename(temp)[5:]}: an earlier attempt finished 2 chunks and 2 '
        'shards; each is reused if its inputs are unchanged, else converted again',
        'reusing 1 of the 2 chunks an earlier attempt finished: the inputs of the other changed '
        'since (or --max_input_mb did), so it is converted again']
    done = [line for line in lines if line.startswith('converting: ')]
    assert done[-1].startswith('converting: 4 of 4 inputs (100%) (2 reused from an earlier '
                               'attempt)'), lines
    assert any(line.startswith('train shard 1/1 written: 4 images') for line in lines)
    assert any(line.startswith('validation shard 1/1 reused from an earlier attempt: 2 images')
               for line in lines)
    assert sorted(_stored(out).values()) == sorted(IMAGES[p] for p in train)
    assert sorted(_stored(out, 'validation').values()) == sorted(IMAGES[p] for p in validation)

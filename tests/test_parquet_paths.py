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


def _under(root: str, given=False) -> str:
    return f'--image_root={os.path.realpath(root)}' + (
        '' if given else ' (by default the folder the command was started in)')


@pytest.mark.slow
def test_relative_paths_are_read_under_the_start_folder_not_beside_the_parquet_file(tmp_path):
    start = _start_folder(tmp_path)
    parquet = f'{os.path.realpath(start)}/pq/train.parquet'   # Reported by its real path.
    beside = imagemaker.jpeg(24, 16, seed=99)   # Another rose0.jpg, beside the parquet file.
    os.makedirs(f'{start}/pq/flowers/rose')
    with open(f'{start}/pq/flowers/rose/rose0.jpg', 'wb') as stream:
        stream.write(beside)
    paths = sorted(IMAGES) + ['flowers/rose/gone.jpg']
    _to_parquet(start, 'pq/train.parquet', paths, [p.split('/')[1] for p in paths])
    result = cli('--input_dir=pq', '--output_dir=out', '--label_column=label',
                 '--max_error_ratio=0.2', NO_LEAKAGE_CHECK, cwd=start)
    assert result.returncode == 0, result.stderr
    # One root: the start folder's rose0.jpg is read, not the one beside the parquet file.
    assert _stored(f'{start}/out') == {os.path.basename(p): IMAGES[p] for p in IMAGES}
    assert _errors(f'{start}/out') == [(
        f'{parquet}:row 6',
        f'no image: column image holds no bytes, and its relative path names no file under '
        f'{_under(start)} ({os.path.realpath(start)}/flowers/rose/gone.jpg); pass '
        '--image_root=FOLDER the paths are relative to, or write the file with the images in '
        'it (datasets embeds them in push_to_hub)')]


@pytest.mark.slow
def test_a_path_leading_outside_the_image_root_is_reported_and_not_read(tmp_path):
    """Images elsewhere on the disk, named by an absolute path, a `..` climb or a link inside
    the folder, stay out of the dataset unless --image_root holds them (a relative path is read
    from the root and must stay in it); paths written absolute by datasets from the folder the
    command is run in need no flag."""
    start = _start_folder(tmp_path)
    parquet = f'{os.path.realpath(start)}/pq/train.parquet'   # Reported by its real path.
    private = {f'{tmp_path}/private/{i}.jpg': imagemaker.jpeg(24, 16, seed=50 + i) for i in range(4)}
    os.makedirs(tmp_path / 'private')
    for path, data in private.items():
        open(path, 'wb').write(data)
    os.symlink(f'{tmp_path}/private/2.jpg', f'{start}/flowers/daisy/link.jpg')
    crafted = [f'{tmp_path}/private/0.jpg', f'{start}/flowers/../../private/1.jpg',
               f'{start}/flowers/daisy/link.jpg', '../private/3.jpg']
    paths = [f'{start}/{p}' for p in sorted(IMAGES)] + crafted
    _to_parquet(start, 'pq/train.parquet', paths, [p.split('/')[-2] for p in paths])
    flags = ['--input_dir=pq', '--label_column=label', NO_LEAKAGE_CHECK]
    result = cli(*flags, '--output_dir=out', '--max_error_ratio=0.5', cwd=start)
    assert result.returncode == 0, result.stderr
    assert _stored(f'{start}/out') == {os.path.basename(p): IMAGES[p] for p in IMAGES}
    private_dir = os.path.realpath(tmp_path / 'private')
    leads = ['lies', *(f'leads to {private_dir}/{i}.jpg,' for i in (1, 2, 3))]
    assert sorted(_errors(f'{start}/out')) == [
        (f'{parquet}:row {6 + i}', f'no image: column image holds no bytes, and its path '
         f'{path} {led} outside {_under(start)}; pass --image_root=FOLDER holding it, or write '
         'the file with the images in it (datasets embeds them in push_to_hub)')
        for i, (path, led) in enumerate(zip(crafted, leads))]
    # Refused, then given a root that holds them: converted again, not reused (the root is
    # part of what names the run); the relative climb is read from the root, and still leads
    # out of it.
    refused = cli(*flags, '--output_dir=out2', '--max_error_ratio=0.2', cwd=start)
    assert refused.returncode == 2 and 'nothing was committed' in refused.stderr
    admitted = cli(*flags, '--output_dir=out2', '--max_error_ratio=0.2',
                   f'--image_root={tmp_path}', cwd=start)
    assert admitted.returncode == 0, admitted.stderr
    assert sorted(_stored(f'{start}/out2').values()) == sorted(
        [*IMAGES.values(), *list(private.values())[:3]])
    assert _errors(f'{start}/out2') == [(
        f'{parquet}:row 9', 'no image: column image holds no bytes, and its path '
        f'../private/3.jpg leads to {os.path.dirname(os.path.realpath(tmp_path))}/private/3.jpg, '
        f'outside {_under(tmp_path, given=True)}; pass --image_root=FOLDER holding it, or write '
        'the file with the images in it (datasets embeds them in push_to_hub)')]


@pytest.mark.slow
def test_a_column_of_path_strings_is_read_as_paths_once_named(tmp_path):
    start = _start_folder(tmp_path)
    parquet = f'{os.path.realpath(start)}/pq/train.parquet'   # Reported by its real path.
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
        f'error: {parquet}: no column is an Image feature (columns: image, label); '
        'choose one with --image_column')
    result = cli(*flags, '--image_column=image', '--max_error_ratio=0.5', cwd=start)
    assert result.returncode == 0, result.stderr
    assert sorted(_stored(f'{start}/out').values()) == sorted(IMAGES.values())
    assert sorted(_errors(f'{start}/out')) == [
        (f'{parquet}:row 6',
         'no image: the relative path in column image names no file under '
         f'{_under(start)} ({os.path.realpath(start)}/flowers/daisy/gone.jpg); pass '
         '--image_root=FOLDER the paths are relative to, or write the file with the images in '
         'it (datasets embeds them in push_to_hub)'),
        (f'{parquet}:row 7', 'no image (column image holds no path)'),
        (f'{parquet}:row 8', 'no image: the path in column image is not valid UTF-8; '
         'write it again, or write the file with the images in it (datasets embeds them in '
         'push_to_hub)'),
        (f'{parquet}:row 9', 'no image: the path in column image is 5,000 bytes long (a '
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


def test_an_image_root_that_is_no_folder_is_refused_in_one_line(tmp_path):
    start = _start_folder(tmp_path)
    _to_parquet(start, 'pq/train.parquet', sorted(IMAGES)[:2], ['a', 'b'])
    flags = [f'--input_dir={start}/pq', f'--output_dir={tmp_path}/out', '--plan_only',
             '--label_column=label']
    for root, line in ((f'{tmp_path}/none', f'--image_root {tmp_path}/none is not a folder; give '
                        'the folder the images of the parquet rows are in'),
                       ('gs://bucket/images/../private', '--image_root gs://bucket/images/../'
                        'private: a gs:// folder is named without . or .. (Cloud Storage does '
                        'not resolve them); name it plainly')):
        result = cli(*flags, f'--image_root={root}')
        assert result.returncode == 2 and result.stderr.splitlines()[-1] == f'error: {line}'
    assert not os.path.exists(tmp_path / 'out')


def _rows(source) -> list:
    """The listed refs of every span of a source's files, each span pickled and read back as a
    worker gets it."""
    refs = []
    for partition in source.partitions:
        for span in partition.split_further():
            refs += list(pickle.loads(pickle.dumps(span)).examples())
    return refs


def test_workers_get_the_image_root_as_data_and_dataflow_workers_none(tmp_path, monkeypatch):
    """What a forked or remote worker reads does not depend on its own current folder; on
    Dataflow the launcher's folder is no root, and the reason says so."""
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
        f'no image: column image holds no bytes, and its path {path} is not read on '
        'DataflowRunner, whose workers cannot see the folder the command was started in (the '
        'default --image_root); pass --image_root=gs://BUCKET/FOLDER holding the images, or '
        'write the file with the images in it (datasets embeds them in push_to_hub)'
        for path in paths]


@pytest.mark.slow
def test_a_rewritten_file_is_converted_again_and_an_unchanged_one_reused(tmp_path):
    """A run whose train rows all failed (their paths relative to another folder than
    --image_root) left its chunks; the train file written again with absolute paths is
    converted again, the validation file, unchanged, is reused, and the progress counts only
    that as reused."""
    start = _start_folder(tmp_path)
    train, validation = sorted(IMAGES)[:4], sorted(IMAGES)[4:]
    _to_parquet(f'{start}/flowers', f'{start}/pq/train.parquet',
                [p.removeprefix('flowers/') for p in train], [p.split('/')[1] for p in train])
    _to_parquet(start, 'pq/validation.parquet', [f'{start}/{p}' for p in validation],
                [p.split('/')[1] for p in validation])
    flags = [f'--input_dir={start}/pq', '--output_dir=out', '--label_column=label',
             f'--image_root={start}', NO_LEAKAGE_CHECK]
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


def test_a_gs_image_root_confines_the_gs_paths_of_rows(gcs, tmp_path):
    """Under --image_root=gs://..., a relative path is read from it and a gs:// path only below
    it, with no `..` segment; another object of the bucket and a local file are reported."""
    import datasets
    from pipeline.testing.gcs_servers import upload
    inside, private = imagemaker.jpeg(24, 16, seed=70), imagemaker.jpeg(24, 16, seed=71)
    bucket = upload({'images/a.jpg': inside, 'images/b.jpg': IMAGES['flowers/rose/rose0.jpg'],
                     'private/c.jpg': private}, 'data')
    (tmp_path / 'local.jpg').write_bytes(private)
    paths = [f'{bucket}/images/a.jpg', 'b.jpg', f'{bucket}/private/c.jpg',
             f'{bucket}/images/../private/c.jpg', f'{tmp_path}/local.jpg']
    features = datasets.Features({'image': datasets.Image(),
                                  'label': datasets.ClassLabel(names=['a', 'b'])})
    os.makedirs(tmp_path / 'pq')   # As datasets writes it (which would look the paths up).
    pq.write_table(pa.table({'image': [{'bytes': None, 'path': p} for p in paths],
                             'label': [0, 1, 0, 1, 0]}, schema=features.arrow_schema),
                   tmp_path / 'pq/train.parquet')
    result = cli(f'--input_dir={tmp_path}/pq', f'--output_dir={tmp_path}/out',
                 f'--image_root={bucket}/images/', '--max_error_ratio=0.7', NO_LEAKAGE_CHECK)
    assert result.returncode == 0, result.stderr
    assert sorted(_stored(f'{tmp_path}/out').values()) == sorted(
        [inside, IMAGES['flowers/rose/rose0.jpg']])
    assert sorted(_errors(f'{tmp_path}/out')) == [
        (f'{tmp_path}/pq/train.parquet:row {row}', 'no image: column image holds no bytes, and '
         f'its path {paths[row]} lies outside --image_root={bucket}/images; pass '
         '--image_root=FOLDER holding it, or write the file with the images in it (datasets '
         'embeds them in push_to_hub)') for row in (2, 3, 4)]

"""Hugging Face parquet files (pipeline/inputs/parquet_files.py): files written by `datasets`,
in small row groups, in each of the Hub's layouts, converted through the command line and read
back."""
import glob
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from pipeline.output import records
from pipeline.testing import imagemaker
from pipeline.testing.gcs_servers import BUCKET, download, upload
from tests.helpers import cli, killed_at, output_files, plain_records, plain_split
from tests.test_gcs import through_proxy

# The conversions of all but the first test run without the check for copies across splits
# (--leakage=off): what is tested is reading parquet files, and the check's Beam stages take
# half of a small conversion's time.
NO_LEAKAGE_CHECK = '--leakage=off'

NAMES = ['zebra', 'ant', 'cat']    # ClassLabel order, not sorted: the ids follow it.
ROWS_PER_GROUP = 4


def _image(split: str, i: int) -> bytes:
    """A JPEG, every fifth a PNG (re-encoded on the way)."""
    seed = sum(map(ord, split)) * 1000 + i
    return imagemaker.png(64, 48, seed=seed) if i % 5 == 4 else imagemaker.jpeg(40, 30, seed=seed)


def _rows(split: str, n: int) -> list[tuple]:
    """(image bytes, ClassLabel id) of a split's rows."""
    return [(_image(split, i), i % 3) for i in range(n)]


def _write(path, rows: list[tuple], image_feature=True) -> None:
    """A parquet file as `datasets` writes it, ROWS_PER_GROUP rows a row group."""
    import datasets
    features = datasets.Features({'image': datasets.Image() if image_feature else datasets.Value('binary'),
                                  'label': datasets.ClassLabel(names=NAMES)})
    images = [data if data is None or not image_feature else {'bytes': data, 'path': f'img{i}.jpg'}
              for i, (data, _) in enumerate(rows)]
    table = datasets.Dataset.from_dict({'image': images, 'label': [label for _, label in rows]},
                                       features=features)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    table.to_parquet(str(path), batch_size=ROWS_PER_GROUP)


def _set_labels(path, labels: dict) -> None:
    """Rewrites stored label values {row: value} (a ClassLabel refuses bad ones), keeping the
    schema's metadata and the row groups."""
    table = pq.read_table(path)
    values = table.column('label').to_pylist()
    for row, value in labels.items():
        values[row] = value
    table = table.set_column(1, table.schema.field('label'), pa.array(values, pa.int64()))
    pq.write_table(table, path, row_group_size=ROWS_PER_GROUP)


LAYOUTS = {   # layout -> {split name as the files spell it: file names}
    'repository': {'train': ['data/train-00000-of-00002.parquet', 'data/train-00001-of-00002.parquet'],
                   'validation': ['data/validation-00000-of-00001.parquet']},
    'conversion': {'train': ['default/train/0000.parquet', 'default/train/0001.parquet'],
                   'val': ['default/val/0000.parquet']},
    'files': {'train': ['train-00000-of-00002.parquet', 'train-00001-of-00002.parquet'],
              'valid': ['valid-00000-of-00001.parquet']},
}


def _dataset(root, layout: str) -> dict:
    """Writes train (22 rows over two files) and validation (9 rows) in `layout`; returns
    {key: (image, label id)} of the rows."""
    expected = {}
    for name, files in LAYOUTS[layout].items():
        rows = _rows(name, 22 if name == 'train' else 9)
        half = len(rows) // len(files) + 1
        for n, file in enumerate(files):
            mine = rows[n * half:(n + 1) * half]
            _write(root / file, mine)
            expected.update({f'{file}:row {i}': row for i, row in enumerate(mine)})
    return expected


def _by_key(out: str, split: str, root: str) -> dict:
    return {r[records.SOURCE][len(root) + 1:]: r for r in plain_split(out, split)}


@pytest.mark.slow
@pytest.mark.parametrize('layout', sorted(LAYOUTS))
def test_each_hub_layout_converts_with_the_classlabel_ids_and_names(tmp_path, layout):
    expected = _dataset(tmp_path / 'in', layout)
    root, out = str(tmp_path / 'in'), str(tmp_path / 'out')
    result = cli(f'--input_dir={root}', f'--output_dir={out}')
    assert result.returncode == 0, result.stderr
    assert open(f'{out}/labels.txt').read() == 'zebra\nant\ncat\n'
    found = {**_by_key(out, 'train', root), **_by_key(out, 'validation', root)}
    assert sorted(found) == sorted(expected) and len(found) == 31
    for key, (image, label) in expected.items():
        record = found[key]
        assert (record[records.LABEL], record[records.TEXT]) == (label, NAMES[label])
        if image.startswith(b'\xff\xd8'):   # An RGB JPEG is stored as it is.
            assert record[records.ENCODED] == image
        else:
            stored = imagemaker.decode(record[records.ENCODED]).astype(int)
            assert np.abs(stored - imagemaker.decode(image)).mean() < 8   # JPEG at q95, 4:2:0.
    summary = json.load(open(f'{out}/summary.json'))
    assert summary['splits']['train']['records'] == 22


@pytest.mark.slow
def test_every_bad_row_is_a_reported_input_named_by_file_and_row(tmp_path):
    rows = _rows('train', 30)
    rows[3] = (None, 0)
    rows[7] = (b'not an image', 1)
    _write(tmp_path / 'in/data/train-00000-of-00001.parquet', rows)
    path = str(tmp_path / 'in/data/train-00000-of-00001.parquet')
    _set_labels(path, {10: 7, 11: None, 12: -1})
    out = str(tmp_path / 'out')
    result = cli(f'--input_dir={tmp_path}/in', f'--output_dir={out}', '--max_error_ratio=0.2',
                 NO_LEAKAGE_CHECK)
    assert result.returncode == 0, result.stderr
    errors = [json.loads(line) for line in open(f'{out}/errors-train.jsonl')]
    assert sorted((e['source'], e['reason']) for e in errors) == [
        (f'{path}:row 10', 'label 7 is not a class id: the ClassLabel of column label has ids 0..2'),
        (f'{path}:row 11', 'no label (column label is null)'),
        (f'{path}:row 12', 'label -1 is not a class id: the ClassLabel of column label has ids 0..2'),
        (f'{path}:row 3', 'no image (column image holds no bytes)'),
        (f'{path}:row 7', 'not an image Pillow can read (cannot identify image file)'),
    ]
    assert len(plain_split(out, 'train')) == 25
    summary = json.load(open(f'{out}/summary.json'))['splits']['train']
    assert (summary['inputs'], summary['records'], summary['skipped']) == (30, 25, 5)


@pytest.mark.slow
def test_files_that_are_no_parquet_a_user_can_read_are_refused_in_one_line(tmp_path):
    """Junk under a parquet name, a pipe, metadata that is not what datasets writes, a
    ClassLabel without text names: one line naming the file, no traceback, no hang."""
    def refused(name: str, make) -> str:
        path = tmp_path / name / 'data' / 'train-00000-of-00001.parquet'
        os.makedirs(path.parent)
        make(path)
        result = cli(f'--input_dir={tmp_path / name}', f'--output_dir={tmp_path / name}-out',
                     timeout=120)
        assert result.returncode != 0 and 'Traceback' not in result.stderr, result.stderr
        assert not os.path.exists(f'{tmp_path / name}-out')
        return result.stderr

    assert f'{tmp_path}/junk/data/train-00000-of-00001.parquet cannot be read as a parquet file' \
        in refused('junk', lambda p: p.write_bytes(b'not a parquet file' * 3))
    assert f'{tmp_path}/pipe/data/train-00000-of-00001.parquet: not a regular file but a named ' \
        'pipe' in refused('pipe', os.mkfifo)

    def metadata(value: bytes):
        return lambda p: pq.write_table(pa.table({'image': [b'x'], 'label': [0]}).replace_schema_metadata(
            {b'huggingface': value}), p)
    assert 'its huggingface schema metadata is not what the datasets library writes' in \
        refused('json', metadata(b'{not json'))
    assert 'the ClassLabel of column label does not list its class names as text' in refused(
        'names', metadata(json.dumps({'info': {'features': {
            'image': {'_type': 'Image'}, 'label': {'_type': 'ClassLabel', 'names': [1, 2]}}}}).encode()))


@pytest.mark.slow
def test_labels_that_are_no_class_ids_are_reported_rows(tmp_path):
    """A ClassLabel over a float column (a file rewritten by other tools): each row is reported."""
    path = tmp_path / 'in' / 'data' / 'train-00000-of-00001.parquet'
    _write(path, _rows('train', 4))
    table = pq.read_table(path)
    table = table.set_column(1, pa.field('label', pa.float64()), pa.array([0.0, 1.5, 2.0, 1.0]))
    pq.write_table(table.replace_schema_metadata(pq.read_schema(path).metadata), path)
    result = cli(f'--input_dir={tmp_path / "in"}', f'--output_dir={tmp_path / "out"}',
                 '--max_error_ratio=1', NO_LEAKAGE_CHECK)
    assert result.returncode == 0, result.stderr
    reasons = [json.loads(line)['reason'] for line in open(tmp_path / 'out' / 'errors-train.jsonl')]
    assert reasons == [f'label {v} in column label is not a class id' for v in (0.0, 1.5, 2.0, 1.0)]


def test_columns_are_found_by_feature_or_named_and_int_labels_are_ids(tmp_path):
    path = tmp_path / 'in/train-00000-of-00001.parquet'
    _write(path, _rows('train', 6), image_feature=False)
    table = pq.read_table(path)
    metadata = {b'huggingface': json.dumps({'info': {'features': {
        'image': {'dtype': 'binary', '_type': 'Value'},
        'label': {'dtype': 'int64', '_type': 'Value'}}}}).encode()}
    pq.write_table(table.replace_schema_metadata(metadata), path, row_group_size=ROWS_PER_GROUP)
    out = str(tmp_path / 'out')
    found = cli(f'--input_dir={tmp_path}/in', f'--output_dir={out}')
    assert found.returncode == 2 and found.stderr.splitlines()[-1] == (
        f'error: {path}: no column is an Image feature (columns: image, label); choose one with '
        '--image_column')
    named = cli(f'--input_dir={tmp_path}/in', f'--output_dir={out}', '--image_column=image',
                '--label_column=label', NO_LEAKAGE_CHECK)
    assert named.returncode == 0, named.stderr
    assert sorted(r[records.LABEL] for r in plain_split(out, 'train')) == [0, 0, 1, 1, 2, 2]
    assert open(f'{out}/labels.txt').read() == '0\n1\n2\n'
    wrong = cli(f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/o2',
                '--image_column=picture', '--label_column=label')
    assert wrong.stderr.splitlines()[-1] == (
        f'error: --image_column picture: {path} has no such column (columns: image, label)')
    metadata = {b'huggingface': json.dumps({'info': {'features': {
        'image': {'_type': 'Image'}, 'label': {'_type': 'ClassLabel', 'names': ['a', 'b', 'a']}}}}).encode()}
    pq.write_table(table.replace_schema_metadata(metadata), path)
    twice = cli(f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/o3')
    assert twice.stderr.splitlines()[-1] == (
        f"error: {path}: the ClassLabel of column label names 'a' more than once; labels.txt "
        "needs a name per id: give each its own in the file's features")
    texts = table.set_column(1, 'label', pa.array(['wren', 'auk', 'wren', 'jay', 'auk', 'auk']))
    pq.write_table(texts.replace_schema_metadata({}), path)
    named = cli(f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/o4',
                '--image_column=image', '--label_column=label', NO_LEAKAGE_CHECK)
    assert named.returncode == 0, named.stderr
    assert open(f'{tmp_path}/o4/labels.txt').read() == 'auk\njay\nwren\n'   # Sorted texts.
    assert sorted((r[records.LABEL], r[records.TEXT]) for r in plain_split(f'{tmp_path}/o4', 'train')) == [
        (0, 'auk'), (0, 'auk'), (0, 'auk'), (1, 'jay'), (2, 'wren'), (2, 'wren')]


@pytest.mark.slow
def test_a_plan_lists_every_row_and_writes_nothing(tmp_path):
    rows = _rows('train', 10)
    rows[2] = (None, 0)
    _write(tmp_path / 'in/data/train-00000-of-00001.parquet', rows)
    result = cli(f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/out', '--plan_only')
    assert result.returncode == 0, result.stderr
    assert re.search(r'^train +10 +0 +3 +1 +1 ', result.stdout, re.M), result.stdout
    assert not os.path.exists(f'{tmp_path}/out/labels.txt')


@pytest.mark.slow
def test_several_configs_ask_for_one_in_one_line(tmp_path):
    for config in ('plain', 'extra'):
        _write(tmp_path / f'in/{config}/train/0000.parquet', _rows('train', 3))
    result = cli(f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/out')
    assert result.returncode == 2 and result.stderr.splitlines() == [
        f'error: {tmp_path}/in holds the parquet files of configs extra, plain; give one: '
        f'--input_dir {tmp_path}/in/extra']
    chosen = cli(f'--input_dir={tmp_path}/in/plain', f'--output_dir={tmp_path}/out',
                 NO_LEAKAGE_CHECK)
    assert chosen.returncode == 0, chosen.stderr
    assert len(plain_split(f'{tmp_path}/out', 'train')) == 3


@pytest.mark.slow
def test_files_of_other_classes_are_refused_naming_the_file_and_the_id(tmp_path):
    import datasets
    _write(tmp_path / 'in/data/train-00000-of-00002.parquet', _rows('train', 3))
    other = datasets.Features({'image': datasets.Image(),
                               'label': datasets.ClassLabel(names=['zebra', 'bee', 'cat'])})
    datasets.Dataset.from_dict({'image': [{'bytes': _image('other', 0), 'path': None}], 'label': [1]},
                               features=other).to_parquet(
        str(tmp_path / 'in/data/train-00001-of-00002.parquet'))
    result = cli(f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/out')
    assert result.returncode == 2 and result.stderr.splitlines()[-1] == (
        f'error: {tmp_path}/in/data/train-00001-of-00002.parquet: the labels of column label are '
        "not those of the first file: id 1 is 'bee' here, 'ant' there; convert the files of one "
        'dataset together')


def test_parquet_on_cloud_storage_gives_the_records_of_a_local_run(gcs, tmp_path):
    expected = _dataset(tmp_path / 'in', 'repository')
    source = upload({os.path.relpath(p, tmp_path / 'in'): open(p, 'rb').read()
                     for p in glob.glob(f'{tmp_path}/in/**/*.parquet', recursive=True)}, 'hub')
    # First, so that no footer of these objects is known to this process yet, as in a process
    # of its own.
    with through_proxy(gcs) as proxy:
        counted = cli(f'--input_dir={source}', f'--output_dir={tmp_path}/counted', '--num_shards=2',
                      NO_LEAKAGE_CHECK)
    assert counted.returncode == 0, counted.stderr
    # For each file (row groups of 4 + 4 + 4, 4 + 4 + 2, 4 + 4 + 1 rows: one span each) its
    # footer (its last 8 bytes, then the footer, read once per process: the first file's when
    # the launcher reads its columns), the page headers of its labels and paths (one 8 MB
    # window), each row group's labels and paths, later the page headers of its images and each
    # row group's images: each read is of the bytes pyarrow asks for.
    assert proxy.operations['read'] == 3 * (2 + 1 + 3 + 1 + 3)
    remote = cli(f'--input_dir={source}', f'--output_dir=gs://{BUCKET}/out', '--num_shards=2',
                 NO_LEAKAGE_CHECK)
    assert remote.returncode == 0, remote.stderr
    local = f'{tmp_path}/local'
    assert cli(f'--input_dir={tmp_path}/in', f'--output_dir={local}', '--num_shards=2',
               NO_LEAKAGE_CHECK).returncode == 0
    files = download('out')
    assert sorted(files) == sorted(output_files(local))
    assert output_files(f'{tmp_path}/counted') == files
    assert files['labels.txt'] == b'zebra\nant\ncat\n'
    for split, count in (('train', 22), ('validation', 9)):
        shards = []
        for name, data in sorted(files.items()):
            if f'-{split}.tfrecord-' in name:
                (tmp_path / name).write_bytes(data)
                shards.append(str(tmp_path / name))
        on_gcs, here = plain_records(shards), plain_split(local, split)
        assert len(on_gcs) == count
        for record, twin in zip(on_gcs, here, strict=True):   # Same records, in the same order.
            key = twin.pop(records.SOURCE)[len(f'{tmp_path}/in/'):]
            assert record.pop(records.SOURCE) == f'{source}/{key}'
            assert record == twin and record[records.LABEL] == expected[key][1]


def test_grouped_reads_give_each_ref_its_row_bytes(tmp_path):
    from pipeline.inputs.parquet_files import ParquetFile, read_columns
    from transforms.grouped_reads import read_into_blobs
    rows = _rows('train', 10)
    rows[6] = (None, 0)
    path = str(tmp_path / 'train-00000-of-00001.parquet')
    _write(path, rows)
    size = os.path.getsize(path)
    spans = ParquetFile('train', path, 'train.parquet', size, None, read_columns(path, size),
                        256 << 20).split_further()
    assert len(spans) == 1   # Row groups of 4 + 4 + 2 rows: one span of at least 64 rows.
    refs = [ref for span in spans for ref in span.examples()]
    read = sorted((r.key, r.member and r.member.read(), r.problem, r.group)
                  for r in read_into_blobs(refs, str(tmp_path / 'temp'), False, bytes(32)))
    assert read == sorted((f'train.parquet:row {row}', data, None if data else
                           'no image (column image holds no bytes)', None)
                          for row, (data, _) in enumerate(rows))


READ_ALL_ROWS = '''import os, sys
from pipeline.inputs.parquet_files import ParquetFile, read_columns
path = sys.argv[1]
size = os.path.getsize(path)
spans = ParquetFile('train', path, 'big.parquet', size, None, read_columns(path, size),
                    256 << 20).split_further()
refs = [ref for span in spans for ref in span.examples()]
peak = lambda: int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]) << 10
listed = peak()
print(len(spans), sum(len(ref.data) for ref in refs[0].group.read(refs)), peak() - listed)
'''


@pytest.mark.slow
def test_a_300_mb_row_group_is_read_without_holding_it(tmp_path):
    import datasets
    blob = os.urandom(2 << 20)
    features = datasets.Features({'image': datasets.Image(), 'label': datasets.ClassLabel(names=NAMES)})
    path = str(tmp_path / 'big.parquet')
    datasets.Dataset.from_dict({'image': [{'bytes': blob[i:], 'path': None} for i in range(150)],
                                'label': [0] * 150}, features=features).to_parquet(path, batch_size=150)
    del blob
    result = subprocess.run([sys.executable, '-c', READ_ALL_ROWS, path], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    spans, total, growth = result.stdout.split()
    assert (spans, total) == ('1', str(150 * (2 << 20) - sum(range(150))))
    # The row group is 300 MB, read a row of 2 MB at a time (151 MB more, 16 rows at a time).
    assert int(growth) < 64 << 20, growth


def _noise_jpeg(seed: int) -> bytes:
    """A 384x384 JPEG of noise, about 130 KB: images that do not compress, to fill memory."""
    noise = np.random.default_rng(seed).integers(0, 256, (384, 384, 3), dtype=np.uint8)
    return imagemaker.encode(Image.fromarray(noise), 'JPEG', quality=90)


LAUNCHER = ('import sys\n'
            'from pipeline.run import main\n'
            'code = main(sys.argv[1:])\n'
            "peak = open('/proc/self/status').read().split('VmHWM:')[1].split()[0]\n"
            "print(f'launcher peak {peak} kB', file=sys.stderr)\n"
            'sys.exit(code)\n')


def _launcher_peak(*argv) -> int:
    """The peak resident memory, in bytes, of the process that runs the command line (a local
    run's launcher, which holds its shuffles; its workers are processes of their own)."""
    result = subprocess.run([sys.executable, '-c', LAUNCHER, *argv], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return int(re.search(r'launcher peak (\d+) kB', result.stderr).group(1)) << 10


@pytest.mark.slow
def test_a_local_launcher_holds_no_more_for_parquet_than_for_the_same_images_as_folders(tmp_path):
    import datasets
    images = [(_noise_jpeg(i), i % 3) for i in range(400)]   # 53 MB.
    for i, (data, label) in enumerate(images):
        os.makedirs(tmp_path / f'folders/train/{NAMES[label]}', exist_ok=True)
        (tmp_path / f'folders/train/{NAMES[label]}/{i:04d}.jpg').write_bytes(data)
    features = datasets.Features({'image': datasets.Image(),
                                  'label': datasets.ClassLabel(names=NAMES)})
    table = datasets.Dataset.from_dict({'image': [{'bytes': d, 'path': None} for d, _ in images],
                                        'label': [label for _, label in images]}, features=features)
    os.makedirs(tmp_path / 'parquet/data')
    table.to_parquet(str(tmp_path / 'parquet/data/train-00000-of-00001.parquet'), batch_size=100)
    del images, table
    peaks = {kind: _launcher_peak(f'--input_dir={tmp_path}/{kind}',
                                  f'--output_dir={tmp_path}/{kind}-out', '--leakage=off')
             for kind in ('folders', 'parquet')}
    for kind in peaks:
        summary = json.load(open(f'{tmp_path}/{kind}-out/summary.json'))
        assert summary['splits']['train']['records'] == 400
    # Were the images to cross the shuffle into chunks, the launcher would hold them all (749 MiB
    # against 226 MiB with 600 such images, measured).
    assert peaks['parquet'] < peaks['folders'] + (60 << 20), peaks


@pytest.mark.slow
def test_a_killed_run_reuses_its_blobs_and_chunks_and_gives_the_bytes_of_a_clean_run(tmp_path):
    for n in range(2):   # 40 row groups of 4 rows a file: spans of 64, 64 and 32 rows.
        _write(tmp_path / f'in/data/train-0000{n}-of-00002.parquet', _rows(f'train{n}', 160))
    flags = [f'--input_dir={tmp_path}/in', '--num_shards=3', NO_LEAKAGE_CHECK]
    out = str(tmp_path / 'out')
    assert killed_at('group:3', *flags, f'--output_dir={out}').returncode == -signal.SIGKILL
    written = {path: os.stat(path) for path in glob.glob(f'{out}/.tmp-*/groups/*.images')}
    assert len(written) == 3 and not glob.glob(f'{out}/.tmp-*/groups/*.partial-*')
    # Every span is read before a chunk is converted: killed after its second chunk, a rerun
    # has all 6 blobs, the first three those the first attempt wrote, not written again.
    assert killed_at('chunk:2', *flags, f'--output_dir={out}').returncode == -signal.SIGKILL
    blobs = {path: os.stat(path) for path in glob.glob(f'{out}/.tmp-*/groups/*.images')}
    assert len(blobs) == 6
    assert all((blobs[p].st_ino, blobs[p].st_mtime_ns) == (s.st_ino, s.st_mtime_ns)
               for p, s in written.items())
    assert glob.glob(f'{out}/.tmp-*/parts/*.json')
    rerun = cli(*flags, f'--output_dir={out}')
    assert rerun.returncode == 0, rerun.stderr
    assert 'an earlier attempt finished 2 chunks' in rerun.stderr
    # Both chunks are unchanged, so reused: the progress counts their inputs as reused, not done.
    assert 'reusing' not in rerun.stderr
    done = [line for line in rerun.stderr.splitlines() if line.startswith('converting: ')][-1]
    found = re.match(r'converting: (\d+) of \1 inputs \(100%\) \((\d+) reused from an earlier '
                     r'attempt\)', done)
    assert found and int(found[1]) + int(found[2]) == 320 and int(found[2]) > 0, done
    reference = str(tmp_path / 'reference')
    assert cli(*flags, f'--output_dir={reference}').returncode == 0
    assert output_files(out) == output_files(reference)
    assert len(plain_split(out, 'train')) == 320

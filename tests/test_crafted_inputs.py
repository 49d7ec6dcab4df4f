"""Inputs crafted to make a reader hang, recurse, drop rows, merge labels or blow up memory,
each through the command line: every one is read, one reported input, or refused in one line
naming the file (exit 2, no traceback), within a couple of seconds. Where the memory of a
process is the point, the command runs in a process of its own under an address-space bound,
so a reader that materialises what a file claims fails fast instead of eating the machine."""
import json
import os
import resource
import shutil
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.inputs import folders, zip_index
from pipeline.output import records
from pipeline.testing import archivemaker, imagemaker
from benchmarks.fuzz_thrift import varint
from tests.helpers import cli, read_split, shard_paths
from pipeline.testing.datasets import run_verify
from pipeline.testing.process_memory import run_sampled, sample_command

FEATURES = {'image': {'_type': 'Image'}, 'label': {'_type': 'ClassLabel', 'names': ['a', 'b']}}
# Conversions meant to succeed run without the check for copies across splits (--leakage=off):
# what is tested is how crafted inputs are read, and the check's Beam stages take half of a
# small conversion's time.
NO_LEAKAGE_CHECK = '--leakage=off'


def _field(field: int, kind: int) -> bytes:
    """The header of an unknown thrift compact field (its id written in full)."""
    return bytes([kind]) + varint(field << 1)


# Field 100, a map claiming 2**60 entries of booleans to booleans: 9 bytes.
MAP_OF_BOOLS = _field(100, 0x0B) + varint(1 << 60) + bytes([0x11])
# Field 100, a list holding a list holding a list ... 5,000 deep, one byte a level.
NESTED_LISTS = _field(100, 0x09) + bytes([0x19]) * 5000 + bytes([0x09])


def _parquet(path, metadata: bytes | None = None, rows: int = 4) -> str:
    """A parquet file as datasets writes one: Image structs of JPEGs, ClassLabel ids."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    images = pa.array([{'bytes': imagemaker.jpeg(24, 16, seed=i), 'path': f'{i}.jpg'}
                       for i in range(rows)])
    table = pa.table({'image': images, 'label': pa.array([i % 2 for i in range(rows)], pa.int64())})
    metadata = metadata or json.dumps({'info': {'features': FEATURES}}).encode()
    pq.write_table(table.replace_schema_metadata({b'huggingface': metadata}), path)
    return str(path)


def _with_footer_field(path: str, raw: bytes) -> None:
    """Inserts the thrift bytes `raw` as the last field of the file's FileMetaData."""
    with open(path, 'rb') as stream:
        data = stream.read()
    length = int.from_bytes(data[-8:-4], 'little')
    footer = data[-8 - length:-8]
    assert footer[-1] == 0   # Its stop byte.
    footer = footer[:-1] + raw + b'\0'
    with open(path, 'wb') as out:
        out.write(data[:-8 - length] + footer + len(footer).to_bytes(4, 'little') + b'PAR1')


def _refused(result, path: str, why: str) -> None:
    """One error line naming the file and what broke, exit 2, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f'error: {path} ') and why in lines[0], lines
    assert 'Traceback' not in result.stderr and 'RuntimeError' not in result.stderr


@pytest.mark.slow
def test_a_page_header_with_a_map_of_booleans_claiming_2_to_the_60_entries_is_refused(tmp_path):
    """A boolean in a map was read as no byte at all: the map's 2**60 entries never ended, the
    listing hung forever."""
    path = _parquet(tmp_path / 'in/data/train-00000-of-00001.parquet')
    column = pq.ParquetFile(path).metadata.row_group(0).column(1)
    assert column.path_in_schema == 'image.path'
    start = column.dictionary_page_offset or column.data_page_offset
    with open(path, 'rb') as stream:
        data = stream.read()
    with open(path, 'wb') as out:
        out.write(data[:start] + MAP_OF_BOOLS + data[start:])
    result = cli(f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/out', timeout=60)
    _refused(result, path, f'the page header at byte {start} does not parse')


@pytest.mark.slow
@pytest.mark.parametrize('field,problem', [
    # The launcher reads the first file's schema only (through pyarrow, which refuses such a
    # map); the second file's footer, read by this tool's own reader, hung the run.
    (MAP_OF_BOOLS, 'a container claims 1,152,921,504,606,846,976 elements, more than the bytes '
                   'left'),
    # Only structs were held to the depth bound: lists recursed until a RecursionError, shown
    # as `error: RuntimeError: Traceback...` naming neither the file nor the problem.
    (NESTED_LISTS, 'structs, lists or maps nested more than 16 deep')],
    ids=['map of booleans', 'lists nested 5000 deep'])
def test_a_crafted_footer_in_a_splits_second_file_is_refused_naming_the_file(tmp_path, field,
                                                                              problem):
    _parquet(tmp_path / 'in/data/train-00000-of-00002.parquet')
    second = _parquet(tmp_path / 'in/data/train-00001-of-00002.parquet')
    _with_footer_field(second, field)
    result = cli(f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/out', timeout=60)
    _refused(result, second, f'its footer does not parse: {problem}')


def _summary(out) -> dict:
    with open(f'{out}/summary.json') as stream:
        return json.load(stream)['splits']['train']


def _reasons(out) -> list[str]:
    with open(f'{out}/errors-train.jsonl') as stream:
        return [json.loads(line)['reason'] for line in stream]


def _labels(out) -> list[str]:
    with open(f'{out}/labels.txt', encoding='utf-8') as stream:
        return stream.read().splitlines()


@pytest.mark.slow
def test_a_stray_quote_inside_a_field_of_a_long_csv_drops_no_row(tmp_path, monkeypatch):
    """`12" vinyl` is a label to the csv module, but the boundary scan counted its quote as
    opening a quoted field: no record ended after it, the rest of the file became one chunk
    over the bound, and only its first 8 MiB were read. 490 of 560 rows of a 67 MB CSV were
    neither records nor errors, and the run exited 0. The bounds are shrunk here so that a few
    KB show the same."""
    from pipeline.inputs import csv_files
    monkeypatch.setattr(csv_files, 'CSV_CHUNK_BYTES', 256)
    monkeypatch.setattr(csv_files, 'MAX_RECORD_BYTES', 1024)
    rows = ['uri,label,note']
    for i in range(24):
        (tmp_path / f'{i}.jpg').write_bytes(imagemaker.jpeg(24, 16, seed=i))
        label = '12" vinyl' if i == 0 else 'cd' if i % 2 else 'tape'
        rows.append(f'{i}.jpg,{label},{"n" * 120}')
    (tmp_path / 'train.csv').write_text('\n'.join(rows) + '\n')
    result = cli(f'--csv_train={tmp_path}/train.csv', f'--output_dir={tmp_path}/out',
                 NO_LEAKAGE_CHECK)
    assert result.returncode == 0, result.stderr
    summary = _summary(tmp_path / 'out')
    assert (summary['inputs'], summary['records'], summary['skipped']) == (24, 24, 0), summary
    assert _labels(tmp_path / 'out') == ['12" vinyl', 'cd', 'tape']


@pytest.mark.slow
def test_a_latin1_csv_reports_its_rows_instead_of_merging_two_classes(tmp_path):
    """`caf\\xe9` and `caf\\xe8` were both decoded as `caf\\ufffd`: one class of six images, named
    U+FFFD in labels.txt, exit 0. Each such row is now a reported input, its bytes escaped."""
    for i in range(8):
        (tmp_path / f'{i}.jpg').write_bytes(imagemaker.jpeg(24, 16, seed=i))
    (tmp_path / 'train.csv').write_bytes(
        b'0.jpg,caf\xe9\n1.jpg,caf\xe9\n2.jpg,caf\xe8\n3.jpg,caf\xe8\n'
        + ''.join(f'{i}.jpg,tea\n' for i in range(4, 8)).encode())
    result = cli(f'--csv_train={tmp_path}/train.csv', f'--output_dir={tmp_path}/out',
                 '--max_error_ratio=1', NO_LEAKAGE_CHECK)
    assert result.returncode == 0, result.stderr
    assert _labels(tmp_path / 'out') == ['tea']
    csv_path = tmp_path / 'train.csv'
    fix = ('is not UTF-8 text (shown with its stray bytes escaped); save the CSV as UTF-8 (e.g. '
           'iconv -f latin1 -t utf-8)')
    assert sorted(_reasons(tmp_path / 'out')) == [
        f"{csv_path} line 1: 'caf\\\\xe9' {fix}", f"{csv_path} line 2: 'caf\\\\xe9' {fix}",
        f"{csv_path} line 3: 'caf\\\\xe8' {fix}", f"{csv_path} line 4: 'caf\\\\xe8' {fix}"]
    summary = _summary(tmp_path / 'out')
    assert (summary['records'], summary['skipped']) == (4, 4), summary


def _cls_shard(tmp_path) -> str:
    """A WebDataset shard of 8 samples, each an image and a .cls id 0..3."""
    files = {}
    for i in range(8):
        files[f'k{i:03d}.jpg'] = imagemaker.jpeg(24, 16, seed=i)
        files[f'k{i:03d}.cls'] = str(i % 4).encode()
    (tmp_path / 'train-000000.tar').write_bytes(archivemaker.tar(files))
    return f'--webdataset=train={tmp_path}/train-{{000000..000000}}.tar'


@pytest.mark.parametrize('text, line, why', [
    ('daisy\nrose\x1cred\ntulip\nsunflower\n', 2,
     'holds a line break or control character (rose\\x1cred)'),
    ('daisy\nrose\u2028red\ntulip\nsunflower\n', 2,
     'holds a line break or control character (rose\\u2028red)'),
    ('daisy\nrose\x0cred\ntulip\nsunflower\n', 2,
     'holds a line break or control character (rose\\x0cred)'),
    ('daisy\nrose\rred\ntulip\nsunflower\n', 2,
     'holds a line break or control character (rose\\rred)'),
    ('daisy\n\nrose\ntulip\nsunflower\n', 2, 'is blank, but line i names id i'),
], ids=['x1c', 'u2028', 'form-feed', 'lone-cr', 'blank-line'])
def test_a_labels_file_line_that_would_shift_later_ids_is_refused_naming_it(tmp_path, text, line,
                                                                           why):
    """str.splitlines() also broke lines at \\x1c, \\x0c, U+2028, NEL and a lone CR, and blank
    lines were dropped: `rose\\x1cred` became two names, and every later .cls id was stored
    with the name of the line before its own, exit 0."""
    labels = tmp_path / 'classes.txt'
    labels.write_bytes(text.encode())
    result = cli(_cls_shard(tmp_path), f'--labels_file={labels}', f'--output_dir={tmp_path}/out',
                 timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f'error: --labels_file {labels} line {line} '), lines
    assert why in lines[0], lines
    assert not os.path.exists(tmp_path / 'out')


@pytest.mark.slow
def test_a_labels_file_in_crlf_with_blank_lines_at_its_end_names_each_id_by_its_line(tmp_path):
    labels = tmp_path / 'classes.txt'
    labels.write_bytes(b'\xef\xbb\xbfdaisy\r\n rose \r\ntulip\r\nsunflower\r\n\r\n\n')
    result = cli(_cls_shard(tmp_path), f'--labels_file={labels}', f'--output_dir={tmp_path}/out',
                 NO_LEAKAGE_CHECK)
    assert result.returncode == 0, result.stderr
    assert _labels(tmp_path / 'out') == ['daisy', 'rose', 'tulip', 'sunflower']
    found = set()
    for path in shard_paths(str(tmp_path / 'out'), 'train'):
        with open(path, 'rb') as stream:
            found |= {(r[records.LABEL][0], r[records.TEXT][0])
                      for r in map(records.decode_example, records.read_records(stream))}
    assert found == {(0, b'daisy'), (1, b'rose'), (2, b'tulip'), (3, b'sunflower')}


def _address_space(limit: int):
    """A preexec_fn bounding a child's address space: a reader that materialises what a file
    claims fails there with MemoryError instead of eating the machine."""
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


AS_LIMIT = 3 << 30   # The launcher maps ~1.4 GB of address space before it reads anything.


def _with_junk(containers: int) -> bytes:
    """huggingface metadata as datasets writes it, plus `containers` empty objects: 3 bytes of
    text each, some 64 of memory once parsed."""
    text = json.dumps({'info': {'features': FEATURES, 'junk': 'JUNK'}})
    return text.replace('"JUNK"', '[' + '{},' * (containers - 1) + '{}]').encode()


@pytest.mark.slow
def test_huggingface_metadata_of_many_empty_objects_is_refused_before_it_is_parsed(tmp_path):
    """300 KB of `[{},{},...]`: within the 64 MiB byte bound, as the 63 MiB that took the
    launcher to 1.8 GB and then a MemoryError were."""
    path = _parquet(tmp_path / 'in/data/train-00000-of-00001.parquet', _with_junk(100_001))
    result = cli(f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/out', timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f'error: {path}: its huggingface schema metadata is not what the datasets library '
        'writes (holds more than 100,000 JSON objects and arrays); rewrite the file with '
        'datasets, or name the columns with --image_column and --label_column']


@pytest.mark.slow
def test_24_mib_of_empty_objects_in_huggingface_metadata_never_becomes_memory(tmp_path):
    """The metadata's objects are counted on its bytes; parsed, these 8 million took the
    launcher to some 900 MB."""
    os.makedirs(tmp_path / 'in/data')
    path = f'{tmp_path}/in/data/train-00000-of-00001.parquet'
    images = pa.array([{'bytes': imagemaker.jpeg(24, 16, seed=i), 'path': f'{i}.jpg'}
                       for i in range(4)])
    table = pa.table({'image': images, 'label': pa.array([0, 1, 0, 1], pa.int64())})
    with pq.ParquetWriter(path, table.schema, store_schema=False) as writer:   # Stored once.
        writer.write_table(table)
        writer.add_key_value_metadata({'huggingface': _with_junk(8 << 20).decode()})
    result = run_sampled(f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/out',
                         timeout=120, preexec_fn=_address_space(AS_LIMIT))
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f'error: {path}: ') and 'more than 100,000 JSON objects' in line, line
    assert result.largest < 512 << 20, result.peaks   # Some 900 MB when it was parsed.


@pytest.mark.slow
def test_the_launcher_reads_a_first_files_columns_within_the_footer_bound(tmp_path):
    """The launcher read the schema through pyarrow, without the 64 MiB footer bound that every
    other read of a footer has (a footer of 147 MiB was parsed whole). A sparse file whose footer
    claims 65 MiB shows it without 65 MiB of disk."""
    os.makedirs(tmp_path / 'in/data')
    path = f'{tmp_path}/in/data/train-00000-of-00001.parquet'
    length = 65 << 20
    with open(path, 'wb') as out:
        out.write(b'PAR1')
        out.truncate(4 + length)
        out.seek(4 + length)
        out.write(length.to_bytes(4, 'little') + b'PAR1')
    result = cli(f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/out', timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f'error: {path}: its footer (the parquet metadata) is {length:,} bytes, more than the '
        '67,108,864 read; write the file with fewer row groups or columns']


def _nested_objects(count: int, depth: int) -> bytes:
    """A JSON array of `count` one-key objects nested `depth` deep: a comma per element, no
    more, and some 40 times its size in memory once parsed."""
    element = '{"":' * depth + '0' + '}' * depth
    return ('[' + ','.join([element] * count) + ']').encode()


@pytest.fixture(scope='module')
def converted(tmp_path_factory) -> tuple[str, str]:
    """(input folder, output folder) of 6 images converted."""
    root = tmp_path_factory.mktemp('converted')
    for i in range(6):
        os.makedirs(root / f'in/train/c{i % 2}', exist_ok=True)
        (root / f'in/train/c{i % 2}/{i}.jpg').write_bytes(imagemaker.jpeg(24, 16, seed=i))
    result = cli(f'--input_dir={root}/in', f'--output_dir={root}/out', NO_LEAKAGE_CHECK)
    assert result.returncode == 0, result.stderr
    return str(root / 'in'), str(root / 'out')


@pytest.mark.slow
def test_a_planted_summary_of_nested_objects_is_refused_by_verify_and_the_converter(
        converted, tmp_path):
    """The "8 million values" bound counted commas, and nesting needs none: a 60 MB planted
    summary.json took verify to 2.4 GB and the same conversion, run again, to a MemoryError.
    Here 2,000 objects 60 deep (600 KB, 120,000 objects) show the count."""
    inputs, dataset = converted
    out = shutil.copytree(dataset, tmp_path / 'out')
    (out / 'summary.json').write_bytes(_nested_objects(2_000, 60))
    result = run_verify(str(out))
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f'error: {out}/summary.json holds more than 100,000 JSON objects and arrays, more than '
        'this tool writes there (a million shards per split at most), so it is not a file of '
        'this dataset; move it away']
    again = cli(f'--input_dir={inputs}', f'--output_dir={out}', NO_LEAKAGE_CHECK, timeout=60)
    assert again.returncode == 2, again.stderr
    [line] = again.stderr.splitlines()
    assert line.startswith(f'error: {out} holds files this run would overwrite that are not part '
                           'of a dataset'), line


@pytest.mark.slow
def test_verify_reads_a_planted_summary_of_nested_objects_in_bounded_memory(converted, tmp_path):
    """12 MB of one-key objects nested 400 deep: 2.4 million dicts once parsed."""
    _, dataset = converted
    out = shutil.copytree(dataset, tmp_path / 'out')
    (out / 'summary.json').write_bytes(_nested_objects(6_000, 400))
    result = sample_command([sys.executable, '-m', 'pipeline.verify', str(out), '--processes=1'],
                            timeout=120, preexec_fn=_address_space(AS_LIMIT))
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f'error: {out}/summary.json holds more than 100,000 JSON objects'), line
    assert result.largest < 256 << 20, result.peaks   # 530 MB when it was parsed.


def _zip_of_empty_folders(path, folders: int, claimed: int | None = None,
                          below: str = 'train/a') -> None:
    """A zip of 6 JPEGs in train/a and train/b, then `folders` stored empty directory entries
    (53 bytes each, local header and central entry) below `below`; its end record (zip64 past
    65,535 entries) claims `claimed` entries (default: as many as it holds)."""
    items = [(f'train/{c}/{i}.jpg', imagemaker.jpeg(24, 16, seed=n))
             for n, (c, i) in enumerate((c, i) for c in 'ab' for i in range(3))]
    items += [(f'{below}/d{i:07d}/' if below else f'd{i:07d}/', b'') for i in range(folders)]
    archivemaker.write_stored_zip(path, items, claimed)


@pytest.mark.slow
def test_a_zip_of_200_001_empty_folders_is_indexed_in_bounded_memory(tmp_path):
    """A million empty directory entries (53 MB) took the launcher past 1.6 GB, then `can't
    start new thread`, when zipfile made an object of each; such zips were then refused past
    200,000 entries (these 200,001 took the launcher to 586 MB and a worker to 555 MB). Its
    entries are now read a window at a time and held as columns."""
    path = tmp_path / 'in.zip'
    _zip_of_empty_folders(path, 200_001, claimed=6, below='other')
    result = run_sampled(f'--input_dir={path}', f'--output_dir={tmp_path}/out', timeout=600,
                         preexec_fn=_address_space(AS_LIMIT))
    assert result.returncode == 0, result.stderr
    assert len(list(read_split(str(tmp_path / 'out'), 'train'))) == 6
    assert result.largest < 400 << 20, result.peaks


def test_a_zip_of_more_entries_than_are_read_is_refused_as_a_limit_in_one_line(tmp_path,
                                                                             monkeypatch):
    """The bound (100,000,000 entries) is counted as the central directory is read, whatever
    its end record claims; past it the zip is refused as too large, not as damaged."""
    monkeypatch.setattr(zip_index, 'MAX_ENTRIES', 100)
    path = tmp_path / 'in.zip'
    _zip_of_empty_folders(path, 95, claimed=6)
    result = cli(f'--input_dir={path}', f'--output_dir={tmp_path}/out', '--max_error_ratio=1')
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f'error: {path}: zip {path} holds more than 100 entries, the most read of a zip; none of '
        'its members are read: split it into zips of fewer members (one per class, say), or '
        'use a tar']


@pytest.mark.parametrize('below', ['', 'train/'])
def test_a_zip_of_more_folders_in_one_folder_than_are_read_is_one_line_or_one_reported_input(
        tmp_path, monkeypatch, below):
    """A million empty folder entries in one folder of a zip took the launcher past 1.3 GB
    and 14 minutes (an object of each folder, and each folder's table taken over all rows);
    past MAX_FOLDERS (100,000) folders in one folder, it is refused as a limit: one line above
    the split folders, one reported input in a split."""
    monkeypatch.setattr(folders, 'MAX_FOLDERS', 50)
    path = tmp_path / 'in.zip'
    _zip_of_empty_folders(path, 200, below=below.rstrip('/'))
    message = ('holds more than 50 folders, the most read in one folder of an archive; none of '
               'them are read: group them into fewer folders (one per class), or extract the '
               'archive')
    result = cli(f'--input_dir={path}', f'--output_dir={tmp_path}/out', '--max_error_ratio=1')
    if not below:
        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines() == [f'error: {path}: {path} {message}']
    else:
        assert result.returncode == 0, result.stderr
        reported = (tmp_path / 'out' / 'errors-train.jsonl').read_text().splitlines()
        assert [json.loads(line)['reason'] for line in reported] == [f'{path}/train {message}']

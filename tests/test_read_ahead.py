"""Round trips to Cloud Storage overlapped or saved: images read ahead of their conversion
(--reads_in_flight), split and class folders listed several at once, a chunk's uploads made
while the next converts, the commit's metadata written at once, the input folders listed once
while the flags are read, nothing asked twice at the end. The output bytes do not change, and
unreadable inputs are still reported."""
import json

import pytest

from pipeline.testing import imagemaker
from pipeline.testing.gcs_servers import BUCKET, download, upload
from tests.helpers import cli, convert, output_files
from tests.test_gcs import through_proxy

pytestmark = pytest.mark.slow
# The first three tests convert without the check for copies across splits (--leakage=off):
# their subject is reads and listings, and the check's Beam stages take half of a small
# conversion's time. The others count the commit's writes and requests, which include its.
NO_LEAKAGE_CHECK = '--leakage=off'

IMAGES = {f'train/c{i % 3}/{i}.jpg': imagemaker.jpeg(48 + i % 5, 32, seed=i) for i in range(60)}
IMAGES.update({f'validation/c{i % 3}/{i}.jpg': imagemaker.jpeg(40, 30, seed=100 + i)
               for i in range(12)})
IMAGES['train/c1/broken.jpg'] = b'\xff\xd8\xff\xe0 not really'


def _run_through(gcs, *argv, **latency):
    """(the command line's answer, the proxy): the command line run in this process on one
    worker (so that more than one read in flight means reads overlap within a worker), reading
    and writing through a proxy with `latency` (read_latency, write_latency)."""
    with through_proxy(gcs, **latency) as proxy:
        return cli(*argv, timeout=600), proxy


def test_slow_reads_overlap_and_the_output_bytes_stay_the_same(gcs, tmp_path):
    source = upload(IMAGES, 'raw')
    flags = [f'--input_dir={source}', '--num_shards=2', '--max_error_ratio=0.1', NO_LEAKAGE_CHECK]
    result, proxy = _run_through(gcs, *flags, f'--output_dir=gs://{BUCKET}/slow', read_latency=0.03)
    assert result.returncode == 0, result.stderr[-3000:]
    convert(*flags, '--reads_in_flight=1', f'--output_dir={tmp_path}/one-at-a-time')

    assert proxy.operations['read'] >= len(IMAGES)
    assert proxy.max_reads_in_flight > 1
    slow = download('slow')
    assert slow == output_files(f'{tmp_path}/one-at-a-time')
    assert [json.loads(line)['source'] for line in slow['errors-train.jsonl'].splitlines()] == [
        f'{source}/train/c1/broken.jpg']


def test_a_missing_object_is_reported_for_its_input(gcs, tmp_path):
    present = {f'imgs/{i}.jpg': imagemaker.jpeg(40, 30, seed=i) for i in range(40)}
    upload(present, 'csvdata')
    rows = [f'imgs/{i}.jpg,c{i % 2}' for i in range(40)] + ['imgs/gone.jpg,c0']
    upload({'train.csv': ('\n'.join(rows) + '\n').encode()}, 'csvdata')
    result, proxy = _run_through(gcs, f'--csv_train=gs://{BUCKET}/csvdata/train.csv',
                                 f'--output_dir=gs://{BUCKET}/out', '--max_error_ratio=0.1',
                                 '--reads_in_flight=8', NO_LEAKAGE_CHECK, read_latency=0.01)
    assert result.returncode == 0, result.stderr[-3000:]
    assert proxy.max_reads_in_flight > 1
    errors = [json.loads(line) for line in download('out')['errors-train.jsonl'].splitlines()]
    assert len(errors) == 1
    assert errors[0]['source'] == f'gs://{BUCKET}/csvdata/imgs/gone.jpg'
    assert errors[0]['reason'].startswith('cannot read file: 404')


def test_one_worker_lists_many_class_folders_at_once_and_the_output_bytes_stay_the_same(
        gcs, tmp_path):
    source = upload({f'train/c{i % 24:02d}/{i}.jpg': imagemaker.jpeg(40, 30, seed=i)
                     for i in range(48)}, 'classes')
    result, proxy = _run_through(gcs, f'--input_dir={source}', NO_LEAKAGE_CHECK,
                                 f'--output_dir=gs://{BUCKET}/listed', read_latency=0.05)
    assert result.returncode == 0, result.stderr[-3000:]
    convert(f'--input_dir={source}', NO_LEAKAGE_CHECK, f'--output_dir={tmp_path}/local')

    assert proxy.max_in_flight['list'] >= 8   # One at a time before: a round trip per folder.
    assert download('listed') == output_files(f'{tmp_path}/local')


def test_a_chunk_converts_while_the_one_before_is_uploaded_and_the_output_bytes_stay_the_same(
        gcs, tmp_path):
    """Writes that take a round trip: one worker reads the next chunk's images while the last
    chunk's part and sidecar are uploaded (it waited for each upload before), and the commit
    uploads its metadata files at once. A write waits 0.1 s, not 0.3 s, so that the commit's
    writes, one after another, take a third of the time: 379 and 457 reads overlapped an upload
    in two runs (515 with 0.3 s; 6 when each upload was awaited, with 0.3 s)."""
    source = upload({f'train/c{i % 3}/{i}.jpg': imagemaker.jpeg(40, 30, seed=i)
                     for i in range(600)}, 'chunks')   # 5 chunks.
    result, proxy = _run_through(gcs, f'--input_dir={source}',
                                 f'--output_dir=gs://{BUCKET}/uploads', write_latency=0.1)
    assert result.returncode == 0, result.stderr[-3000:]
    convert(f'--input_dir={source}', f'--output_dir={tmp_path}/local')

    assert proxy.overlaps[('read', 'upload')] >= 100   # 515 measured; 6 before.
    assert proxy.max_in_flight['upload'] >= 5   # The commit's metadata files (3 before).
    assert download('uploads') == output_files(f'{tmp_path}/local')


def test_reading_the_flags_lists_each_input_folder_once(gcs):
    """The folder layout and the parquet layouts each look at --input_dir and its split
    folders (three listings of each before)."""
    source = upload({f'{split}/c{i % 2}/{i}.jpg': imagemaker.jpeg(40, 30, seed=i)
                     for split in ('train', 'validation', 'test') for i in range(4)}, 'flags')
    from pipeline import launch, sources
    with through_proxy(gcs) as proxy:
        splits = sources.resolve_source(launch.resolve([f'--input_dir={source}']).converter).splits
    assert splits == ('train', 'validation', 'test')
    assert proxy.operations['list'] == 4   # --input_dir and its three split folders.


def test_split_folders_are_listed_at_once_and_no_size_or_note_is_asked_for_again(gcs, tmp_path):
    """Reads that take a round trip: the launcher and the worker each list the three split
    folders at once (one after another before); a shard's size comes with its compose's answer;
    a committed run neither looks for its progress note nor lists its temp folder again, and
    releases the lock it has just checked without reading it again."""
    source = upload({f'{split}/c0/{i}.jpg': imagemaker.jpeg(40, 30, seed=i)
                     for split in ('train', 'validation', 'test') for i in range(4)}, 'splits')
    result, proxy = _run_through(gcs, f'--input_dir={source}',
                                 f'--output_dir=gs://{BUCKET}/split-out', read_latency=0.05)
    assert result.returncode == 0, result.stderr[-3000:]
    convert(f'--input_dir={source}', f'--output_dir={tmp_path}/local')

    # 6 when each set of three lists overlaps whole; on a loaded machine one may start after
    # another ended. 2 before: the class folders only.
    assert proxy.overlaps[('list', 'list')] >= 4
    # 25 and 19 before: each shard's size after its compose, the progress note, the temp folder
    # once more, and the lock read once more (the lock's release read it again). The progress
    # display's polls of the parts and shards it finds are not counted: how many there are
    # depends on how long the run takes. The commit reads leakage.jsonl back once for the digest
    # summary.json gives it, and the run notes and checks its resume key's tag (a request each).
    assert proxy.operations['get metadata'] <= 23
    polls = sum(n for prefix, n in proxy.listed.items() if prefix.endswith(('/parts/', '/shards/')))
    assert proxy.operations['list'] - polls <= 17
    assert download('split-out') == output_files(f'{tmp_path}/local')

"""Cloud Storage end to end against a real GCS-API emulator on 127.0.0.1 (no credentials)."""
import contextlib
import io
import os

import pytest

from pipeline.output import records
from pipeline.errors import DatasetError
from pipeline.testing import imagemaker
from pipeline.testing.gcs_servers import BUCKET, FlakyProxy, download, upload
from tests.helpers import convert, output_files

IMAGES = {f'{split}/c{c}/{split}{i}.jpg': imagemaker.jpeg(60, 40, seed=c * 50 + i)
          for split in ('train', 'validation') for c in range(3) for i in range(5)}
IMAGES['train/c0/broken.jpg'] = b'\xff\xd8\xff\xe0 not really'
IMAGES['train/c2/photo.png'] = imagemaker.png(300, 280)
# Conversions but the first test's run without the check for copies across splits: what is
# tested is Cloud Storage, and the check's Beam stages take half of a small conversion's time.
NO_LEAKAGE_CHECK = '--leakage=off'


@contextlib.contextmanager
def through_proxy(gcs, every: int = 0, **latency):
    """A FlakyProxy in front of the emulator (`every`: each every-th request answered 503;
    `latency`: read_latency, write_latency), which this process's Cloud Storage clients talk to
    inside the block, as a process started with STORAGE_EMULATOR_HOST at the proxy would: the
    product's one client per process (pipeline/io/gcs.py) is made anew for the block and the
    emulator's is back after it; Beam and the tests make a client per use, from the
    environment."""
    from pipeline.io import gcs as gcs_client
    proxy = FlakyProxy(int(gcs.endpoint.rsplit(':', 1)[1]), every=every, **latency)
    emulator, client = os.environ['STORAGE_EMULATOR_HOST'], gcs_client._CLIENT
    os.environ['STORAGE_EMULATOR_HOST'] = f'http://127.0.0.1:{proxy.port}'
    gcs_client._CLIENT = None
    try:
        yield proxy
    finally:
        os.environ['STORAGE_EMULATOR_HOST'] = emulator
        gcs_client._CLIENT = client
        proxy.stop()


def _records(files: dict, split: str) -> list[dict]:
    """The records of a split's shards among `files` ({name: bytes}), in order, read without
    TensorFlow: {feature: value}, text as str, bytes as bytes (image/encoded)."""
    return [{name: value.decode() if records.IMAGE_FEATURES.get(name) == 'text' else value
             for name, [value] in records.decode_example(data).items()}
            for name, shard in sorted(files.items()) if f'-{split}.tfrecord-' in name
            for data in records.read_records(io.BytesIO(shard))]


def _error(*argv) -> str:
    with pytest.raises(Exception) as info:
        convert(*argv)
    return DatasetError.find_in(info.value)


@pytest.mark.slow
def test_folder_on_gcs_to_gcs_matches_local_output_byte_for_byte(gcs, tmp_path):
    source = upload(IMAGES, 'raw')
    flags = [f'--input_dir={source}', '--num_shards=2', '--max_error_ratio=0.2']
    summary = convert(*flags, f'--output_dir=gs://{BUCKET}/out')
    convert(*flags, f'--output_dir={tmp_path}/local')
    remote = download('out')
    assert remote == output_files(f'{tmp_path}/local')
    assert sorted(n for n in remote if 'train.tfrecord' in n) == [
        'dataset-train.tfrecord-00000-of-00002', 'dataset-train.tfrecord-00001-of-00002']
    assert not any(n.startswith('.tmp-') for n in remote)
    train = _records(remote, 'train')
    assert len(train) == summary['splits']['train']['records'] == 16
    assert {r[records.SOURCE] for r in train} >= {f'{source}/train/c2/photo.png'}
    by_name = {r[records.FILENAME]: r for r in train}
    assert by_name['train3.jpg'][records.ENCODED] in IMAGES.values()
    assert (by_name['photo.png'][records.HEIGHT], by_name['photo.png'][records.WIDTH]) == (280, 300)
    assert b'broken.jpg' in remote['errors-train.jsonl']
    assert remote['labels.txt'] == b'c0\nc1\nc2\n'


@pytest.mark.slow
def test_multi_process_workers_read_and_write_gcs(gcs):
    source = upload({k: v for k, v in IMAGES.items() if 'broken' not in k}, 'raw')
    convert(f'--input_dir={source}', f'--output_dir=gs://{BUCKET}/mp', '--num_shards=3',
            NO_LEAKAGE_CHECK,
            runner_flags=['--direct_running_mode=multi_processing', '--direct_num_workers=2'])
    remote = download('mp')
    assert len(_records(remote, 'train')) == 16
    assert len(_records(remote, 'validation')) == 15


@pytest.mark.slow
def test_csv_on_gcs_with_gcs_and_relative_uris(gcs):
    upload({'imgs/a.jpg': IMAGES['train/c0/train0.jpg'], 'imgs/b.jpg': IMAGES['train/c1/train0.jpg']},
           'csvdata')
    upload({'train.csv': f'uri,label\nimgs/a.jpg,x\ngs://{BUCKET}/csvdata/imgs/b.jpg,y\n'.encode()},
           'csvdata')
    convert(f'--csv_train=gs://{BUCKET}/csvdata/train.csv', f'--output_dir=gs://{BUCKET}/csvout',
            NO_LEAKAGE_CHECK)
    rows = _records(download('csvout'), 'train')
    assert sorted((r[records.FILENAME], r[records.TEXT]) for r in rows) == [('a.jpg', 'x'), ('b.jpg', 'y')]


@pytest.mark.slow
def test_config_yielding_gfile_objects_for_gcs_paths(gcs):
    import tensorflow as tf
    from pipeline.inputs.classic_config import ImageClassificationConfig
    upload({'p/1.jpg': IMAGES['train/c0/train1.jpg'], 'p/2.jpg': IMAGES['train/c1/train1.jpg']}, 'cfg')

    class GcsConfig(ImageClassificationConfig):
        num_labels, supported_modes = 2, ['train']

        def example_generator(self, mode):
            for i, label in ((1, 'one'), (2, 'two')):
                # GFile opens lazily; the worker reads the path itself through Beam.
                yield {'image_fobj': tf.io.gfile.GFile(f'gs://{BUCKET}/cfg/p/{i}.jpg', 'rb'),
                       'label': label}

    convert(f'--output_dir=gs://{BUCKET}/cfgout', NO_LEAKAGE_CHECK, config=GcsConfig())
    rows = _records(download('cfgout'), 'train')
    assert sorted(r[records.ENCODED] for r in rows) == sorted(
        [IMAGES['train/c0/train1.jpg'], IMAGES['train/c1/train1.jpg']])


@pytest.mark.slow
def test_failed_run_leaves_no_final_named_shards_on_gcs(gcs):
    """The run fails in its commit step (one broken image, no errors allowed), after every
    shard was written: nothing final-named appears, the finished shards wait for a rerun."""
    source = upload(IMAGES, 'raw')
    message = _error(f'--input_dir={source}', f'--output_dir=gs://{BUCKET}/failed',
                     '--num_shards=4', '--max_error_ratio=0', NO_LEAKAGE_CHECK)
    assert message.startswith("1 of 17 inputs of split 'train' (5.9%) could not be converted")
    left = download('failed')
    assert [n for n in left if not n.startswith('.tmp-')] == []
    assert len([n for n in left if '/shards/' in n and n.endswith('.tfrecord')]) == 4 + 4


@pytest.mark.slow
def test_overwrite_refusal_and_missing_bucket_on_gcs(gcs):
    source = upload({k: v for k, v in IMAGES.items() if k.startswith('validation/')}, 'raw')
    convert(f'--input_dir={source}', f'--output_dir=gs://{BUCKET}/ow', '--num_shards=3',
            NO_LEAKAGE_CHECK)
    message = _error(f'--input_dir={source}', f'--output_dir=gs://{BUCKET}/ow')
    assert message.startswith(f'gs://{BUCKET}/ow already holds a dataset (')
    convert(f'--input_dir={source}', f'--output_dir=gs://{BUCKET}/ow', '--num_shards=1',
            '--overwrite', NO_LEAKAGE_CHECK)
    assert sorted(n for n in download('ow') if 'tfrecord' in n) == [
        'dataset-validation.tfrecord-00000-of-00001']
    assert _error(f'--input_dir={source}', '--output_dir=gs://no-such-bucket/x') == (
        'bucket gs://no-such-bucket does not exist (for gs://no-such-bucket/x); create it '
        '(gcloud storage buckets create gs://no-such-bucket) or fix the path')
    assert _error('--input_dir=gs://no-such-bucket/raw', f'--output_dir=gs://{BUCKET}/x') == (
        'bucket gs://no-such-bucket does not exist (for gs://no-such-bucket/raw); create it '
        '(gcloud storage buckets create gs://no-such-bucket) or fix the path')
    assert _error(f'--input_dir=gs://{BUCKET}/nothing-here', f'--output_dir=gs://{BUCKET}/x') == (
        f'gs://{BUCKET}/nothing-here has no split folders; expected '
        f'gs://{BUCKET}/nothing-here/train/<class>/<image> (and/or validation/ or val/, test/; '
        'each may be a .tar, .tar.gz or .zip)')


@pytest.mark.slow
def test_transient_503s_are_retried(gcs, monkeypatch):
    """Every 4th request is answered 503 and sent again after a backoff: Google's
    (google-api-core's exponential_sleep_generator) at a hundredth of its seconds here, since
    what is tested is that the requests are retried, not how long each waits (0.5 s on average
    before a first retry: over 30 s for the 60-odd 503s of this run)."""
    from google.api_core.retry import retry_unary
    backoff = retry_unary.exponential_sleep_generator
    monkeypatch.setattr(retry_unary, 'exponential_sleep_generator',
                        lambda initial, maximum, *args, **kwargs: backoff(
                            initial / 100, maximum / 100, *args, **kwargs))
    source = upload({k: v for k, v in IMAGES.items() if 'broken' not in k}, 'raw')
    with through_proxy(gcs, every=4) as proxy:
        convert(f'--input_dir={source}', f'--output_dir=gs://{BUCKET}/flaky', '--num_shards=2',
                NO_LEAKAGE_CHECK)
    assert proxy.failures >= 5
    remote = download('flaky')
    assert len(_records(remote, 'train')) == 16
    assert remote['errors-train.jsonl'] == b''


def test_concatenate_composes_long_lists_in_order_and_cleans_up(gcs):
    from pipeline.io import fileio
    parts = {f'parts/p{i:03d}': f'<{i}>'.encode() for i in range(70)}
    upload(parts, 'cat')
    joined = b''.join(parts[k] for k in sorted(parts))
    size = fileio.concatenate([f'gs://{BUCKET}/cat/{k}' for k in sorted(parts)],
                              f'gs://{BUCKET}/cat/joined')
    assert size == len(joined) == fileio.size(f'gs://{BUCKET}/cat/joined')
    assert download('cat') == {'joined': joined, **parts}


def test_a_new_object_takes_one_request_up_to_8_mb_and_a_failed_write_leaves_none(gcs):
    from pipeline.io import fileio
    from pipeline.testing.gcs_servers import WRITES
    with through_proxy(gcs) as proxy:
        fileio.write_bytes(f'gs://{BUCKET}/new/small', b'x' * (8 << 20))
        with pytest.raises(RuntimeError):
            with fileio.writing(f'gs://{BUCKET}/new/failed') as out:
                out.write(b'half of it')
                raise RuntimeError
    assert {kind: proxy.operations[kind] for kind in WRITES} == {
        'upload': 1, 'compose': 0, 'copy': 0, 'delete': 0}
    large = os.urandom((8 << 20) + 1)   # Streamed through a resumable upload.
    fileio.write_bytes(f'gs://{BUCKET}/new/large', large)
    assert download('new') == {'small': b'x' * (8 << 20), 'large': large}

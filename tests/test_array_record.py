"""ArrayRecord output: the same records and shards as TFRecord, read back with ArrayRecord's own
reader, Grain and TFDS, locally and on the Cloud Storage emulator; verify; crash and rerun."""
import json
import os
import signal

import pytest
import simplejpeg
from array_record.python.array_record_module import ArrayRecordReader

from pipeline.output import array_records, records
from pipeline.errors import DatasetError
from pipeline.readers import grain_data
from pipeline.tools.verify import main as verify_main, verify
from pipeline.testing import imagemaker
from pipeline.testing.gcs_servers import BUCKET, download, upload
from tests.helpers import IN_PROCESS, cli, convert, killed_at, output_files, write_tree

pytestmark = pytest.mark.slow   # Every test reads a dataset converted once per module.

IMAGES = {f'{split}/c{c}/{i}.jpg': imagemaker.jpeg(40 + i, 30, seed=100 * c + i + len(split))
          for split in ('train', 'test') for c in range(3) for i in range(12)}
IMAGES['train/c1/broken.jpg'] = b'not an image'
# Without the check for copies across splits (--leakage=off): what is tested is the shards'
# format, and the check's Beam stages take half of a small conversion's time.
FLAGS = ['--num_shards=3', '--max_error_ratio=0.1', '--leakage=off']


def _tfrecords(path: str) -> list[bytes]:
    with open(path, 'rb') as stream:
        return list(records.read_records(stream))


def _shards(out: str, split: str, file_format: str) -> list[str]:
    return sorted(os.path.join(out, n) for n in os.listdir(out) if f'-{split}.{file_format}-' in n)


@pytest.fixture(scope='module')
def outputs(tmp_path_factory):
    """One input converted to TFRecord, to ArrayRecord, and to both in one run."""
    root = tmp_path_factory.mktemp('array_record')
    inputs = write_tree(root / 'in', IMAGES)
    outs = {}
    for name, formats in [('tf', 'tfrecord'), ('ar', 'array_record'),
                          ('both', 'tfrecord,array_record')]:
        outs[name] = str(root / name)
        convert(f'--input_dir={inputs}', *FLAGS, f'--output_format={formats}',
                f'--output_dir={outs[name]}')
    outs['inputs'] = inputs
    return outs


def test_array_record_shards_hold_the_tfrecord_records_in_the_same_order(outputs):
    tf_out, ar_out = outputs['tf'], outputs['ar']
    assert [os.path.basename(p) for p in _shards(ar_out, 'train', 'array_record')] == [
        f'dataset-train.array_record-0000{i}-of-00003' for i in range(3)]
    info = json.load(open(os.path.join(ar_out, 'dataset_info.json')))
    assert info['fileFormat'] == 'array_record' and 'alternativeFileFormats' not in info
    for split in ('train', 'test'):
        tf_shards, ar_shards = _shards(tf_out, split, 'tfrecord'), _shards(ar_out, split, 'array_record')
        assert len(tf_shards) == len(ar_shards) == 3
        for tf_path, ar_path in zip(tf_shards, ar_shards):
            expected = _tfrecords(tf_path)
            reader = ArrayRecordReader(ar_path, 'readahead_buffer_size:0')
            assert reader.num_records() == len(expected) > 0
            assert 'group_size:1,' in reader.writer_options_string()
            for i in reversed(range(len(expected))):   # Random access, back to front.
                assert reader.read([i]) == [expected[i]]
    tf_summary = json.load(open(os.path.join(tf_out, 'summary.json')))
    ar_summary = json.load(open(os.path.join(ar_out, 'summary.json')))
    assert ar_summary['file_formats'] == ['array_record']
    assert ar_summary['splits']['train']['skipped'] == 1
    for split in ('train', 'test'):
        for key in ('inputs', 'records', 'skipped', 'shards', 'classes'):
            assert ar_summary['splits'][split][key] == tf_summary['splits'][split][key]
        assert ar_summary['splits'][split]['bytes'] == sum(
            os.path.getsize(p) for p in _shards(ar_out, split, 'array_record'))


def test_both_formats_in_one_run_equal_the_single_format_runs_byte_for_byte(outputs):
    both = output_files(outputs['both'])
    shards = {n: data for n, data in both.items() if '.tfrecord-' in n or '.array_record-' in n}
    singles = {**output_files(outputs['tf']), **output_files(outputs['ar'])}
    assert len(shards) == 12
    assert shards == {n: singles[n] for n in shards}
    info = json.loads(both['dataset_info.json'])
    assert info['fileFormat'] == 'tfrecord' and info['alternativeFileFormats'] == ['array_record']
    assert verify(outputs['both'], processes=1) == []


def test_grain_reads_every_record_once_per_epoch_in_a_seeded_global_shuffle(outputs):
    ar_out = outputs['ar']
    expected = {}   # Image pixels -> (sha256, label), in shard order.
    for path in _shards(ar_out, 'train', 'array_record'):
        for data in ArrayRecordReader(path).read_all():
            example = records.decode_example(data)
            image = simplejpeg.decode_jpeg(example[records.ENCODED][0], colorspace='RGB')
            expected[image.tobytes()] = (example[records.SHA256][0], example[records.LABEL][0])
    assert len(expected) == 36

    def keys(ds) -> list[bytes]:
        found = []
        for element in ds:
            key, label = expected[element['image'].tobytes()]
            assert element['label'] == label
            found.append(key)
        return found

    in_shard_order = [key for key, _ in expected.values()]
    assert keys(grain_data.dataset(ar_out, 'train')) == in_shard_order
    epochs = keys(grain_data.dataset(ar_out, 'train', seed=7, num_epochs=2))
    first, second = epochs[:36], epochs[36:]
    for epoch in (first, second):   # Every record exactly once per epoch.
        assert len(epoch) == 36 and set(epoch) == set(in_shard_order)
    assert first != in_shard_order and second != first   # Shuffled, and anew each epoch.
    assert keys(grain_data.dataset(ar_out, 'train', seed=7)) == first   # Same seed, same order.
    assert keys(grain_data.dataset(ar_out, 'train', seed=8)) != first
    hosts = [keys(grain_data.dataset(ar_out, 'train', seed=7, shard_index=i, shard_count=2))
             for i in range(2)]
    assert len(hosts[0]) == len(hosts[1]) == 18
    assert set(hosts[0]) | set(hosts[1]) == set(in_shard_order)


def test_tfds_as_data_source_gives_random_access_and_as_dataset_reads_tfrecord(outputs):
    import tensorflow_datasets as tfds
    both = outputs['both']
    source = tfds.builder_from_directory(both).as_data_source(split='train')
    expected = [records.decode_example(r)
                for p in _shards(both, 'train', 'tfrecord') for r in _tfrecords(p)]
    assert len(source) == len(expected) == 36
    for i in (35, 0, 17):
        example = source[i]   # Keyed as the records: image/class/label, ...
        assert example[records.LABEL] == expected[i][records.LABEL][0]
        assert example[records.ENCODED].shape == (expected[i][records.HEIGHT][0],
                                                  expected[i][records.WIDTH][0], 3)
        assert example[records.FILENAME] == expected[i][records.FILENAME][0]
    ds = tfds.builder_from_directory(both).as_dataset(split='train')
    assert [e[records.FILENAME] for e in ds.as_numpy_iterator()] == [
        e[records.FILENAME][0] for e in expected]
    only = tfds.builder_from_directory(outputs['ar']).as_data_source(split='test')
    assert len(only) == 36


def test_verify_finds_a_flipped_byte_and_a_missing_array_record_shard(outputs, tmp_path):
    assert verify(outputs['ar'], processes=1) == []
    copy = str(tmp_path / 'copy')
    os.makedirs(copy)
    for name, data in output_files(outputs['ar']).items():
        with open(os.path.join(copy, name), 'wb') as stream:
            stream.write(data)
    damaged, missing = _shards(copy, 'train', 'array_record')[1], _shards(copy, 'test', 'array_record')[2]
    with open(damaged, 'r+b') as stream:   # Flip a bit inside the fifth record's image.
        data = stream.read()
        record = ArrayRecordReader(damaged).read([4])[0]
        at = data.index(record[-200:-100])
        stream.seek(at)
        stream.write(bytes([data[at] ^ 0x20]))
    os.remove(missing)
    problems = verify(copy, processes=1)
    assert f'{os.path.basename(missing)}: missing shard' in problems
    flipped = [p for p in problems if p.startswith(f'train shard 1 ({os.path.basename(damaged)})')]
    assert flipped and any('hash mismatch' in p or 'Corrupted' in p for p in flipped), problems


def test_verify_finds_an_array_record_shard_that_differs_from_its_tfrecord_twin(outputs, tmp_path):
    copy = str(tmp_path / 'copy')
    os.makedirs(copy)
    for name, data in output_files(outputs['both']).items():
        with open(os.path.join(copy, name), 'wb') as stream:
            stream.write(data)
    shard = _shards(copy, 'train', 'array_record')[0]
    reordered = list(reversed(ArrayRecordReader(shard).read_all()))   # Sound records, wrong order.
    os.remove(shard)
    array_records.write_file(reordered, shard)
    assert verify(copy, processes=1) == [
        f'train shard 0 ({os.path.basename(shard)}): records differ from '
        'dataset-train.tfrecord-00000-of-00003']


def test_verify_finds_two_records_swapped_in_an_array_record_only_shard(outputs, tmp_path,
                                                                       capsys):
    """Its first record and, written anew by the same writer, its bytes as the run wrote."""
    copy = str(tmp_path / 'copy')
    os.makedirs(copy)
    for name, data in output_files(outputs['ar']).items():
        with open(os.path.join(copy, name), 'wb') as stream:
            stream.write(data)
    shard = _shards(copy, 'train', 'array_record')[0]
    found = ArrayRecordReader(shard).read_all()
    found[-2:] = found[:-3:-1]
    os.remove(shard)
    array_records.write_file(found, shard)
    code = verify_main([copy, '--processes=1'])
    stderr = capsys.readouterr().err
    assert code == 1, stderr
    assert stderr.splitlines() == [
        f'train shard 0 ({os.path.basename(shard)}): its records are not those the run wrote '
        'there, in that order (summary.json: shards swapped, records reordered or replaced?)']


def test_readers_say_which_format_a_dataset_lacks(outputs):
    from pipeline.readers import tf_data
    with pytest.raises(DatasetError, match='ArrayRecord shards only; read them with'):
        tf_data.dataset(outputs['ar'], 'train')
    with pytest.raises(DatasetError, match='has no ArrayRecord shards'):
        grain_data.data_source(outputs['tf'], 'train')
    with pytest.raises(Exception) as info:
        convert('--input_dir=x', '--output_dir=y', '--output_format=tfrecord,arrayrecord')
    assert DatasetError.find_in(info.value) == (
        "--output_format: unknown format 'arrayrecord'; choose from tfrecord, array_record "
        '(did you mean array_record?)')


def test_kill_after_writing_shards_then_rerun_gives_identical_files(outputs, tmp_path):
    flags = [f'--input_dir={outputs["inputs"]}', *FLAGS, '--output_format=array_record',
             *IN_PROCESS, f'--output_dir={tmp_path}/out']
    killed = killed_at('shard:2', *flags)
    assert killed.returncode == -signal.SIGKILL
    temp = [n for n in os.listdir(tmp_path / 'out') if n.startswith('.tmp-')][0]
    assert len([n for n in os.listdir(tmp_path / 'out' / temp / 'shards')
                if n.endswith('.array_record.json')]) == 2
    rerun = cli(*flags)
    assert rerun.returncode == 0, rerun.stderr
    assert 'an earlier attempt finished' in rerun.stderr and ' and 2 shards' in rerun.stderr
    assert output_files(f'{tmp_path}/out') == output_files(outputs['ar'])


def test_array_record_on_cloud_storage_matches_local_and_reads_back(gcs, outputs, tmp_path):
    source = upload({k: v for k, v in IMAGES.items()}, 'raw')
    flags = [f'--input_dir={source}', *FLAGS, '--output_format=array_record']
    convert(*flags, f'--output_dir=gs://{BUCKET}/ar')
    convert(*flags, f'--output_dir={tmp_path}/local')
    remote = download('ar')
    assert remote == output_files(f'{tmp_path}/local')
    assert sum('.array_record-' in n for n in remote) == 6
    out = f'gs://{BUCKET}/ar'
    assert verify(out, processes=1) == []
    labels = sorted(int(e['label']) for e in grain_data.dataset(out, 'test', seed=1))
    assert labels == [0] * 12 + [1] * 12 + [2] * 12

"""Never lose a dataset: kills at chosen instants, the output lock, and resume after a crash.

Conversions run as real subprocesses; a kill is a real SIGKILL, either from outside (the whole
process group) or at an exact point through IMAGE_TFRECORDS_KILL_AT (pipeline/faults.py).
"""
import glob
import json
import os
import shutil
import signal
import socket
import time

import pytest

from pipeline.output import layout, output_lock, records
from pipeline.errors import DatasetError
from pipeline.testing import imagemaker
from pipeline.testing.gcs_servers import BUCKET, download, upload
from tests.helpers import (IN_PROCESS, cli, convert, killed_at, output_files, read_files, run_cli,
                           start_cli)

MULTI = ['--direct_running_mode=multi_processing', '--direct_num_workers=2']
# Without the check for copies across splits (--leakage=off) where what is tested is the run id,
# the lock and the cleaning of temporary folders: the check's Beam stages take half of a small
# conversion's time. The kills that the rerun must resume byte-identical (in the commit, of the
# process tree, after chunks reused or made again; on local disk and on Cloud Storage) keep it.
NO_LEAKAGE_CHECK = '--leakage=off'


def _images(n: int, classes: int = 3) -> dict:
    return {f'train/c{i % classes}/{i}.jpg': imagemaker.jpeg(24, 16, seed=i) for i in range(n)}


def _info(out) -> dict:
    return json.load(open(os.path.join(out, 'dataset_info.json')))


@pytest.fixture(scope='module')
def inputs(image_folders):
    return image_folders(60)


def _converted(out: str, *flags: str) -> dict:
    """The files a conversion with `flags` writes into `out`."""
    result = cli(*flags, f'--output_dir={out}')
    assert result.returncode == 0, result.stderr
    return output_files(out)


@pytest.fixture(scope='module')
def reference(inputs, tmp_path_factory) -> dict:
    """The files of `inputs` converted into 3 shards, uninterrupted."""
    return _converted(str(tmp_path_factory.mktemp('reference')), f'--input_dir={inputs}',
                      '--num_shards=3')


@pytest.mark.slow
@pytest.mark.parametrize('kill_at,left', [
    ('commit:journal', 'old'),          # Journal written, nothing moved yet.
    ('commit:replace:1', 'neither'),    # The old dataset_info.json moved aside.
    ('commit:install:1', 'neither'),    # New shards in place, no dataset_info.json yet.
])
def test_kill_in_commit_then_rerun_completes_it_byte_identical(tmp_path, inputs, reference,
                                                               kill_at, left):
    flags = [f'--input_dir={inputs}', '--num_shards=3', *IN_PROCESS]
    out = str(tmp_path / 'out')
    _converted(out, flags[0], '--num_shards=2', '--dataset_name=old')
    killed = killed_at(kill_at, *flags, f'--output_dir={out}', '--overwrite')
    assert killed.returncode == -signal.SIGKILL
    names = os.listdir(out)
    assert '.commit.json' in names and '.lock' in names
    if left == 'old':
        assert _info(out)['name'] == 'old'
        assert sorted(n for n in names if 'tfrecord' in n) == [
            'old-train.tfrecord-00000-of-00002', 'old-train.tfrecord-00001-of-00002']
    else:
        assert 'dataset_info.json' not in names
    from pipeline.tools.verify import main as verify_main
    assert verify_main([out]) == 2   # "interrupted commit": rerun to complete it.

    rerun = cli(*flags, f'--output_dir={out}', '--overwrite')
    assert rerun.returncode == 0, rerun.stderr
    assert 'taking over (its process is gone)' in rerun.stderr
    assert 'completed the interrupted commit of run ' in rerun.stderr
    assert output_files(out) == reference
    assert not any(n.startswith('.') for n in os.listdir(out))


@pytest.mark.slow
def test_kill_while_converting_then_rerun_resumes_byte_identical(tmp_path, image_folders):
    """A real SIGKILL of the whole process tree once the first chunks are written."""
    flags = [f'--input_dir={image_folders(900)}', '--num_shards=4']
    reference = _converted(str(tmp_path / 'reference'), *flags)
    out = str(tmp_path / 'out')
    process = start_cli(*flags, *MULTI, f'--output_dir={out}')
    deadline = time.monotonic() + 120
    # A chunk that falls in two shards writes two parts, so one part does not mean one finished
    # chunk. Parts of three chunks do: two worker processes convert at most two at a time.
    while (len({layout.chunk_of_part(p) for p in glob.glob(f'{out}/.tmp-*/parts/*.json')}) < 3
           and time.monotonic() < deadline):
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not [n for n in os.listdir(out) if 'tfrecord' in n]   # Nothing final-named.
    rerun = cli(*flags, f'--output_dir={out}')
    assert rerun.returncode == 0, rerun.stderr
    assert 'resuming run ' in rerun.stderr
    reused = int(rerun.stdout.split('reused ')[1].split(' of ')[0])
    assert reused >= 1
    assert output_files(out) == reference


def _first_source_of_a_part(out: str) -> str:
    """An input of a finished chunk: a part with its sidecar (the next chunk's part may be open)."""
    sidecar = sorted(glob.glob(f'{out}/.tmp-*/parts/*.tfrecord.json'))[0]
    return read_files([sidecar.removesuffix('.json')])[0][records.SOURCE]


@pytest.mark.slow
def test_resume_reuses_exactly_the_unchanged_chunks(tmp_path, image_folders):
    inputs = shutil.copytree(image_folders(600), tmp_path / 'in')   # 5 chunks of about 128.
    flags = [f'--input_dir={inputs}', '--num_shards=4', *IN_PROCESS]
    out = str(tmp_path / 'out')
    assert killed_at('chunk:3', *flags, f'--output_dir={out}').returncode == -signal.SIGKILL
    parts = glob.glob(f'{out}/.tmp-*/parts/*.json')
    assert len({layout.chunk_of_part(p) for p in parts}) == 3
    changed = _first_source_of_a_part(out)   # Replace one input of a finished chunk.
    with open(changed, 'wb') as stream:
        stream.write(imagemaker.jpeg(24, 16, seed=9999))
    rerun = cli(*flags, f'--output_dir={out}')
    assert rerun.returncode == 0, rerun.stderr
    assert 'an earlier attempt finished 3 chunks and 0 shards' in rerun.stderr
    assert 'reused 2 of 5 chunks' in rerun.stdout
    assert output_files(out) == _converted(str(tmp_path / 'reference'), *flags)


@pytest.mark.slow
def test_per_run_settings_keep_the_run_so_a_rerun_with_them_changed_resumes(tmp_path,
                                                                           image_folders):
    """The run id fingerprints what shapes the bytes; the description (dataset_info.json's
    text), the error threshold and the read-ahead do not, so changing them keeps the work."""
    inputs = image_folders(600)
    flags = [f'--input_dir={inputs}', f'--output_dir={tmp_path / "out"}', '--num_shards=4',
             *IN_PROCESS, NO_LEAKAGE_CHECK]
    killed = killed_at('chunk:3', *flags, '--description=first')
    assert killed.returncode == -signal.SIGKILL
    rerun = cli(*flags, '--description=second', '--max_error_ratio=0.5', '--reads_in_flight=4')
    assert rerun.returncode == 0, rerun.stderr
    assert 'an earlier attempt finished 3 chunks and 0 shards' in rerun.stderr
    assert 'reused 3 of 5 chunks' in rerun.stdout
    assert _info(tmp_path / 'out')['description'] == 'second'
    again = cli(*flags, '--description=third')   # Finished: only --overwrite replaces it.
    assert again.returncode == 2 and 'already holds a dataset' in again.stderr


@pytest.mark.slow
def test_changed_option_reuses_nothing_and_names_the_other_temp_folder(tmp_path, inputs):
    out = str(tmp_path / 'out')
    flags = [f'--input_dir={inputs}', f'--output_dir={out}', *IN_PROCESS, NO_LEAKAGE_CHECK]
    assert killed_at('chunk:1', *flags, '--num_shards=2').returncode == -signal.SIGKILL
    other = glob.glob(f'{out}/.tmp-*')[0]
    rerun = cli(*flags, '--num_shards=2', '--jpeg_quality=80')
    assert rerun.returncode == 0 and 'reused' not in rerun.stdout
    assert f'holds temporary folders of runs with other options: {os.path.basename(other)} (' \
        in rerun.stderr and '--clean_temp removes them' in rerun.stderr
    assert os.path.isdir(other)
    cleaned = cli(*flags, '--num_shards=2', '--jpeg_quality=70', '--overwrite')
    assert cleaned.returncode == 0
    assert f'removed temporary folders of unfinished runs: {os.path.basename(other)} (' \
        in cleaned.stderr
    assert not [n for n in os.listdir(out) if n.startswith('.')]


@pytest.mark.slow
def test_clean_temp_discards_this_runs_own_earlier_work(tmp_path, inputs):
    out = str(tmp_path / 'out')
    flags = [f'--input_dir={inputs}', f'--output_dir={out}', '--num_shards=2', *IN_PROCESS,
             NO_LEAKAGE_CHECK]
    assert killed_at('chunk:1', *flags).returncode == -signal.SIGKILL
    own = os.path.basename(glob.glob(f'{out}/.tmp-*')[0])
    rerun = cli(*flags, '--clean_temp')
    assert rerun.returncode == 0, rerun.stderr
    assert f'removed temporary folders of unfinished runs: {own} (' in rerun.stderr
    assert 'resuming' not in rerun.stderr and 'reused' not in rerun.stdout


@pytest.mark.slow
def test_two_runs_into_one_folder_one_is_refused_by_the_lock(tmp_path, image_folders):
    inputs = image_folders(900)
    out = str(tmp_path / 'out')
    first = start_cli(f'--input_dir={inputs}', f'--output_dir={out}', '--num_shards=4', *MULTI,
                      NO_LEAKAGE_CHECK)
    deadline = time.monotonic() + 60
    while not os.path.exists(f'{out}/.lock') and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(first.pid, signal.SIGSTOP)   # Held, so that it cannot finish before the second asks.
    try:
        second = cli(f'--input_dir={inputs}', f'--output_dir={out}', '--num_shards=3',
                     NO_LEAKAGE_CHECK)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr
    assert second.returncode == 2
    error = second.stderr.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(f'error: {out} is being written by another '
                                                   f'run: run ')
    assert f'on host {socket.gethostname()}, pid {first.pid}, started ' in error[0]
    assert error[0].endswith(f'its lock is {out}/.lock. Its process is running on this '
                             'machine: wait for it to end (--break_lock never takes the lock of '
                             'a running process; if that process is not a run of this tool, '
                             f'move {out}/.lock away and rerun)')
    assert sorted(n for n in os.listdir(out) if 'tfrecord' in n) == [
        f'dataset-train.tfrecord-0000{i}-of-00004' for i in range(4)]
    assert '900 inputs' in stdout and not os.path.exists(f'{out}/.lock')


@pytest.mark.slow
def test_lock_of_another_host_is_refused_until_broken(tmp_path, inputs):
    out = tmp_path / 'out'
    out.mkdir()
    holder = {'token': 'x', 'run_id': 'abc', 'host': 'elsewhere', 'pid': 1,
              'started': '2026-01-01T00:00:00+00:00', 'runner': 'DirectRunner', 'waits': True}
    (out / '.lock').write_text(json.dumps(holder))
    with pytest.raises(DatasetError) as info:
        convert(f'--input_dir={inputs}', f'--output_dir={out}', NO_LEAKAGE_CHECK)
    assert str(info.value) == (
        f'{out} is being written by another run: run abc on host elsewhere, pid 1, started '
        f'2026-01-01T00:00:00+00:00 (DirectRunner); its lock is {out}/.lock. Wait for it, or if '
        'it is not running any more, pass --break_lock')
    summary = convert(f'--input_dir={inputs}', f'--output_dir={out}', '--break_lock',
                      NO_LEAKAGE_CHECK)
    assert summary['splits']['train']['records'] == 60 and not (out / '.lock').exists()


@pytest.mark.slow
def test_commit_rechecks_the_folder_under_the_lock(tmp_path, inputs):
    """A dataset that appears after the launch (written by a tool that ignores the lock) is
    not replaced without --overwrite."""
    from pipeline import job as jobs
    out = str(tmp_path / 'out')
    job = jobs.prepare([f'--input_dir={inputs}', f'--output_dir={out}', *IN_PROCESS,
                        NO_LEAKAGE_CHECK])
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, 'dataset_info.json'), 'w') as stream:
        stream.write('{"name": "other", "moduleName": "image_tfrecords", "splits": []}')
    with open(os.path.join(out, 'summary.json'), 'w') as stream:
        stream.write('{"dataset": "other", "run_id": "0123456789abcdef", "splits": {}}')
    try:
        with pytest.raises(Exception) as info:
            job.pipeline.run().wait_until_finish()
    finally:
        output_lock.release(out, job.settings.lock_token)
    assert DatasetError.find_in(info.value) == (
        f'{out} now holds a dataset (2 files, e.g. dataset_info.json) that was not there when '
        'this run started; nothing was committed. Pass --overwrite to replace it')
    assert _info(out) == {'name': 'other', 'moduleName': 'image_tfrecords', 'splits': []}


@pytest.mark.slow
def test_kill_in_commit_on_cloud_storage_then_rerun(gcs, tmp_path):
    source = upload(_images(40), 'raw')
    flags = [f'--input_dir={source}', '--num_shards=2', *IN_PROCESS]
    local = _converted(f'{tmp_path}/local', *flags)
    out = f'gs://{BUCKET}/out'
    old = cli(flags[0], '--num_shards=3', '--dataset_name=old', f'--output_dir={out}')
    assert old.returncode == 0, old.stderr
    killed = run_cli(*flags, f'--output_dir={out}', '--overwrite', kill_at='commit:replace:1')
    assert killed.returncode == -signal.SIGKILL
    remote = download('out')
    assert '.commit.json' in remote and 'dataset_info.json' not in remote
    rerun = cli(*flags, f'--output_dir={out}', '--overwrite')
    assert rerun.returncode == 0, rerun.stderr
    assert 'completed the interrupted commit' in rerun.stderr
    assert download('out') == local


def test_lock_on_cloud_storage_is_exclusive(gcs):
    out = f'gs://{BUCKET}/locked'
    token = output_lock.acquire(out, 'r1', 'DataflowRunner', waits=False)
    with pytest.raises(DatasetError) as info:
        output_lock.acquire(out, 'r2', 'DirectRunner', waits=True)
    assert f'its lock is {out}/.lock' in str(info.value) and '(DataflowRunner)' in str(info.value)
    output_lock.release(out, 'not-the-token')
    assert output_lock.read_lock(out).holder['run_id'] == 'r1'
    output_lock.release(out, token)
    assert output_lock.read_lock(out) is None
    output_lock.release(out, output_lock.acquire(out, 'r2', 'DirectRunner', waits=True))

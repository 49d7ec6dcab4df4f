"""Shared output folders are hostile: crafted journals and locks, look-alike user files, links,
odd class names, lock races, and a kill at every instant of the commit and its cleanup.

Each test runs the command line (in the test's process, or a process of its own where it is
killed) or the protocol's own functions with real files, real processes, real SIGKILLs, and the
Cloud Storage emulator where that path differs.
"""
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from pipeline.output import output_lock
from pipeline.testing import imagemaker
from pipeline.testing.gcs_servers import BUCKET, download, upload
from pipeline.tools.verify import main as verify_main
from tests import lock_race
from tests.helpers import (IN_PROCESS, Answer, cli, killed_at, output_files, run_cli, start_cli,
                           write_tree)

RUN_ID = '0123456789abcdef'
# Conversions run without the check for copies across splits (--leakage=off): what is tested is
# the output folder's protocol, and the check's Beam stages take half of a small conversion's
# time. It stays on where a kill leaves its files behind for the rerun: a kill after a chunk
# whose part is then made again (its records are filed for the check as it is written), after a
# shard, in the install of leakage.jsonl and in the removal of the temporary folder's contents
# (its pairs, links and filed runs), on local disk and on Cloud Storage.
NO_LEAKAGE_CHECK = '--leakage=off'


def _images(n: int = 30, classes: int = 3) -> dict:
    return {f'train/c{i % classes}/{i}.jpg': imagemaker.jpeg(24, 16, seed=i) for i in range(n)}


@pytest.fixture(scope='module')
def inputs(image_folders) -> str:
    """30 images of 3 classes (shared: no test changes them)."""
    return image_folders(30)


@pytest.fixture(scope='module')
def reference_folder(inputs, tmp_path_factory) -> str:
    """The inputs converted without interruption (without the leakage check)."""
    out = str(tmp_path_factory.mktemp('reference') / 'out')
    assert cli(*_flags(inputs, out)).returncode == 0
    return out


@pytest.fixture(scope='module')
def reference(inputs, reference_folder) -> tuple[str, dict]:
    """The inputs, and the files of their dataset converted without interruption (without the
    leakage check)."""
    return inputs, _tree(reference_folder)


@pytest.fixture(scope='module')
def checked_reference(inputs, tmp_path_factory) -> tuple[str, dict]:
    """The inputs, and the files of their dataset converted without interruption with the
    leakage check, as by default."""
    out = str(tmp_path_factory.mktemp('checked-reference') / 'out')
    assert cli(*_flags(inputs, out, check=True)).returncode == 0
    return inputs, _tree(out)


@pytest.fixture
def converted(tmp_path, reference_folder) -> pathlib.Path:
    """tmp_path/out holding the dataset a conversion of the inputs writes there (a copy: no
    file of a dataset names its folder)."""
    return shutil.copytree(reference_folder, tmp_path / 'out')


def _flags(inputs: str, out: str, *more: str, check: bool = False) -> list[str]:
    """The flags of a conversion of `inputs` into `out`: with the leakage check if `check`."""
    return [f'--input_dir={inputs}', f'--output_dir={out}', '--num_shards=2', *IN_PROCESS,
            *_check(check), *more]


def _check(check: bool) -> list[str]:
    """No flag for the leakage check (on by default), or the one that turns it off."""
    return [] if check else [NO_LEAKAGE_CHECK]


def _one_error_line(result: Answer, alone: bool = True) -> str:
    """The error line of a failed run: its only line (`alone`), or its last, after progress."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith('error: ') and 'Traceback' not in result.stderr, result.stderr
    assert len(lines) == 1 or not alone, result.stderr
    return lines[-1]


def _tree(path) -> dict:
    return output_files(str(path))


def _verify(out, capsys) -> tuple[int, str]:
    """`python -m pipeline.verify OUT`, in this process: (exit code, what it wrote to stderr)."""
    capsys.readouterr()
    code = verify_main([str(out)])
    return code, capsys.readouterr().err


# --- 1. Crafted journals touch nothing outside the output ----------------------------------------

def test_journal_naming_files_outside_the_output_is_refused_and_touches_nothing(tmp_path, inputs):
    victim = write_tree(tmp_path / 'victim', {'docs/precious.txt': b'keep', 'secret.txt': b'mine'})
    out = tmp_path / 'out'
    (out / '.tmp-x').mkdir(parents=True)
    (out / '.commit.json').write_text(json.dumps({
        'run_id': 'x', 'phase': 'replace',
        'replace': [[f'{victim}/docs/precious.txt', f'{out}/.tmp-x/replaced/precious.txt']],
        'install': [[f'{victim}/secret.txt', f'{out}/stolen.txt']]}))
    line = _one_error_line(cli(*_flags(inputs, str(out))))
    assert line.startswith(f'error: {out}/.commit.json is not a commit journal this tool wrote (')
    assert line.endswith('nothing was done. If no run of this tool is committing there, delete it '
                         'and rerun')
    assert _tree(victim) == {'docs/precious.txt': b'keep', 'secret.txt': b'mine'}
    assert sorted(os.listdir(out)) == ['.commit.json', '.tmp-x']   # Lock released, nothing new.


@pytest.mark.parametrize('journal', [
    {'run_id': 'y/../../victim2', 'phase': 'install', 'replace': [], 'install': []},
    {'run_id': RUN_ID, 'phase': 'install', 'replace': [],
     'install': [['shards/../../../victim2/a.txt', 'dataset_info.json']]},
    {'run_id': RUN_ID, 'phase': 'replace', 'replace': ['../victim2/a.txt'], 'install': []},
    {'run_id': RUN_ID, 'phase': 'install', 'replace': [],
     'install': [['final/labels.txt', '../victim2/a.txt']]},
    'not json at all',
])
def test_journal_with_other_names_is_refused(tmp_path, inputs, journal, capsys):
    victim = write_tree(tmp_path / 'victim2', {'a.txt': b'keep'})
    out = tmp_path / 'out'
    (out / '.tmp-y').mkdir(parents=True)
    (out / '.commit.json').write_text(journal if isinstance(journal, str) else json.dumps(journal))
    line = _one_error_line(cli(*_flags(inputs, str(out))))
    assert 'is not a commit journal this tool wrote' in line
    assert _tree(victim) == {'a.txt': b'keep'} and (out / '.tmp-y').is_dir()
    code, stderr = _verify(out, capsys)
    assert code == 2 and 'is not a commit journal this tool wrote' in stderr


@pytest.mark.slow
def test_journal_through_links_inside_its_temporary_folder_is_refused(tmp_path, inputs,
                                                                     converted):
    """Valid names, but the marked temporary folder holds links to folders outside."""
    out = converted
    victim = write_tree(tmp_path / 'victim', {'final/labels.txt': b'v', 'replaced/keep': b'k'})
    temp = out / f'.tmp-{RUN_ID}'
    temp.mkdir()
    (temp / '.image-tfrecords-run.json').write_text(json.dumps({'run_id': RUN_ID,
                                                                'state': 'running'}))
    for name in ('final', 'replaced'):
        os.symlink(f'{victim}/{name}', temp / name)
    (out / '.commit.json').write_text(json.dumps({
        'run_id': RUN_ID, 'phase': 'replace', 'replace': ['dataset_info.json', 'summary.json'],
        'install': [['final/labels.txt', 'labels.txt']]}))
    before = _tree(out)
    line = _one_error_line(cli(*_flags(inputs, str(out))))
    assert line.endswith('is a symbolic link; a temporary folder of this tool holds none. Remove '
                         'it and rerun')
    assert _tree(victim) == {'final/labels.txt': b'v', 'replaced/keep': b'k'}
    assert _tree(out) == before


@pytest.mark.slow
def test_journal_whose_temporary_folder_has_no_marker_is_refused(inputs, converted):
    out = converted
    (out / f'.tmp-{RUN_ID}').mkdir()
    (out / '.commit.json').write_text(json.dumps({
        'run_id': RUN_ID, 'phase': 'replace', 'replace': ['dataset_info.json'], 'install': []}))
    before = _tree(out)
    line = _one_error_line(cli(*_flags(inputs, str(out))))
    assert f'(its temporary folder {out}/.tmp-{RUN_ID} has no marker)' in line
    assert _tree(out) == before


def test_journal_on_cloud_storage_naming_another_bucket_prefix_is_refused(gcs, tmp_path):
    source = upload(_images(), 'raw')
    upload({'secret.txt': b'mine'}, 'victim')
    upload({'.commit.json': json.dumps({
        'run_id': RUN_ID, 'phase': 'install', 'replace': [],
        'install': [[f'gs://{BUCKET}/victim/secret.txt', 'stolen.txt']]}).encode()}, 'out')
    line = _one_error_line(cli(f'--input_dir={source}', f'--output_dir=gs://{BUCKET}/out'))
    assert 'is not a commit journal this tool wrote' in line
    assert download('victim') == {'secret.txt': b'mine'}
    assert sorted(download('out')) == ['.commit.json']


# --- 2. The lock: exactly one winner, whatever the race ------------------------------------------

def _dead_pid() -> int:
    process = subprocess.Popen(['true'])
    process.wait()
    return process.pid


def _this_machine() -> dict:
    return {'host': socket.gethostname(),
            'boot_id': open('/proc/sys/kernel/random/boot_id').read().strip(),
            'pid_ns': os.readlink('/proc/self/ns/pid')}


def _stale_lock(pid: int, **machine) -> bytes:
    return json.dumps({'token': 'stale', 'run_id': 'old', **_this_machine(), **machine,
                       'pid': pid, 'started': '2026-01-01T00:00:00+00:00',
                       'runner': 'DirectRunner', 'waits': True}).encode()


@pytest.mark.slow
def test_many_runs_released_together_at_a_stale_lock_leave_exactly_one_holder(tmp_path):
    pid = _dead_pid()
    folders = []
    for i in range(60):
        folder = tmp_path / f'out{i}'
        folder.mkdir()
        (folder / '.lock').write_bytes(_stale_lock(pid))
        folders.append(str(folder))
    outcomes = lock_race.race(folders, 4, RUN_ID)
    for folder, results in outcomes.items():
        assert results.count('won') == 1, (folder, results)
        assert all(r.startswith(f'{folder} is being written by another run: run {RUN_ID} on host ')
                   for r in results if r != 'won'), results
        holder = output_lock.read_lock(folder).holder
        assert holder['run_id'] == RUN_ID and holder['token'] != 'stale'
        assert sorted(os.listdir(folder)) == ['.lock']


@pytest.mark.slow
def test_runs_released_together_at_a_stale_lock_on_cloud_storage_leave_one_holder(gcs):
    pid = _dead_pid()
    names = [f'out{i}' for i in range(15)]
    for name in names:
        upload({'.lock': _stale_lock(pid)}, name)
    folders = [f'gs://{BUCKET}/{name}' for name in names]
    outcomes = lock_race.race(folders, 3, RUN_ID, emulator=os.environ['STORAGE_EMULATOR_HOST'])
    for folder, results in outcomes.items():
        assert results.count('won') == 1, (folder, results)
        assert output_lock.read_lock(folder).holder['token'] != 'stale'


def _foreign_lock() -> bytes:
    return json.dumps({'token': 'far', 'run_id': 'old', 'host': 'elsewhere', 'pid': 1,
                       'started': 's', 'runner': 'DirectRunner', 'waits': True}).encode()


@pytest.mark.slow
def test_runs_that_break_the_same_lock_together_leave_one_holder(tmp_path):
    folders = []
    for i in range(20):
        folder = tmp_path / f'out{i}'
        folder.mkdir()
        (folder / '.lock').write_bytes(_foreign_lock())
        folders.append(str(folder))
    outcomes = lock_race.race(folders, 4, RUN_ID, break_lock=True)
    for folder, found in outcomes.items():
        assert found.count('won') == 1, (folder, found)


def test_break_lock_never_takes_the_lock_of_a_live_run_on_this_host(tmp_path, inputs):
    out = tmp_path / 'out'
    out.mkdir()
    holder = json.loads(_stale_lock(os.getpid()))   # This very process: alive.
    holder['pid_start'] = open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19]
    (out / '.lock').write_text(json.dumps(holder))
    line = _one_error_line(cli(*_flags(inputs, str(out), '--break_lock')))
    assert line.startswith(f'error: {out} is being written by another run: run old on host ')
    assert json.loads((out / '.lock').read_text()) == holder


@pytest.mark.slow
def test_rerun_at_once_after_killing_the_process_group_takes_the_lock_over(tmp_path,
                                                                           image_folders):
    """The killed launcher is a zombie until its parent reaps it; it holds nothing."""
    out = str(tmp_path / 'out')
    flags = [f'--input_dir={image_folders(900)}', f'--output_dir={out}', '--num_shards=3',
             NO_LEAKAGE_CHECK]
    first = start_cli(*flags, '--direct_running_mode=multi_processing', '--direct_num_workers=2')
    deadline = time.monotonic() + 120
    while not _parts(out) and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(first.pid, signal.SIGKILL)
    while _state(first.pid) != 'Z' and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _state(first.pid) == 'Z'   # Dead, not reaped yet: its pid still exists.
    rerun = cli(*flags)
    first.wait()
    assert rerun.returncode == 0, rerun.stderr
    assert 'taking over (its process is gone)' in rerun.stderr and 'resuming run' in rerun.stderr
    assert not [n for n in os.listdir(out) if n.startswith('.')]


def _state(pid: int) -> str:
    with open(f'/proc/{pid}/stat') as stream:
        return stream.read().rsplit(')', 1)[1].split()[0]


def _parts(out: str) -> list[str]:
    return [os.path.join(d, n) for d, _, names in os.walk(out) for n in names
            if n.endswith('.tfrecord.json')]


@pytest.mark.slow
def test_lock_of_a_reused_pid_is_stale(tmp_path, inputs):
    """The pid in the lock is alive, but it is another process: it started at another time."""
    out = tmp_path / 'out'
    out.mkdir()
    holder = json.loads(_stale_lock(os.getpid()))
    holder.update(pid_start='1')
    (out / '.lock').write_text(json.dumps(holder))
    result = cli(*_flags(inputs, str(out)))
    assert result.returncode == 0 and 'taking over (its process is gone)' in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize('machine', [{'pid_ns': 'pid:[1]'}, {'boot_id': 'another boot'}, {}])
def test_a_dead_pid_is_stale_only_on_this_machine_in_this_pid_namespace(tmp_path, inputs,
                                                                         machine):
    """Containers share host names, and pids mean nothing in another PID namespace or boot."""
    out = tmp_path / 'out'
    out.mkdir()
    dead = 2**22 + 17   # Above the largest pid_max Linux allows: no such process.
    (out / '.lock').write_bytes(_stale_lock(dead, **machine))
    result = cli(*_flags(inputs, str(out)))
    if machine:
        assert 'is being written by another run' in _one_error_line(result)
        assert cli(*_flags(inputs, str(out), '--break_lock')).returncode == 0
    else:
        assert result.returncode == 0 and 'taking over (its process is gone)' in result.stderr


@pytest.mark.slow
def test_a_live_run_in_another_pid_namespace_keeps_its_lock(tmp_path, inputs):
    """A real holder in its own PID namespace (as in a container sharing the host's name)."""
    probe = subprocess.run(['unshare', '--pid', '--fork', '--mount-proc', 'true'],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f'unshare cannot make a PID namespace here: {probe.stderr.decode()[:200]}')
    out = str(tmp_path / 'out')
    holder = subprocess.Popen(
        ['unshare', '--pid', '--fork', '--mount-proc', sys.executable, '-c',
         'import sys, time; from pipeline.output import output_lock as o; '
         f'o.acquire({out!r}, {RUN_ID!r}, "DirectRunner", waits=True); print("held", flush=True); '
         'time.sleep(60)'], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == 'held\n'
        assert json.load(open(f'{out}/.lock'))['pid'] == 1   # pid 1 means another process here.
        line = _one_error_line(cli(*_flags(inputs, out)))
        assert 'is being written by another run' in line and 'pass --break_lock' in line
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
@pytest.mark.parametrize('pid', ['1', None, [1]])
def test_break_lock_clears_a_lock_of_this_machine_whose_process_cannot_be_named(tmp_path, inputs,
                                                                              pid):
    out = tmp_path / 'out'
    out.mkdir()
    (out / '.lock').write_bytes(_stale_lock(pid))
    assert 'is being written by another run' in _one_error_line(cli(*_flags(inputs, str(out))))
    assert cli(*_flags(inputs, str(out), '--break_lock')).returncode == 0


@pytest.mark.slow
def test_empty_lock_is_refused_while_young_and_taken_over_when_old(tmp_path, inputs):
    out = tmp_path / 'out'
    out.mkdir()
    (out / '.lock').write_bytes(b'')
    line = _one_error_line(cli(*_flags(inputs, str(out))))
    assert line.startswith(f'error: {out} is being written by another run: an empty or '
                           'unreadable lock, written ')
    old = time.time() - 2 * output_lock.STALE_UNREADABLE_SECONDS
    os.utime(out / '.lock', (old, old))
    result = cli(*_flags(inputs, str(out)))
    assert result.returncode == 0, result.stderr
    assert 'taking over (its process is gone) the lock' in result.stderr
    assert not (out / '.lock').exists()


def test_crafted_lock_cannot_drive_the_terminal_or_forge_lines(tmp_path, inputs):
    out = tmp_path / 'out'
    out.mkdir()
    (out / '.lock').write_text(json.dumps({
        'token': 't', 'run_id': 'r\x1b[2J\x1b[31m', 'host': 'h\nerror: forged line',
        'pid': 1, 'started': 's\u2028x', 'waits': False}))
    line = _one_error_line(cli(*_flags(inputs, str(out))))
    assert '\x1b' not in line and '\u2028' not in line
    assert 'run r\\x1b[2J\\x1b[31m on host h\\nerror: forged line, pid 1, started s\\u2028x' in line


# --- 3. A kill at every instant of the commit and its cleanup ------------------------------------

COMMIT_POINTS = ['commit:journal', 'commit:replace:1', 'commit:install:1', 'commit:install:2',
                 'commit:marked', 'commit:unjournaled', 'cleanup:contents', 'cleanup:marker']
# The steps killed with the leakage check on: the install of leakage.jsonl (with the shards,
# before dataset_info.json) and the removal of the check's work from the temporary folder.
CHECKED_POINTS = {'commit:install:1', 'cleanup:contents'}


@pytest.fixture(scope='module')
def old_datasets(inputs, tmp_path_factory) -> dict[bool, str]:
    """{check: a folder holding another dataset of the inputs (named old)}, which the commit
    replaces, with and without the leakage check."""
    made = {}
    for check in (False, True):
        made[check] = str(tmp_path_factory.mktemp('old') / 'out')
        assert cli(f'--input_dir={inputs}', f'--output_dir={made[check]}', '--dataset_name=old',
                   *_check(check)).returncode == 0
    return made


@pytest.mark.slow
@pytest.mark.parametrize('point', COMMIT_POINTS)
def test_kill_at_every_step_of_the_commit_then_the_same_command_finishes(tmp_path, request,
                                                                         point, old_datasets):
    check = point in CHECKED_POINTS
    inputs, expected = request.getfixturevalue('checked_reference' if check else 'reference')
    out = str(shutil.copytree(old_datasets[check], tmp_path / 'out'))
    flags = _flags(inputs, out, '--overwrite', check=check)
    assert killed_at(point, *flags).returncode == -signal.SIGKILL
    rerun = cli(*flags)
    assert rerun.returncode == 0, rerun.stderr
    assert _tree(out) == expected                   # Nothing left over, not even a folder.
    assert sorted(os.listdir(out)) == sorted(expected)
    again = cli(*flags[:-1])                    # The same command without --overwrite.
    assert again.returncode == 0, again.stderr
    assert 'already holds the dataset of this command' in again.stderr
    assert _tree(out) == expected


@pytest.mark.slow
@pytest.mark.parametrize('point', ['commit:marked', 'commit:unjournaled', 'cleanup:contents'])
def test_kill_in_the_cleanup_on_cloud_storage_then_rerun(gcs, tmp_path, point, capsys):
    source = upload(_images(), 'raw')
    flags = [f'--input_dir={source}', '--num_shards=2', *IN_PROCESS,
             *_check(point in CHECKED_POINTS)]
    assert cli(*flags, f'--output_dir={tmp_path}/local').returncode == 0
    out = f'gs://{BUCKET}/out'
    assert run_cli(*flags, f'--output_dir={out}', kill_at=point).returncode == -signal.SIGKILL
    assert any(name.startswith('.tmp-') for name in download('out'))
    code, stderr = _verify(out, capsys)
    if point == 'commit:marked':   # The journal is still there.
        assert code == 2 and 'interrupted commit' in stderr
    else:
        assert code == 0 and 'whose commit finished' in stderr
    rerun = cli(*flags, f'--output_dir={out}')
    assert rerun.returncode == 0, rerun.stderr
    assert download('out') == _tree(f'{tmp_path}/local')


@pytest.mark.slow
def test_shard_shorter_than_its_result_is_made_again_never_installed(tmp_path,
                                                                    checked_reference):
    inputs, expected = checked_reference
    out = str(tmp_path / 'out')
    flags = _flags(inputs, out, check=True)
    assert killed_at('shard:2', *flags).returncode == -signal.SIGKILL
    shard = next(os.path.join(d, n) for d, _, names in os.walk(out) for n in names
                 if n.endswith('.tfrecord') and '/shards/' in os.path.join(d, n))
    os.truncate(shard, os.path.getsize(shard) - 10)
    rerun = cli(*flags)
    assert rerun.returncode == 0, rerun.stderr
    assert _tree(out) == expected and sorted(os.listdir(out)) == sorted(expected)


@pytest.mark.slow
@pytest.mark.parametrize('damage', ['outside', 'truncated', 'shard data gone', 'other shard'])
def test_a_crafted_or_damaged_sidecar_is_never_followed_and_the_rerun_redoes_the_work(
        tmp_path, request, damage):
    """A sidecar names no path the run acts on: its data file is the one beside it, used only
    if it has the size the sidecar says. A truncated part is made again with the leakage check
    on (its records are filed for the check again)."""
    check = damage == 'truncated'
    inputs, expected = request.getfixturevalue('checked_reference' if check else 'reference')
    out, victim = str(tmp_path / 'out'), tmp_path / 'victim.txt'
    victim.write_bytes(b'not part of any dataset')
    flags = _flags(inputs, out, check=check)
    point = 'shard:1' if damage == 'shard data gone' else 'chunk:1'
    assert killed_at(point, *flags).returncode == -signal.SIGKILL
    temp = [d for d, _, names in os.walk(out) if d.endswith('/parts')][0]
    part = next(os.path.join(temp, n[:-len('.json')]) for n in sorted(os.listdir(temp))
                if n.endswith('.tfrecord.json') and os.path.exists(os.path.join(temp, n[:-5])))
    if damage == 'outside':
        sidecar = json.load(open(f'{part}.json'))
        sidecar['temp_path'] = str(victim)
        json.dump(sidecar, open(f'{part}.json', 'w'))
    elif damage == 'truncated':
        os.truncate(part, os.path.getsize(part) // 2)
    elif damage == 'other shard':                 # Where its records would go.
        sidecar = json.load(open(f'{part}.json'))
        sidecar['shard'] = 1 - sidecar['shard']
        json.dump(sidecar, open(f'{part}.json', 'w'))
    else:
        shards = os.path.join(os.path.dirname(temp), 'shards')
        for name in os.listdir(shards):
            if not name.endswith('.json'):
                os.remove(os.path.join(shards, name))
    rerun = cli(*flags)
    assert rerun.returncode == 0, rerun.stderr
    assert victim.read_bytes() == b'not part of any dataset'
    assert _tree(out) == expected and sorted(os.listdir(out)) == sorted(expected)


@pytest.mark.slow
def test_a_damaged_shard_in_a_second_format_is_made_again(tmp_path, inputs):
    flags = ['--output_format=tfrecord,array_record']
    reference, out = str(tmp_path / 'reference'), str(tmp_path / 'out')
    assert cli(*_flags(inputs, reference, *flags)).returncode == 0
    assert killed_at('shard:2', *_flags(inputs, out, *flags)).returncode == -signal.SIGKILL
    shard = next(os.path.join(d, n) for d, _, names in os.walk(out) for n in names
                 if n.endswith('.array_record'))
    os.truncate(shard, os.path.getsize(shard) - 100)
    sidecar = shard[:-len('.array_record')] + '.tfrecord.json'
    crafted = json.load(open(sidecar))            # A sidecar that names no array_record file.
    crafted['format_bytes'] = {'tfrecord': crafted['format_bytes']['tfrecord']}
    json.dump(crafted, open(sidecar, 'w'))
    rerun = cli(*_flags(inputs, out, *flags))
    assert rerun.returncode == 0, rerun.stderr
    assert _tree(out) == _tree(reference)


@pytest.mark.slow
def test_a_pipe_in_place_of_a_sidecar_is_never_read_and_its_work_is_made_again(tmp_path,
                                                                                reference):
    inputs, expected = reference
    out = str(tmp_path / 'out')
    assert killed_at('chunk:1', *_flags(inputs, out)).returncode == -signal.SIGKILL
    sidecar = next(os.path.join(d, n) for d, _, names in os.walk(out) for n in names
                   if n.endswith('.tfrecord.json'))
    os.remove(sidecar)
    os.mkfifo(sidecar)
    rerun = cli(*_flags(inputs, out), timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert _tree(out) == expected


@pytest.mark.slow
def test_kill_while_replacing_an_old_dataset_with_a_linked_file_then_the_rerun_finishes(
        tmp_path, reference):
    inputs, expected = reference
    out, kept = str(tmp_path / 'out'), tmp_path / 'my-labels.txt'
    assert cli(f'--input_dir={inputs}', f'--output_dir={out}', '--dataset_name=old',
               NO_LEAKAGE_CHECK).returncode == 0
    kept.write_bytes(open(f'{out}/labels.txt', 'rb').read())
    os.remove(f'{out}/labels.txt')
    os.symlink(kept, f'{out}/labels.txt')        # The old dataset's file is a link.
    flags = _flags(inputs, out, '--overwrite')
    assert killed_at('commit:replace:2', *flags).returncode == -signal.SIGKILL
    rerun = cli(*flags)
    assert rerun.returncode == 0, rerun.stderr
    assert _tree(out) == expected and sorted(os.listdir(out)) == sorted(expected)
    assert not os.path.islink(f'{out}/labels.txt') and kept.exists()


@pytest.mark.slow
def test_kill_while_the_first_marker_is_written_then_the_rerun_finishes(tmp_path, reference):
    inputs, expected = reference
    out = str(tmp_path / 'out')
    flags = _flags(inputs, out)
    assert killed_at('chunk:1', *flags).returncode == -signal.SIGKILL
    temp = next(os.path.join(out, n) for n in os.listdir(out) if n.startswith('.tmp-'))
    for name in os.listdir(temp):                 # As a kill before the marker's rename leaves it.
        path = os.path.join(temp, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.rename(path, os.path.join(temp, '.image-tfrecords-run.json.partial-0123abcd'))
    rerun = cli(*flags)
    assert rerun.returncode == 0, rerun.stderr
    assert _tree(out) == expected and sorted(os.listdir(out)) == sorted(expected)


@pytest.mark.slow
def test_leftovers_of_atomic_writes_are_removed_by_the_next_run(tmp_path, inputs):
    out = tmp_path / 'out'
    write_tree(out, {'.commit.json.partial-0badc0de': b'{', f'.lock.partial-{"ab" * 16}': b'',
                     '.lock.partial-notours': b'x'})
    (out / '.tmp-fedcba9876543210').mkdir()          # Someone's empty folder.
    result = cli(*_flags(inputs, str(out)))
    assert result.returncode == 0, result.stderr
    names = os.listdir(out)
    assert '.commit.json.partial-0badc0de' not in names and f'.lock.partial-{"ab" * 16}' not in names
    assert '.lock.partial-notours' in names and '.tmp-fedcba9876543210' in names


@pytest.mark.parametrize('name', [pytest.param('.lock', marks=pytest.mark.slow),   # It converts.
                                  '.commit.json', 'dataset_info.json'])
def test_deeply_nested_json_a_folder_pipe_or_device_in_place_of_a_protocol_file_is_one_line(
        tmp_path, inputs, name, capsys):
    for kind in ('nested', 'folder', 'pipe', 'device'):
        out = tmp_path / f'out-{kind}'
        out.mkdir()
        if kind == 'nested':
            (out / name).write_text('[' * 100_000)
            old = time.time() - 3600
            os.utime(out / name, (old, old))
        elif kind == 'folder':
            (out / name / 'inner').mkdir(parents=True)
        elif kind == 'pipe':      # Reading it would block for ever.
            os.mkfifo(out / name)
        else:                     # Reading it would never end.
            os.symlink('/dev/zero', out / name)
        result = cli(*_flags(inputs, str(out)))
        if name == '.lock' and kind == 'nested':   # An old unreadable lock: taken over.
            assert result.returncode == 0, result.stderr
            continue
        line = _one_error_line(result)
        assert 'Error:' not in line, line
        code, stderr = _verify(out, capsys)
        assert 'Traceback' not in stderr and code in (1, 2), stderr


@pytest.mark.slow
def test_verify_refuses_a_dataset_info_naming_files_outside(converted, capsys):
    out = converted
    info = json.loads((out / 'dataset_info.json').read_text())
    (out / 'dataset_info.json').write_text(json.dumps(dict(info, name='../victim/secret')))
    code, stderr = _verify(out, capsys)
    assert code == 2
    assert stderr.strip().startswith(f'error: {out}/dataset_info.json does not describe a '
                                            "dataset this tool can read (dataset name ")


@pytest.mark.slow
def test_verify_reports_a_pipe_in_place_of_a_shard_instead_of_waiting_on_it(converted, capsys):
    out = converted
    shard = out / 'dataset-train.tfrecord-00001-of-00002'
    shard.unlink()
    os.mkfifo(shard)
    code, stderr = _verify(out, capsys)
    assert code == 1, stderr
    assert ('train shard 1 (dataset-train.tfrecord-00001-of-00002) not a regular file (a '
            'folder, pipe or device) (and so: 5 counts disagree)\n') in stderr


@pytest.mark.slow
def test_folder_named_like_a_shard_is_refused_before_anything_moves(tmp_path, inputs):
    out = tmp_path / 'out'
    write_tree(out, {'dataset-train.tfrecord-00000-of-00002/mine': b'm'})
    line = _one_error_line(cli(*_flags(inputs, str(out))), alone=False)
    assert line == (f'error: {out} holds files this run would overwrite that are not part of a '
                    'dataset it replaces: dataset-train.tfrecord-00000-of-00002; move them away '
                    'or choose another --output_dir')
    kept = [n for n in os.listdir(out) if not n.startswith('.tmp-')]   # Work kept for a rerun.
    assert kept == ['dataset-train.tfrecord-00000-of-00002']
    assert _tree(out / 'dataset-train.tfrecord-00000-of-00002') == {'mine': b'm'}


# --- 4. --overwrite leaves every file it did not write -------------------------------------------

LOOK_ALIKES = {'.tmp-cache/important.db': b'db', 'errors-2024.jsonl': b'{}\n',
               'model.tfrecord-backup': b'weights', '.tmp-0123456789abcdef/notes.txt': b'n',
               'dataset-train.tfrecord-backup': b'b', 'notes.md': b'#'}


@pytest.mark.slow
def test_overwrite_replaces_only_the_old_datasets_own_files(tmp_path, inputs):
    out = tmp_path / 'out'
    write_tree(out, LOOK_ALIKES)
    assert cli(*_flags(inputs, str(out), '--dataset_name=old', '--num_shards=3')).returncode == 0
    result = cli(*_flags(inputs, str(out), '--overwrite', '--clean_temp'))
    assert result.returncode == 0, result.stderr
    after = _tree(out)
    assert {k: after[k] for k in LOOK_ALIKES} == LOOK_ALIKES
    assert not [n for n in after if n.startswith('old-')]
    assert sorted(n for n in after if '.tfrecord-0' in n) == [
        'dataset-train.tfrecord-00000-of-00002', 'dataset-train.tfrecord-00001-of-00002']


def test_user_files_with_dataset_names_are_refused_not_overwritten(tmp_path, inputs):
    out = tmp_path / 'out'
    write_tree(out, {'labels.txt': b'my labels\n', 'summary.json': b'{"mine": 1}', **LOOK_ALIKES})
    before = _tree(out)
    for flags in ([], ['--overwrite']):
        line = _one_error_line(cli(*_flags(inputs, str(out), *flags)))
        assert line == (f'error: {out} holds files this run would overwrite that are not part of '
                        'a dataset it replaces: labels.txt, summary.json; move them away or '
                        'choose another --output_dir')
        assert _tree(out) == before


@pytest.mark.slow
def test_a_report_name_of_a_split_the_dataset_does_not_have_is_left_alone(tmp_path, inputs):
    out = tmp_path / 'out'
    write_tree(out, {'errors-test.jsonl': b'my notes\n', 'image-class-label.labels.txt': b'x\n'})
    result = cli(*_flags(inputs, str(out)))       # A dataset of train only.
    assert result.returncode == 0, result.stderr
    assert (out / 'errors-test.jsonl').read_bytes() == b'my notes\n'
    assert (out / 'image-class-label.labels.txt').read_bytes() == b'x\n'


# --- 5. Links in place of temporary folders ------------------------------------------------------

def _run_id(inputs: str, out: str) -> str:
    """The run id of these flags, from a plan-only job (which takes no lock, writes nothing)."""
    from pipeline import job
    prepared = job.prepare(_flags(inputs, out), plan_only=True)
    os.remove(prepared.plan_path)
    return prepared.settings.run_id


def test_linked_temp_folder_of_this_run_is_refused(tmp_path, inputs):
    out = tmp_path / 'out'
    out.mkdir()
    elsewhere = write_tree(tmp_path / 'elsewhere', {'keep.txt': b'k'})
    os.symlink(elsewhere, out / f'.tmp-{_run_id(inputs, str(out))}')
    line = _one_error_line(cli(*_flags(inputs, str(out))))
    assert line.endswith('is a symbolic link; this tool keeps its temporary files only in a real '
                         'folder. Remove the link and rerun')
    assert _tree(elsewhere) == {'keep.txt': b'k'}


@pytest.mark.slow
def test_linked_temp_folders_of_other_runs_are_left_alone(tmp_path, inputs):
    out = tmp_path / 'out'
    out.mkdir()
    elsewhere = write_tree(tmp_path / 'elsewhere', {
        'keep.txt': b'k', '.image-tfrecords-run.json': json.dumps(
            {'run_id': 'fedcba9876543210', 'state': 'running'}).encode()})
    os.symlink(elsewhere, out / '.tmp-fedcba9876543210')
    result = cli(*_flags(inputs, str(out), '--clean_temp'))
    assert result.returncode == 0, result.stderr
    assert 'removed temporary folders' not in result.stderr
    assert os.path.islink(out / '.tmp-fedcba9876543210') and 'keep.txt' in _tree(elsewhere)


def test_unmarked_folder_in_place_of_this_runs_temp_folder_is_refused(tmp_path, inputs):
    out = tmp_path / 'out'
    run_id = _run_id(inputs, str(out))
    write_tree(out, {f'.tmp-{run_id}/mine.txt': b'm'})
    line = _one_error_line(cli(*_flags(inputs, str(out))))
    assert line == (f'error: {out}/.tmp-{run_id} exists but was not made by this tool (it has no '
                    'marker .image-tfrecords-run.json); move it away and rerun')
    assert _tree(out) == {f'.tmp-{run_id}/mine.txt': b'm'}


def test_file_in_place_of_this_runs_temp_folder_is_refused(tmp_path, inputs):
    out = tmp_path / 'out'
    run_id = _run_id(inputs, str(out))
    write_tree(out, {f'.tmp-{run_id}': b'm'})
    line = _one_error_line(cli(*_flags(inputs, str(out))))
    assert line == (f'error: {out}/.tmp-{run_id} is a file; this tool keeps its temporary files '
                    'only in a folder of that name. Move it away and rerun')
    assert _tree(out) == {f'.tmp-{run_id}': b'm'}


@pytest.mark.slow
def test_wrong_kinds_in_a_killed_runs_temp_folder_are_removed_by_the_rerun(tmp_path,
                                                                          checked_reference):
    """A file where a subfolder belongs, a folder where a file belongs, links in and to places
    outside: the rerun removes each (a link as a link), says so in one line, resumes and writes
    the same dataset."""
    inputs, reference = checked_reference
    out = tmp_path / 'out'
    flags = _flags(inputs, str(out), check=True)
    assert killed_at('chunk:1', *flags).returncode == -signal.SIGKILL
    [temp] = out.glob('.tmp-*')
    elsewhere = write_tree(tmp_path / 'elsewhere', {'keep.txt': b'k', 'a.tfrecord': b'x'})
    part = sorted((temp / 'parts').glob('*.tfrecord.json'))[0]
    part.unlink()
    write_tree(part, {'inside.txt': b'i'})                        # A folder for a file.
    os.symlink(f'{elsewhere}/a.tfrecord', temp / 'parts' / 'train-00000-000009-x.tfrecord')
    for name in ('filed', 'listed', 'shards'):                    # Files for folders.
        shutil.rmtree(temp / name, ignore_errors=True)
        (temp / name).write_bytes(b'not a folder')
    os.symlink(elsewhere, temp / 'groups')                        # A link for a folder.
    result = cli(*flags)
    assert result.returncode == 0, result.stderr
    [line] = [n for n in result.stderr.splitlines() if 'does not make there' in n]
    assert line == (
        f'removed from {temp} what this tool does not make there: filed (a file where a folder '
        'belongs), groups (a symbolic link where a folder belongs), listed (a file where a folder '
        f'belongs), parts/{part.name} (a folder where a file belongs), parts/train-00000-000009-'
        'x.tfrecord (a symbolic link where a file belongs) and 1 more')
    assert _tree(out) == reference and not temp.exists()
    assert _tree(elsewhere) == {'keep.txt': b'k', 'a.tfrecord': b'x'}


# --- 6. Class names that cannot be one line of labels.txt ----------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize('name', ['two\nlines', 'carriage\rreturn', 'line\u2028separator',
                                  'escape\x1b[31m'])
def test_class_names_with_line_breaks_are_refused_in_one_line(tmp_path, name):
    inputs = write_tree(tmp_path / 'in', {f'train/{name}/a.jpg': imagemaker.jpeg(8, 8),
                                          'train/plain/b.jpg': imagemaker.jpeg(8, 8, seed=1)})
    line = _one_error_line(cli(f'--input_dir={inputs}', f'--output_dir={tmp_path}/out',
                               NO_LEAKAGE_CHECK))
    assert line == (f'error: class name {printable_repr(name)} (split train) holds a line break or '
                    'control character; labels.txt keeps one name per line, so rename the class '
                    'folder or fix the label')
    assert not os.path.exists(f'{tmp_path}/out/labels.txt')


@pytest.mark.slow
def test_class_names_with_direction_overrides_are_kept_but_printed_inert(tmp_path):
    name = 'cat\u202edog\u2066'
    inputs = write_tree(tmp_path / 'in', {f'train/{name}/a.jpg': imagemaker.jpeg(8, 8),
                                          'train/plain/b.jpg': imagemaker.jpeg(8, 8, seed=1)})
    result = cli(f'--input_dir={inputs}', f'--output_dir={tmp_path}/out', NO_LEAKAGE_CHECK)
    assert result.returncode == 0, result.stderr
    printed = result.stdout + result.stderr
    assert '\u202e' not in printed and '\u2066' not in printed
    assert 'cat\\u202edog\\u2066' in printed
    assert open(f'{tmp_path}/out/labels.txt', encoding='utf-8').read() == f'{name}\nplain\n'


def printable_repr(name: str) -> str:
    from pipeline.errors import printable
    return printable(repr(name))


@pytest.mark.slow
def test_csv_label_with_a_quoted_newline_is_refused(tmp_path):
    write_tree(tmp_path, {'a.jpg': imagemaker.jpeg(8, 8)})
    (tmp_path / 'train.csv').write_text('uri,label\na.jpg,"cat\ndog"\n')
    line = _one_error_line(cli(f'--csv_train={tmp_path}/train.csv',
                               f'--output_dir={tmp_path}/out', NO_LEAKAGE_CHECK))
    assert line.startswith("error: class name 'cat\\ndog' (split train) holds a line break")


# --- 10. Output folders that cannot be folders ---------------------------------------------------

def test_output_that_is_a_file_or_below_one_is_one_line(tmp_path, inputs):
    (tmp_path / 'file').write_text('x')
    assert _one_error_line(cli(*_flags(inputs, f'{tmp_path}/file'))) == (
        f'error: --output_dir {tmp_path}/file is not a folder; choose a folder')
    assert _one_error_line(cli(*_flags(inputs, f'{tmp_path}/file/out'))) == (
        f'error: --output_dir {tmp_path}/file/out is not a folder ({tmp_path}/file is a file); '
        'choose a folder')

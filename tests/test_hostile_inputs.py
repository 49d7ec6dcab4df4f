"""Hostile inputs and leftovers: a hard link into the temporary folder, pipes, devices, inputs
and archive members over --max_input_mb, an outsized or wrongly blamed lock, and what a run
leaves in the system temp folder.

Each test runs the command line on a few dozen generated images: in the test's process, or in
a process of its own where a kill, the temp folder or the memory of every process is the point.
"""
import glob
import io
import json
import os
import socket
import sys
import tarfile
import zipfile

import numpy as np
import pytest
from PIL import Image

from pipeline.output import records
from pipeline.testing import archivemaker, imagemaker
from pipeline.testing.gcs_servers import upload
from tests.helpers import (IN_PROCESS, cli, killed_at, output_files, run_cli, run_measured,
                           shard_paths, write_tree)

TIMEOUT = 120   # No run may hang: a pipe read by mistake would wait for ever.


def _images(n: int, classes: int = 3) -> dict:
    return {f'train/c{i % classes}/{i}.jpg': imagemaker.jpeg(24, 16, seed=i) for i in range(n)}


# Conversions but the measured ones run without the check for copies across splits
# (--leakage=off): what is tested is how hostile inputs are read, and the check's Beam stages
# take half of a small conversion's time.
NO_LEAKAGE_CHECK = '--leakage=off'


def _flags(inputs: str, out: str, *more: str) -> list[str]:
    return [f'--input_dir={inputs}', f'--output_dir={out}', '--num_shards=2', NO_LEAKAGE_CHECK,
            *IN_PROCESS, *more]


def _run(inputs: str, out: str, *more: str):
    """The command line in this process."""
    return cli(*_flags(inputs, out, *more), timeout=TIMEOUT)


def _run_alone(inputs: str, out: str, *more: str, **kwargs):
    """The command line as a process of its own (`kill_at`, `env`: helpers.run_cli's)."""
    return run_cli(*_flags(inputs, out, *more), timeout=TIMEOUT, **kwargs)


def _records(out: str) -> list[dict]:
    """The records of the train split as {name: [values]}, read without TensorFlow."""
    found = []
    for path in shard_paths(out, 'train'):
        with open(path, 'rb') as stream:
            found += [records.decode_example(data) for data in records.read_records(stream)]
    return found


def _count(out: str) -> int:
    return len(_records(out))


def _errors(out: str) -> dict:
    """{source: reason} of errors-train.jsonl."""
    with open(f'{out}/errors-train.jsonl') as stream:
        return {e['source']: e['reason'] for e in map(json.loads, stream)}


@pytest.fixture(scope='module')
def reference(image_folders, tmp_path_factory) -> tuple[str, dict]:
    """40 images, and the files of their dataset converted without interruption."""
    inputs, out = image_folders(40), str(tmp_path_factory.mktemp('reference'))
    assert _run(inputs, out).returncode == 0
    return inputs, output_files(out)


@pytest.mark.slow
def test_a_hard_linked_part_file_is_replaced_never_written_through(tmp_path, reference):
    inputs, expected = reference
    out = str(tmp_path / 'out')
    assert killed_at('chunk:1', *_flags(inputs, out)).returncode == -9
    outside = tmp_path / 'outside.txt'
    outside.write_bytes(b'not the tool\'s')
    part = sorted(glob.glob(f'{out}/.tmp-*/parts/*.tfrecord'))[0]
    os.remove(part)
    os.link(outside, part)

    rerun = _run(inputs, out)
    assert rerun.returncode == 0, rerun.stderr
    assert outside.read_bytes() == b'not the tool\'s'
    assert output_files(out) == expected


@pytest.fixture(scope='module')
def hostile(tmp_path_factory):
    """A folder layout with 30 images, a FIFO, a link to /dev/zero and a 3 MiB file."""
    root = tmp_path_factory.mktemp('hostile')
    write_tree(root, _images(30))
    os.mkfifo(root / 'train/c0/pipe.jpg')
    os.symlink('/dev/zero', root / 'train/c1/zero.jpg')
    (root / 'train/c2/big.jpg').write_bytes(os.urandom(3 << 20))
    return root


NOT_REGULAR = ('not a regular file but {}; only regular files are read: replace it with the '
               'file it stands for, or remove it')
OVER = 'more than --max_input_mb=2 MiB, the most read for one input; raise --max_input_mb to read it'


@pytest.mark.slow
def test_pipes_devices_and_inputs_over_the_bound_are_reported_not_read(tmp_path, hostile):
    out = str(tmp_path / 'out')
    result = _run(str(hostile), out, '--max_input_mb=2', '--max_error_ratio=0.2')
    assert result.returncode == 0, result.stderr
    assert _errors(out) == {
        f'{hostile}/train/c0/pipe.jpg': NOT_REGULAR.format('a named pipe (FIFO)'),
        f'{hostile}/train/c1/zero.jpg': NOT_REGULAR.format('a device'),
        f'{hostile}/train/c2/big.jpg': f'cannot read file: {3 << 20} bytes, {OVER}'}
    assert _count(out) == 30


@pytest.mark.slow
def test_csv_listed_pipes_and_devices_are_reported_not_read(tmp_path, hostile):
    rows = [f'{hostile}/train/c{i % 3}/{i}.jpg,c{i % 3}' for i in range(30)]
    rows += [f'{hostile}/train/c0/pipe.jpg,c0', '/dev/zero,c1', f'{hostile}/train/c2/big.jpg,c2']
    csv = tmp_path / 'train.csv'
    csv.write_text('\n'.join(rows) + '\n')
    out = str(tmp_path / 'out')
    result = cli(f'--csv_train={csv}', f'--output_dir={out}', '--num_shards=2', '--max_input_mb=2',
                 '--max_error_ratio=0.2', NO_LEAKAGE_CHECK, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
    assert _errors(out) == {
        f'{hostile}/train/c0/pipe.jpg':
            'cannot read file: ' + NOT_REGULAR.format('a named pipe (FIFO)'),
        '/dev/zero': 'cannot read file: ' + NOT_REGULAR.format('a device'),
        f'{hostile}/train/c2/big.jpg': f'cannot read file: {3 << 20} bytes, {OVER}'}
    assert _count(out) == 30


@pytest.mark.parametrize('flag', ['--csv_train', '--labels_file'])
def test_a_pipe_given_as_a_csv_or_labels_file_is_refused_in_one_line(tmp_path, hostile, flag):
    pipe = f'{hostile}/train/c0/pipe.jpg'
    result = cli(f'{flag}={pipe}', *([] if flag == '--csv_train' else [f'--input_dir={hostile}']),
                 f'--output_dir={tmp_path}/out', timeout=TIMEOUT)
    assert result.returncode == 2
    assert result.stderr.strip() == f'error: {flag} {pipe}: ' + NOT_REGULAR.format(
        'a named pipe (FIFO)')



@pytest.mark.parametrize('size, names, line', [
    ((64 << 20) + 1, None, 'is larger than 64 MiB; it holds one class name a line'),
    (None, 1_000_000, 'names 1,000,000 classes; class ids run below 1,000,000'),
])
def test_a_labels_file_past_its_bounds_is_one_line(tmp_path, hostile, size, names, line):
    """Sized before it is read (a sparse file of 64 MiB and a byte is never read); its names
    counted before anything is made of them."""
    labels = tmp_path / 'labels.txt'
    if size:
        with open(labels, 'wb') as f:
            f.truncate(size)
    else:
        labels.write_text(''.join(f'{i}\n' for i in range(names)))
    result = cli(f'--labels_file={labels}', f'--input_dir={hostile}', f'--output_dir={tmp_path}/out',
                 timeout=TIMEOUT)
    assert result.returncode == 2
    assert result.stderr.strip() == f'error: --labels_file {labels} {line}'

@pytest.mark.slow
def test_a_cloud_storage_object_over_the_bound_stops_downloading_and_is_reported(tmp_path, gcs):
    """Listed by a CSV without sizes: the bound stops the download itself."""
    images = {f'c{i % 2}/{i}.jpg': imagemaker.jpeg(24, 16, seed=i) for i in range(8)}
    source = upload({**images, 'c0/big.jpg': os.urandom(3 << 20)}, 'in')
    rows = [f'{source}/{name},{name[:2]}' for name in [*images, 'c0/big.jpg']]
    csv = upload({'train.csv': ('\n'.join(rows) + '\n').encode()}, 'lists')
    out = str(tmp_path / 'out')
    result = cli(f'--csv_train={csv}/train.csv', f'--output_dir={out}', '--num_shards=2',
                 '--max_input_mb=2', '--max_error_ratio=0.2', NO_LEAKAGE_CHECK, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
    assert _errors(out) == {f'{source}/c0/big.jpg': f'cannot read file: its download holds {OVER}'}
    assert _count(out) == 8


@pytest.mark.slow
def test_an_archive_member_over_the_bound_is_reported_before_it_is_inflated(tmp_path):
    """A zip bomb's member states its size: nothing is inflated past the bound (a class folder
    of each kind of archive, converted together)."""
    suffixes = {'c0': '.zip', 'c1': '.tar', 'c2': '.tar.gz'}
    files = {}
    for n, (folder, suffix) in enumerate(suffixes.items()):
        members = {f'{i}.jpg': imagemaker.jpeg(24, 16, seed=10 * n + i) for i in range(6)}
        members['bomb.jpg'] = bytes(3 << 20)   # Zeros: a few KB compressed.
        files[f'train/{folder}{suffix}'] = (
            archivemaker.zip_(members, zipfile.ZIP_DEFLATED) if suffix == '.zip'
            else archivemaker.tar(members, 'gz' if suffix == '.tar.gz' else ''))
    files.update({f'train/c3/{i}.jpg': imagemaker.jpeg(24, 16, seed=100 + i) for i in range(3)})
    inputs = write_tree(tmp_path / 'in', files)
    out = str(tmp_path / 'out')
    result = _run(inputs, out, '--max_input_mb=2', '--max_error_ratio=0.2')
    assert result.returncode == 0, result.stderr
    errors = _errors(out)
    assert sorted(errors) == [f'{inputs}/train/{folder}{suffix}/bomb.jpg'
                              for folder, suffix in suffixes.items()]
    for reason in errors.values():
        assert reason.endswith(f'{3 << 20} bytes in its archive, {OVER}'), reason
    assert _count(out) == 3 * 6 + 3


def test_an_outsized_lock_is_refused_after_reading_a_bounded_prefix(tmp_path, image_folders):
    inputs = image_folders(6)
    out = tmp_path / 'out'
    out.mkdir()
    (out / '.lock').write_bytes(b'{' + b' ' * (4 << 20))
    result = _run(inputs, str(out))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f'error: {out}/.lock holds more than 1 MiB, so it is not a lock of this tool (those '
        'hold a few hundred bytes); move it away and rerun')
    assert os.path.getsize(out / '.lock') == (4 << 20) + 1


def test_break_lock_is_not_offered_for_the_lock_of_a_running_process(tmp_path, image_folders):
    """The lock names a live process of this machine (this test's): --break_lock refuses it,
    and the message says so instead of suggesting it."""
    inputs = image_folders(6)
    out = tmp_path / 'out'
    out.mkdir()
    with open('/proc/self/stat') as stream:
        started = stream.read().rsplit(')', 1)[1].split()[19]
    holder = {'token': 't', 'run_id': 'r', 'host': os.uname().nodename, 'pid': os.getpid(),
              'pid_start': started, 'started': '2026-01-01T00:00:00+00:00',
              'runner': 'DirectRunner', 'waits': True}
    with open('/proc/sys/kernel/random/boot_id') as stream:
        holder.update(boot_id=stream.read().strip(), pid_ns=os.readlink('/proc/self/ns/pid'))
    (out / '.lock').write_text(json.dumps(holder))
    for flags in ([], ['--break_lock']):
        result = _run(inputs, str(out), *flags)
        assert result.returncode == 2
        line = result.stderr.strip()
        assert line.endswith(
            f'its lock is {out}/.lock. Its process is running on this machine: wait for it to '
            'end (--break_lock never takes the lock of a running process; if that process is '
            f'not a run of this tool, move {out}/.lock away and rerun)'), line
        assert 'pass --break_lock' not in line
    assert json.loads((out / '.lock').read_text()) == holder


@pytest.mark.slow
def test_runs_leave_nothing_in_the_system_temp_folder_even_when_killed(tmp_path, image_folders):
    """The temp folder of the process: a process of its own."""
    inputs = image_folders(12)
    temp = tmp_path / 'temp'
    temp.mkdir()
    env = dict(os.environ, TMPDIR=str(temp))
    assert _run_alone(inputs, str(tmp_path / 'out'), kill_at='chunk:1', env=env).returncode == -9
    assert len(os.listdir(temp)) == 1   # The killed run's folder, its log in it.
    # The rerun removes the killed run's folder, and its own as it ends.
    assert _run_alone(inputs, str(tmp_path / 'out'), env=env).returncode == 0
    assert os.listdir(temp) == []


@pytest.mark.slow
@pytest.mark.parametrize('planted', [None, 'file', 'link'])
def test_an_unexpected_failure_keeps_only_its_log_and_names_it(tmp_path, planted):
    """The log the process keeps: a process of its own. The folder of kept logs is in the shared
    temp folder, where a file or a link of that name (anyone's) is left alone: the log is kept in
    a folder of its own beside it (a file there failed with a traceback, and a link had the log
    moved where it led)."""
    (tmp_path / 'failing_config.py').write_text(
        'from pipeline.config import ImageClassificationConfig\n'
        'class Failing(ImageClassificationConfig):\n'
        '    num_labels, supported_modes = 2, ("train",)\n'
        '    def example_generator(self, mode):\n'
        '        raise RuntimeError("boom")\n')
    temp = tmp_path / 'temp'
    temp.mkdir()
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    if planted == 'file':
        (temp / 'image-tfrecords-logs').write_bytes(b'mine')
    elif planted == 'link':
        os.symlink(elsewhere, temp / 'image-tfrecords-logs')
    env = dict(os.environ, TMPDIR=str(temp),
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get('PYTHONPATH', '')]))
    result = run_cli('--config=failing_config:Failing', f'--output_dir={tmp_path}/out',
                     *IN_PROCESS, env=env, timeout=TIMEOUT)
    assert result.returncode == 2
    [log] = glob.glob(f'{temp}/image-tfrecords-logs{"-*" if planted else ""}/run-*.log')
    assert result.stderr.strip().endswith(f'(the full trace is in {log}; --verbose prints it)')
    assert 'RuntimeError: boom' in open(log).read()
    assert len(os.listdir(temp)) == (2 if planted else 1)
    assert os.listdir(elsewhere) == []
    if planted == 'file':
        assert (temp / 'image-tfrecords-logs').read_bytes() == b'mine'


@pytest.mark.slow
def test_a_pipe_planted_as_a_part_file_is_made_again_not_read(tmp_path, reference):
    inputs, expected = reference
    out = str(tmp_path / 'out')
    assert killed_at('chunk:1', *_flags(inputs, out)).returncode == -9
    part = sorted(glob.glob(f'{out}/.tmp-*/parts/*.tfrecord.json'))[0].removesuffix('.json')
    with open(f'{part}.json') as stream:
        sidecar = json.load(stream)
    os.remove(part)
    os.mkfifo(part)
    with open(f'{part}.json', 'w') as stream:   # The size a pipe shows.
        json.dump(dict(sidecar, bytes=0), stream)
    rerun = _run(inputs, out)
    assert rerun.returncode == 0, rerun.stderr
    assert output_files(out) == expected


@pytest.mark.slow
def test_a_socket_listed_in_a_csv_and_a_link_into_proc_are_reported(tmp_path):
    root = write_tree(tmp_path / 'in', _images(6))
    server = socket.socket(socket.AF_UNIX)
    server.bind(f'{root}/train/c0/socket.jpg')
    os.symlink('/proc/self', f'{root}/train/proc')
    csv = tmp_path / 'train.csv'
    csv.write_text(f'{root}/train/c1/1.jpg,c1\n{root}/train/c0/socket.jpg,c0\n')
    listed = cli(f'--csv_train={csv}', f'--output_dir={tmp_path}/csv', '--max_error_ratio=1',
                 NO_LEAKAGE_CHECK, timeout=TIMEOUT)
    assert listed.returncode == 0, listed.stderr
    assert list(_errors(f'{tmp_path}/csv')) == [f'{root}/train/c0/socket.jpg']
    folder = _run(root, f'{tmp_path}/folder', '--max_error_ratio=1')
    assert folder.returncode == 0, folder.stderr
    assert _errors(f'{tmp_path}/folder')[f'{root}/train/proc'] == (
        'a link into /proc, /sys or /dev (they change as they are read and never end), not followed')
    server.close()


# Memory. Each run below is a process of its own on one worker, whose peak is compared with the
# same command's on two small images (`baseline_peak`, 250 MB measured). What once held an
# image whole, or in copies, was shown with images of 88 megapixels and a bound of 1 GiB on the
# peak, 0.8 GB beyond that baseline; such images take 10-30 s each to make and to read, so the
# images here are a quarter of those (4700x4700 pixels, --max_image_pixels a quarter of its
# default, a padding a quarter of 250 MiB), and so is the bound on what a run may hold beyond
# the baseline: IMAGE_HEADROOM, 206 MB. Measured beyond the baseline (2026-12-06): 129 MB for
# the PNG converted, 57 MB for the padded PNG and the WebP as files of one run (54 and 3 MB in
# runs of their own), 128 MB for the padded PNG as a tar.gz member; with the behaviours these
# tests were written against (the estimate of _check_decode_memory skipped, so that the padded
# PNG and the WebP are converted; float and array copies of the pixels held while the PNG's
# are hashed) 281 and 368 MB for the padded PNG and the WebP each in a run of its own, 288 MB
# for the tar.gz member and 410 MB for the PNG.
SIDE = 4700                          # 22.09 megapixels: 9400x9400 / 4.
MAX_PIXELS = 89_478_485 // 4         # The default --max_image_pixels / 4.
IMAGE_HEADROOM = ((1 << 30) - 250_000_000) // 4


def _peak(inputs: str, out: str, *more: str) -> tuple:
    """(result, peak bytes of its largest process) of the command line as a process of its own,
    every error tolerated."""
    return run_measured(sys.executable, '-m', 'pipeline.run', f'--input_dir={inputs}',
                        f'--output_dir={out}', '--max_error_ratio=1', *IN_PROCESS, *more,
                        timeout=600)


@pytest.fixture(scope='module')
def baseline_peak(tmp_path_factory) -> int:
    """The peak of a run on two small images: what a run holds for its code and runner."""
    root = tmp_path_factory.mktemp('baseline')
    result, peak = _peak(write_tree(root / 'in', _images(2, classes=1)), str(root / 'out'))
    assert result.returncode == 0, result.stderr
    return peak


def _zeros_tar_gz(path: str, members: int, size: int) -> None:
    """A .tar.gz of `members` files of `size` zero bytes each, written without holding one."""
    class Zeros(io.RawIOBase):
        def __init__(self):
            self.left = size

        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:
            n = min(len(buffer), self.left)
            buffer[:n] = bytes(n)
            self.left -= n
            return n
    with tarfile.open(path, 'w:gz', compresslevel=1) as archive:
        for i in range(members):
            info = tarfile.TarInfo(f'{i:02d}.jpg')
            info.size = size
            archive.addfile(info, io.BufferedReader(Zeros(), 1 << 20))


@pytest.mark.slow
def test_a_gzip_tar_of_large_members_is_streamed_within_bounded_memory(tmp_path, baseline_peak):
    """10 members of 60 MiB in one chunk: never all held at once. A conversion holds at most
    256 MiB of a chunk's gzip tar members (encode_chunks.STREAM_BUDGET): 380 MB beyond the
    baseline measured, copies included; all ten, as once, 750 MB (with the budget lifted).
    Twice as many members showed it no better, in twice the time."""
    os.makedirs(tmp_path / 'in/train')
    _zeros_tar_gz(str(tmp_path / 'in/train/c0.tar.gz'), 10, 60 << 20)
    write_tree(tmp_path / 'in', {'train/c1/a.jpg': imagemaker.jpeg(24, 16)})
    out = str(tmp_path / 'out')
    result, peak = _peak(f'{tmp_path}/in', out, '--max_input_mb=64')
    assert result.returncode == 0, result.stderr
    assert sorted(_errors(out)) == [f'{tmp_path}/in/train/c0.tar.gz/{i:02d}.jpg'
                                    for i in range(10)]
    assert _count(out) == 1
    assert peak - baseline_peak < 540_000_000, (peak, baseline_peak)


def _gradient(channels: int) -> np.ndarray:
    y, x = np.mgrid[:SIDE, :SIDE].astype(np.uint16)
    planes = [x % 256, y % 256, (x + y) % 256, x % 199][:channels]
    return np.stack(planes, -1).astype(np.uint8)


@pytest.mark.slow
def test_a_png_just_under_max_image_pixels_converts_within_bounded_memory(tmp_path,
                                                                          baseline_peak):
    """Just under --max_image_pixels: decoded once, no other full-size copy held (the hash's
    float luminance, np.asarray's and the RGB conversion's copies took 2.2 GB at 88
    megapixels, just under the default)."""
    os.makedirs(tmp_path / 'in/train/c0')
    Image.fromarray(_gradient(3)).save(tmp_path / 'in/train/c0/big.png', compress_level=1)
    out = str(tmp_path / 'out')
    result, peak = _peak(f'{tmp_path}/in', out, f'--max_image_pixels={MAX_PIXELS}')
    assert result.returncode == 0, result.stderr
    [record] = _records(out)
    assert (record['image/width'], record['image/height']) == ([SIDE], [SIDE])
    assert peak - baseline_peak < IMAGE_HEADROOM, (peak, baseline_peak)


def _padded_rgba_png(path, pad: int) -> None:
    """A SIDE x SIDE RGBA PNG (EXIF orientation 6) with a private chunk of `pad` bytes after
    IHDR."""
    image = Image.fromarray(_gradient(4), 'RGBA')
    exif = Image.Exif()
    exif[0x0112] = 6
    stream = io.BytesIO()
    image.save(stream, 'PNG', compress_level=1, exif=exif)
    del image
    png, padding = stream.getvalue(), bytes(pad)
    with open(path, 'wb') as out:
        out.write(png[:33] + imagemaker.png_chunk(b'zzZz', padding) + png[33:])


def _hostile_run(tmp_path, writes: dict) -> tuple:
    """Runs the command line on a folder of two small images and hostile ones, {name: write},
    each made by `write(train/c0/name)`, which returns the image's size, with
    --max_image_pixels MAX_PIXELS: (peak bytes of its largest process, errors-train.jsonl,
    {name: size})."""
    inputs = write_tree(tmp_path / 'in', _images(2, classes=1))
    sizes = {name: write(os.path.join(inputs, 'train/c0', name)) for name, write in writes.items()}
    out = str(tmp_path / 'out')
    result, peak = _peak(inputs, out, f'--max_image_pixels={MAX_PIXELS}')
    assert result.returncode == 0, result.stderr
    assert _count(out) == 2
    return peak, _errors(out), sizes


def _too_large(kind: str, per_pixel: int, size: int) -> str:
    """The start of the reason an image of SIDE x SIDE `kind` pixels in a file of `size` bytes
    is reported as too large (transforms/images.py's estimate)."""
    return (f'image is {SIDE}x{SIDE} {kind}, which takes about '
            f'{(size + SIDE * SIDE * per_pixel) / 1e6:.0f} MB to convert')


def _padded_png(path) -> int:
    """A padded PNG (a quarter of 250 MiB) at `path`; returns its size."""
    _padded_rgba_png(path, (250 << 20) // 4)
    return os.path.getsize(path)


def _webp(path) -> int:
    Image.fromarray(_gradient(3)).save(path, 'WEBP', quality=50, method=0)
    return os.path.getsize(path)


@pytest.mark.slow
def test_a_png_padded_with_a_large_chunk_and_a_webp_stay_within_bounded_memory(tmp_path,
                                                                               baseline_peak):
    """The padded PNG's bytes are held while it is converted, so they count against
    --max_image_pixels: it is reported as too large (it took 1.3 GB when converted with a
    padding of 250 MiB at four times the pixels). Without the padding it would convert: its 8
    bytes a pixel are 177 MB of the 201 MB the flag allows. libwebp decodes the whole frame,
    with copies (19 bytes a pixel, 1.5 GB at 88 megapixels): a WebP is bounded by a lower pixel
    limit and reported as too large. Either converted would take the run past the bound."""
    peak, errors, sizes = _hostile_run(tmp_path, {'big.png': _padded_png, 'big.webp': _webp})
    assert peak - baseline_peak < IMAGE_HEADROOM, (peak, baseline_peak)
    assert sorted(errors) == [f'{tmp_path}/in/train/c0/{name}' for name in ('big.png', 'big.webp')]
    png, webp = (errors[f'{tmp_path}/in/train/c0/{name}'] for name in ('big.png', 'big.webp'))
    assert png.startswith(_too_large('PNG', 8, sizes['big.png'])), png
    assert webp.startswith(_too_large('WEBP', 19, sizes['big.webp'])), webp
    assert all(f'--max_image_pixels {MAX_PIXELS}' in reason for reason in (png, webp))


@pytest.mark.slow
def test_a_png_padded_with_a_large_chunk_in_a_tar_gz_stays_within_bounded_memory(tmp_path,
                                                                                 baseline_peak):
    """As a member of a gzip tar, read in the archive's one pass: held once, reported as too
    large."""
    def write(path):
        archive = os.path.join(os.path.dirname(os.path.dirname(path)), 'c1.tar.gz')
        size = _padded_png(tmp_path / 'big.png')
        with tarfile.open(archive, 'w:gz', compresslevel=1) as tar:
            tar.add(tmp_path / 'big.png', 'big.png')
        os.remove(tmp_path / 'big.png')
        return size

    peak, errors, sizes = _hostile_run(tmp_path, {'big.png': write})
    assert peak - baseline_peak < IMAGE_HEADROOM, (peak, baseline_peak)
    [(source, reason)] = errors.items()
    assert source == f'{tmp_path}/in/train/c1.tar.gz/big.png'
    assert reason.startswith(_too_large('PNG', 8, sizes['big.png'])), reason
    assert f'--max_image_pixels {MAX_PIXELS}' in reason


def _png_with_chunk_after_pixels(mode: str, kind: bytes, body: bytes) -> bytes:
    png = imagemaker.encode(Image.fromarray(imagemaker.gradient(24, 16)).convert(mode), 'PNG')
    return png[:-12] + imagemaker.png_chunk(kind, body) + png[-12:]


@pytest.mark.slow
def test_pngs_with_a_chunk_cut_short_after_their_pixels_are_reported_not_fatal(tmp_path):
    """Pillow fails on such chunks with an IndexError or a struct.error, not its usual errors:
    each is one input that cannot be converted, listed with the reason, and the run goes on."""
    files = _images(12)
    files['train/c0/short_gama.png'] = _png_with_chunk_after_pixels('RGBA', b'gAMA', b'\0')
    files['train/c1/empty_iccp.png'] = _png_with_chunk_after_pixels('RGB', b'iCCP', b'')
    inputs = write_tree(tmp_path / 'in', files)
    result = _run(inputs, f'{tmp_path}/out', '--max_error_ratio=0.5')
    assert result.returncode == 0, result.stderr
    errors = {os.path.relpath(source, inputs): reason
              for source, reason in _errors(f'{tmp_path}/out').items()}
    assert sorted(errors) == ['train/c0/short_gama.png', 'train/c1/empty_iccp.png'], errors
    assert all(reason.startswith('cannot decode image: ') for reason in errors.values()), errors
    assert _count(f'{tmp_path}/out') == 12

"""Archives against loose files: conversion speed on local disk, and Cloud Storage reads.

    python -m benchmarks.archives [--n 4000] [--rounds 2] [--members 1000]
    python -m benchmarks.archives --gzip [--n 1000] [--rounds 2] [--reencode]
    python -m benchmarks.archives --directory_only [--entries 200000] [--checkout DIR]

Speed: the workload of benchmarks/workload.py (n images), once as loose files and once as
archives of the same images (ImageNet's shape: train.tar a tar of class tars, validation.zip
and test.tar of class folders), each converted by the command line at n/10 and n images,
interleaved, the fastest of --rounds; prints images/s in steady state and for the whole
command, and archive / loose.

Reads: --members small images as a tar of 10 class tars and as loose files on the Cloud Storage
emulator (pipeline/testing/gcs_servers.py), each converted gs:// to local disk through a proxy that counts
the operations; prints object reads (ranged reads, for archives) per 1,000 images.

Gzip (--gzip): n photo-like images of 900x700 in class folders, once as the folder and once as
`tar czf ds.tar.gz ds` (the README's packing), each converted by the whole command line,
interleaved, the fastest of --rounds; prints each time and .tar.gz / folder, then what
`--plan_only` on the .tar.gz says the command takes against that run's time.

Index: a stored zip and a tar of --entries empty members (1,000 class folders), each indexed
into a MemberTable (pipeline/inputs/archives.py `table`) in a process of its own; prints the
entries/s and the process's resident MB before and at its peak; then zipfile's listing of the
zip (an object of each entry) in entries/s, and the zip index's ratio to it. --checkout indexes
them with another checkout's code, to compare two versions on the same archives.
"""
import argparse
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

from benchmarks.benchmark import fastest, measure, steady
from benchmarks.workload import linked_workload, make_workload
from pipeline.testing import archivemaker, gcs_servers, imagemaker

PY = sys.executable


def _add_folder(add, root: str, prefix: str = '') -> None:
    for name in sorted(os.listdir(root)):
        if not name.startswith('.'):
            path = os.path.join(root, name)
            if os.path.isdir(path):
                _add_folder(add, path, f'{prefix}{name}/')
            else:
                add(f'{prefix}{name}', path)


def _tar_of(root: str) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode='w') as archive:
        _add_folder(lambda name, path: archive.add(os.path.realpath(path), name), root)
    return out.getvalue()


def archive_workload(loose: str, target: str) -> str:
    """The loose workload as train.tar (of class tars), validation.zip and test.tar."""
    os.makedirs(target, exist_ok=True)
    train = os.path.join(loose, 'train')
    classes = {f'{c}.tar': _tar_of(os.path.join(train, c)) for c in sorted(os.listdir(train))}
    with tarfile.open(os.path.join(target, 'train.tar'), 'w') as archive:
        for name, data in classes.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    with zipfile.ZipFile(os.path.join(target, 'validation.zip'), 'w', zipfile.ZIP_STORED) as archive:
        _add_folder(lambda name, path: archive.write(os.path.realpath(path), name),
                    os.path.join(loose, 'validation'))
    with open(os.path.join(target, 'test.tar'), 'wb') as stream:
        stream.write(_tar_of(os.path.join(loose, 'test')))
    return target


def speed(n: int, rounds: int, workdir: str) -> None:
    source = make_workload(os.path.join(workdir, 'workload'), n)
    small = linked_workload(source, os.path.join(workdir, 'small'), every=10)
    inputs = {('loose', n): source, ('loose', n // 10): small,
              ('archives', n): archive_workload(source, os.path.join(workdir, 'archives')),
              ('archives', n // 10): archive_workload(small, os.path.join(workdir, 'archives_small'))}
    runs = {key: [] for key in inputs}
    out = os.path.join(workdir, 'out')
    for _ in range(rounds):
        for key, folder in inputs.items():
            runs[key].append(measure([PY, '-m', 'pipeline.run', f'--input_dir={folder}',
                                      f'--output_dir={out}', '--overwrite']))
    print(f'Local disk, {n} images (and {n // 10}), fastest of {rounds} interleaved rounds')
    print('| input | steady images/s | whole command images/s |')
    print('| --- | ---: | ---: |')
    rates = {}
    for kind in ('loose', 'archives'):
        large, little = fastest(runs[(kind, n)]), fastest(runs[(kind, n // 10)])
        rate, _ = steady(n // 10, little, n, large)
        rates[kind] = rate, n / large.seconds
        print(f'| {kind} | {rate:.0f} | {n / large.seconds:.0f} |')
    print(f'archives / loose: {rates["archives"][0] / rates["loose"][0]:.2f} steady, '
          f'{rates["archives"][1] / rates["loose"][1]:.2f} whole command')


def reads(members: int, workdir: str) -> None:
    ports = gcs_servers.free_port(), gcs_servers.free_port()
    gcs_servers.hermetic_environment(*ports)
    server = gcs_servers.LocalGcs(*ports)
    try:
        images = {f'train/c{i % 10}/{i}.jpg': imagemaker.jpeg(32, 24, seed=i) for i in range(members)}
        loose = gcs_servers.upload(images, 'loose')
        classes = {}
        for name, data in images.items():
            classes.setdefault(name.split('/')[1], {})[name.split('/')[2]] = data
        outer = io.BytesIO()
        with tarfile.open(fileobj=outer, mode='w') as archive:
            for label, files in sorted(classes.items()):
                inner = io.BytesIO()
                with tarfile.open(fileobj=inner, mode='w') as class_tar:
                    for name, data in files.items():
                        info = tarfile.TarInfo(name)
                        info.size = len(data)
                        class_tar.addfile(info, io.BytesIO(data))
                info = tarfile.TarInfo(f'{label}.tar')
                info.size = len(inner.getvalue())
                archive.addfile(info, io.BytesIO(inner.getvalue()))
        archived = gcs_servers.upload({'train.tar': outer.getvalue()}, 'archived')
        print(f'\nCloud Storage object reads per 1,000 images ({members} images, emulator)')
        print('| input | reads | of which listing and indexing |')
        print('| --- | ---: | ---: |')
        for kind, source in (('loose files', loose), ('tar of 10 class tars', archived)):
            proxy = gcs_servers.FlakyProxy(ports[0], every=0)
            env = dict(os.environ, STORAGE_EMULATOR_HOST=f'http://127.0.0.1:{proxy.port}')
            subprocess.run([PY, '-m', 'pipeline.run', f'--input_dir={source}',
                            f'--output_dir={os.path.join(workdir, kind.split()[0])}',
                            '--num_shards=2', '--overwrite'],
                           env=env, check=True, capture_output=True)
            proxy.stop()
            count = proxy.operations.get('read', 0)
            print(f'| {kind} | {count * 1000 / members:.0f} | '
                  f'{(count - members) * 1000 / members:.0f} |')
    finally:
        server.stop()


def _photo_folder(root: str, n: int) -> str:
    """n photo-like 900x700 JPEGs in 10 class folders of train/ (skipped if already there)."""
    from PIL import Image
    marker = os.path.join(root, f'.complete-{n}')
    if not os.path.exists(marker):
        for i in range(n):
            folder = os.path.join(root, 'train', f'class_{i % 10}')
            os.makedirs(folder, exist_ok=True)
            Image.fromarray(imagemaker.photo(900, 700, seed=i)).save(
                os.path.join(folder, f'{i:06d}.jpg'), quality=90)
        open(marker, 'w').close()
    return root


def gzip_speed(n: int, rounds: int, workdir: str, flags: list[str]) -> None:
    folder = _photo_folder(os.path.join(workdir, 'ds'), n)
    packed = os.path.join(workdir, 'ds.tar.gz')
    subprocess.run(['tar', 'czf', packed, '--exclude=.complete-*', 'ds'], cwd=workdir, check=True)
    command = [PY, '-m', 'pipeline.run', f'--output_dir={os.path.join(workdir, "out")}',
               '--overwrite', *flags]
    runs = {'folder': [], '.tar.gz': []}
    for _ in range(rounds):
        for kind, source in (('folder', folder), ('.tar.gz', packed)):
            runs[kind].append(measure([*command, f'--input_dir={source}']).seconds)
    plan = measure([*command, f'--input_dir={packed}', '--plan_only'])
    said = re.search(r'Here: ~([\d,]+) s', plan.stdout)
    folder_s, packed_s = min(runs['folder']), min(runs['.tar.gz'])
    print(f'{n} images of 900x700 {" ".join(flags)}, whole command, fastest of {rounds} '
          'interleaved rounds')
    print('| input | seconds |\n| --- | ---: |')
    print(f'| folder | {folder_s:.1f} |\n| .tar.gz | {packed_s:.1f} |')
    print(f'.tar.gz / folder: {packed_s / folder_s:.2f}')
    if said:
        estimate = float(said[1].replace(',', ''))
        print(f'--plan_only on the .tar.gz: ~{estimate:.0f} s, '
              f'{estimate / packed_s:.2f} of the run')


# Indexes an archive into a MemberTable in a process of its own: members, seconds, the resident
# MB before and the peak.
# (From /proc: ru_maxrss would count what the benchmark held when it started the process.)
_INDEX = """
import re, sys, time
from pipeline.inputs import archives
def kb(field):
    return int(re.search(field + r':\\s+(\\d+)', open('/proc/self/status').read())[1])
path, size = sys.argv[1], int(sys.argv[2])
before = kb('VmRSS')
started = time.monotonic()
found = archives.table(archives.Archive.of_file(path, size, 0.0))
seconds = time.monotonic() - started
print(len(found), seconds, before >> 10, kb('VmHWM') >> 10)
"""


def directory(entries: int, workdir: str, checkout: str | None = None) -> None:
    """Entries/s and the peak resident MB of indexing a stored zip and a tar of `entries` empty
    members into a MemberTable (archives.table), each in a process of its own (`checkout`: with
    that checkout's code); and zipfile's listing of the zip, in this process."""
    env = dict(os.environ, PYTHONPATH=checkout or os.getcwd())
    names = [f'c{i % 1000:03d}/{i:07d}.jpg' for i in range(entries)]
    made = {kind: os.path.join(workdir, f'entries.{kind}') for kind in ('zip', 'tar')}
    archivemaker.write_stored_zip(made['zip'], ((name, b'') for name in names))
    with tarfile.open(made['tar'], 'w') as archive:
        for name in names:
            archive.addfile(tarfile.TarInfo(name))
    rates = {}
    for kind, path in made.items():
        found = subprocess.run([PY, '-c', _INDEX, path, str(os.path.getsize(path))], env=env,
                               capture_output=True, text=True, check=True).stdout.split()
        listed, seconds, before, peak = int(found[0]), float(found[1]), int(found[2]), int(found[3])
        assert listed == entries, (kind, listed)
        rates[kind] = entries / seconds
        print(f'| {kind} of {entries:,} members | indexed {rates[kind]:,.0f} entries/s | '
              f'resident {before} MB before, peak {peak} MB (+{peak - before}) |')
    started = time.monotonic()
    with zipfile.ZipFile(made['zip']) as archive:
        assert len(archive.infolist()) == entries
    baseline = entries / (time.monotonic() - started)
    print(f'| zipfile | {baseline:,.0f} entries/s | zip index / zipfile '
          f'{rates["zip"] / baseline:.2f}x |')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=4000)
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--members', type=int, default=1000)
    parser.add_argument('--gzip', action='store_true', help='a .tar.gz against its folder only')
    parser.add_argument('--reencode', action='store_true', help='with --gzip: convert with it')
    parser.add_argument('--entries', type=int, default=200_000)
    parser.add_argument('--directory_only', action='store_true',
                        help='only index a zip and a tar of --entries members')
    parser.add_argument('--checkout', help='index them with this checkout\'s code (its folder '
                        'first on PYTHONPATH), to compare two versions')
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix='archives-benchmark-')
    if args.gzip:
        gzip_speed(args.n, args.rounds, workdir, ['--reencode'] if args.reencode else [])
        return
    directory(args.entries, workdir, args.checkout)
    if args.directory_only:
        return
    speed(args.n, args.rounds, workdir)
    reads(args.members, workdir)


if __name__ == '__main__':
    main()

"""Peak memory of every process on hostile inputs: `python -m benchmarks.hostile_memory [NAME ...]`.

Each input is given to the command line with its defaults (a multi-process local run); the
process tree (the launcher and each worker) is sampled with psutil every 20 ms, and the table
gives the largest resident size seen of the launcher and of any one other process. Inputs:
png (a 9400x9400 PNG, 88 Mpx), targz (a .tar.gz of 16 members of 200 MB), verify (verify of a
dataset whose dataset_info.json lists 10^7 shards), webp (a 9400x9400 lossy WebP), padded (a
9400x9400 RGBA PNG, EXIF orientation 6, with a 250 MiB private chunk after IHDR), padded_targz
(that PNG as the member of a .tar.gz). Needs ~5 GB of free disk in the temp folder.
"""
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib

import numpy as np
import psutil
from PIL import Image

PY = sys.executable


def _measure(command: list[str]) -> tuple[int, float, float]:
    """(exit code, peak MB of the launcher, peak MB of any one process below it)."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    root, peaks = psutil.Process(process.pid), {}
    while process.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for proc in tree:
            try:
                peaks[proc.pid] = max(peaks.get(proc.pid, 0), proc.memory_info().rss)
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.02)
    launcher = peaks.pop(process.pid, 0)
    return process.wait(), launcher / 1e6, max(peaks.values(), default=0) / 1e6


def _png(folder: str) -> list[str]:
    os.makedirs(f'{folder}/in/train/c0')
    y, x = np.mgrid[:9400, :9400].astype(np.uint16)
    pixels = np.stack([x % 256, y % 256, (x + y) % 256], -1).astype(np.uint8)
    Image.fromarray(pixels).save(f'{folder}/in/train/c0/big.png', compress_level=1)
    return [PY, '-m', 'pipeline.run', f'--input_dir={folder}/in', f'--output_dir={folder}/out']


def _targz(folder: str) -> list[str]:
    os.makedirs(f'{folder}/in/train')
    zeros = bytes(200 << 20)
    with tarfile.open(f'{folder}/in/train/c0.tar.gz', 'w:gz', compresslevel=1) as archive:
        for i in range(16):
            info = tarfile.TarInfo(f'{i:02d}.jpg')
            info.size = len(zeros)
            archive.addfile(info, io.BytesIO(zeros))
    return [PY, '-m', 'pipeline.run', f'--input_dir={folder}/in', f'--output_dir={folder}/out',
            '--max_error_ratio=1']


def _verify(folder: str) -> list[str]:
    os.makedirs(f'{folder}/in/train/c0')
    Image.new('RGB', (32, 24)).save(f'{folder}/in/train/c0/a.jpg')
    subprocess.run([PY, '-m', 'pipeline.run', f'--input_dir={folder}/in',
                    f'--output_dir={folder}/out'], check=True, capture_output=True)
    path = f'{folder}/out/dataset_info.json'
    with open(path) as stream:
        info = json.load(stream)
    info['splits'][0]['shardLengths'] = ['1'] * 10_000_000
    with open(path, 'w') as stream:
        json.dump(info, stream)
    return [PY, '-m', 'pipeline.tools.verify', f'{folder}/out']


def _gradient(channels: int) -> Image.Image:
    y, x = np.mgrid[:9400, :9400].astype(np.uint16)
    planes = [x % 256, y % 256, (x + y) % 256, x % 199][:channels]
    return Image.fromarray(np.stack(planes, -1).astype(np.uint8))


def _webp(folder: str) -> list[str]:
    os.makedirs(f'{folder}/in/train/c0')
    _gradient(3).save(f'{folder}/in/train/c0/big.webp', quality=50, method=0)
    return [PY, '-m', 'pipeline.run', f'--input_dir={folder}/in', f'--output_dir={folder}/out',
            '--max_error_ratio=1']


def _padded_png(path: str) -> None:
    exif = Image.Exif()
    exif[0x0112] = 6
    stream = io.BytesIO()
    _gradient(4).save(stream, 'PNG', compress_level=1, exif=exif)
    png, padding = stream.getvalue(), bytes(250 << 20)
    chunk = (len(padding).to_bytes(4, 'big') + b'zzZz' + padding
             + zlib.crc32(b'zzZz' + padding).to_bytes(4, 'big'))
    with open(path, 'wb') as out:
        out.write(png[:33] + chunk + png[33:])


def _padded(folder: str) -> list[str]:
    os.makedirs(f'{folder}/in/train/c0')
    _padded_png(f'{folder}/in/train/c0/big.png')
    return [PY, '-m', 'pipeline.run', f'--input_dir={folder}/in', f'--output_dir={folder}/out',
            '--max_error_ratio=1']


def _padded_targz(folder: str) -> list[str]:
    os.makedirs(f'{folder}/in/train')
    _padded_png(f'{folder}/big.png')
    with tarfile.open(f'{folder}/in/train/c0.tar.gz', 'w:gz', compresslevel=1) as archive:
        archive.add(f'{folder}/big.png', 'big.png')
    os.remove(f'{folder}/big.png')
    return [PY, '-m', 'pipeline.run', f'--input_dir={folder}/in', f'--output_dir={folder}/out',
            '--max_error_ratio=1']


INPUTS = {'png': _png, 'targz': _targz, 'verify': _verify, 'webp': _webp, 'padded': _padded,
          'padded_targz': _padded_targz}


def main(names: list[str]) -> None:
    print(f'{"input":<14}{"exit":>5}{"launcher MB":>13}{"largest other MB":>18}')
    for name in names or INPUTS:
        with tempfile.TemporaryDirectory() as folder:
            code, launcher, other = _measure(INPUTS[name](folder))
        print(f'{name:<14}{code:>5}{launcher:>13.0f}{other:>18.0f}')


if __name__ == '__main__':
    main(sys.argv[1:])

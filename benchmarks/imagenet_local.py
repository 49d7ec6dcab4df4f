"""A local run of ImageNet's shape, with the memory of every process and the temporary disk:

    python -m benchmarks.imagenet_local [--sizes 20000 200000 1281167] [--root DIR]
                                        [--packed folder zip tar tar.gz] [--checkout DIR] [--keep]

Each size is a folder of that many small distinct JPEGs in 1,000 class folders, 4% of them in
validation/ (pipeline/testing/imagenet_shape.py), made once under --root and reused; --packed
also converts it packed, each packing made once beside it: `zip`, one stored zip of Kaggle's
layout (`--input_dir=SIZE.zip/ILSVRC/Data/CLS-LOC`, its train/ and validation/ there), `tar`, one
flat tar of the folder, `tar.gz`, the same tar compressed as `tar czf` compresses it. The default command converts it (`python -m pipeline.run --input_dir=... --output_dir=...`: a multi-process
local run, one worker per core) while its process tree is sampled every 0.2 s. Printed per size:
exit code, wall seconds, the conversion stage's own seconds (from the progress lines) and the
whole run's ratio to it, inputs/s, the peak resident MB of the launcher and of the largest worker,
the peak of all processes together (PSS), and the peak of the run's temporary folder; then the
launcher's growth per input between consecutive sizes. --checkout runs another checkout's code
(its folder first on PYTHONPATH), to compare two versions on the same inputs. The output of each
size is removed unless --keep.
"""
import argparse
import glob
import os
import re
import shutil
import sys
import tarfile
import tempfile
import threading
import time

from pipeline.testing import archivemaker, imagenet_shape
from pipeline.testing.process_memory import sample_command

MB = 1 << 20
KAGGLE = 'ILSVRC/Data/CLS-LOC'   # The folder of Kaggle's ImageNet zip that holds the splits.


def measure(inputs: str, output: str, checkout: str | None = None) -> dict:
    """One conversion of `inputs` into `output`, measured."""
    env = dict(os.environ)
    if checkout:
        env['PYTHONPATH'] = os.pathsep.join([checkout, env.get('PYTHONPATH', '')]).rstrip(os.pathsep)
    temp_peak, done = [0], threading.Event()

    def watch_temp() -> None:
        while not done.wait(1.0):
            temp_peak[0] = max(temp_peak[0], sum(_tree_bytes(t) for t in glob.glob(f'{output}/.tmp-*')))

    watcher = threading.Thread(target=watch_temp, daemon=True)
    watcher.start()
    started = time.monotonic()
    try:
        result = sample_command([sys.executable, '-m', 'pipeline.run', f'--input_dir={inputs}',
                                 f'--output_dir={output}'], every=0.2, env=env,
                                cwd=checkout or None)
    finally:
        done.set()
        watcher.join()
    return {'code': result.returncode, 'seconds': time.monotonic() - started,
            'converting': converting_seconds(result.stderr_lines),
            'launcher': result.launcher, 'worker': result.largest_other,
            'together': result.together, 'temp': temp_peak[0],
            'error': result.stderr.strip().splitlines()[-1:] if result.returncode else []}


def packed(folder: str, kind: str) -> str:
    """The --input_dir of `folder` packed as `kind` ('folder': itself), made once beside it."""
    if kind == 'folder':
        return folder
    path = f'{folder}.{kind}'
    if not os.path.exists(path):
        files = sorted(os.path.relpath(os.path.join(top, name), folder)
                       for top, _, names in os.walk(folder) for name in names
                       if not name.startswith('.'))
        if kind == 'zip':
            archivemaker.write_stored_zip(
                f'{path}.part', ((f'{KAGGLE}/{name}', _read(folder, name)) for name in files))
        else:
            with tarfile.open(f'{path}.part', 'w' if kind == 'tar' else 'w:gz',
                              format=tarfile.PAX_FORMAT,
                              **({} if kind == 'tar' else {'compresslevel': 6})) as tar:
                for name in files:
                    tar.add(os.path.join(folder, name), name)
        os.rename(f'{path}.part', path)
    return f'{path}/{KAGGLE}' if kind == 'zip' else path


def _read(folder: str, name: str) -> bytes:
    with open(os.path.join(folder, name), 'rb') as stream:
        return stream.read()


def converting_seconds(lines: list[tuple[float, str]]) -> float | None:
    """The conversion stage's own seconds, from the progress lines a run prints off a terminal
    (a line per tenth of the work): the time from the first line to the 100% line, scaled up by
    the share of the work the first line says was done before it."""
    seen = [(t, int(m.group(1).replace(',', '')), int(m.group(2).replace(',', '')))
            for t, line in lines if (m := re.search(r'converting: ([\d,]+) of ([\d,]+) inputs', line))]
    if len(seen) < 2 or seen[-1][1] != seen[-1][2]:
        return None
    (first, done, total), last = seen[0], seen[-1][0]
    return (last - first) * total / (total - done) if done < total else None


def _tree_bytes(folder: str) -> int:
    total = 0
    for path, _, names in os.walk(folder):
        for name in names:
            try:
                total += os.lstat(os.path.join(path, name)).st_size
            except OSError:
                pass
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--sizes', type=int, nargs='+', default=[20_000, 200_000])
    parser.add_argument('--root', default=os.path.join(tempfile.gettempdir(), 'imagenet-shape'))
    parser.add_argument('--packed', nargs='+', choices=('folder', 'zip', 'tar', 'tar.gz'),
                        default=['folder'], help='Convert the folder, and/or it packed so.')
    parser.add_argument('--checkout', help='Run this checkout of the product instead.')
    parser.add_argument('--keep', action='store_true', help='Keep each output folder.')
    args = parser.parse_args()
    print(f'{"packed":>6} {"inputs":>9} {"code":>4} {"seconds":>8} {"converting":>11} {"whole/conv":>10} '
          f'{"inputs/s":>9} {"launcher MB":>12} {"worker MB":>10} {"together MB":>12} '
          f'{"temp MB":>8}')
    measured = {kind: [] for kind in args.packed}
    for size in args.sizes:
        folder = imagenet_shape.make(os.path.join(args.root, str(size)), size)
        for kind in args.packed:
            output = os.path.join(args.root, f'out-{size}')
            shutil.rmtree(output, ignore_errors=True)
            found = measure(packed(folder, kind), output, args.checkout)
            measured[kind].append((size, found))
            converting = found['converting'] or float('nan')
            print(f'{kind:>6} {size:>9} {found["code"]:>4} {found["seconds"]:>8.1f} '
                  f'{converting:>11.1f} {found["seconds"] / converting:>10.2f} '
                  f'{size / found["seconds"]:>9.0f} {found["launcher"] / MB:>12.0f} '
                  f'{found["worker"] / MB:>10.0f} {found["together"] / MB:>12.0f} '
                  f'{found["temp"] / MB:>8.0f}', *found['error'], flush=True)
            if not args.keep:
                shutil.rmtree(output, ignore_errors=True)
    for kind, sizes in measured.items():
        for (n1, a), (n2, b) in zip(sizes, sizes[1:]):
            print(f'{kind} launcher growth {n1} -> {n2}: '
                  f'{(b["launcher"] - a["launcher"]) / (n2 - n1):.0f} bytes per input')


if __name__ == '__main__':
    main()

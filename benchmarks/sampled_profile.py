"""Where the workers' time goes, per image, as the command line runs: sampled, not traced.

    python -m benchmarks.sampled_profile [--n 10000] [--rate 200]

Converts the benchmark workload (benchmarks/workload.py) with `python -m pipeline.run` (its
default runner: a worker process per core) under py-spy, which samples the stacks of every
process of the tree `--rate` times a second without slowing Python calls (benchmarks/profile.py
traces one in-process worker under cProfile instead, which inflates Python-heavy steps). Each
sample pauses the process for its stack: sampled while it runs (py-spy's --nonblocking), a
stack is read while it changes, and steps were found under functions that never call them. Samples
of the worker processes inside chunk conversion (EncodeChunks.process) are split into the steps
an image goes through, by the first step whose function is on the stack; the table gives CPU
microseconds per image and the share of the conversion stage.
"""
import argparse
import collections
import functools
import linecache
import os
import re
import shutil
import subprocess
import sys
import tempfile

from benchmarks.workload import make_workload

# Step -> what marks it on a sample's stack: a Python function (as py-spy names it), or words
# of the source line a frame stands on (a C call such as the SHA-256 shows only as the line of
# Python that made it). The first step marked on a stack gets the sample.
STEPS = {
    'strict reduced-scale decode (the verdict, and the pixels the hashes read)': ['check_jpeg'],
    'perceptual hashes': ['perceptual_hashes'],
    'non-JPEG decode through Pillow': ['ImageFile.load'],
    're-encoding what is not kept as it is, and its decode': ['_decode_rgb', '_plain_png_rgb',
                                                             'Image.resize',
                                                             'simplejpeg.encode_jpeg('],
    'read the file': ['_ReadWhenTaken.result', 'Future.result'],
    'Example encoding': ['encode_example'],
    'SHA-256': ['hashlib.sha256('],
    'TFRecord framing (CRC32C)': ['frame_record'],
    'writing the record into its part file': ['out.write(framed)'],
}
CONVERSION = 'EncodeChunks.process'
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRAME = re.compile(r'(?P<function>.+) \((?P<file>[^()]*):(?P<line>\d+)\)$')


@functools.lru_cache(maxsize=None)
def _marks(frame: str) -> frozenset[str]:
    """The function of a py-spy frame and, for this repository's code, its source line."""
    found = FRAME.match(frame)
    if found is None:
        return frozenset((frame,))
    marks = {found['function']}
    path = os.path.join(REPO, found['file'])
    if os.path.isfile(path):
        marks.add(linecache.getline(path, int(found['line'])))
    return frozenset(marks)


def _step(frames: list[str]) -> str:
    for name, markers in STEPS.items():
        for frame in frames:
            if any(mark == marker or (mark.endswith('\n') and marker in mark)
                   for mark in _marks(frame) for marker in markers):
                return name
    return 'the rest of a chunk: bookkeeping, writing, Beam per element'


def split_samples(raw: str) -> tuple[collections.Counter, int]:
    """(samples per step inside chunk conversion, worker samples) of py-spy's raw output."""
    steps, workers = collections.Counter(), 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(' ')
        frames = stack.split(';')
        if len(frames) < 2 or not frames[1].startswith('process '):
            continue   # The launcher's: py-spy names a worker process below it.
        workers += int(count)
        if any(frame.startswith(CONVERSION + ' ') for frame in frames):
            steps[_step(frames)] += int(count)
    return steps, workers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=10000)
    parser.add_argument('--rate', type=int, default=200, help='Samples per second.')
    parser.add_argument('--workdir', default=os.path.join(tempfile.gettempdir(), 'image_tfrecords_bench'))
    args = parser.parse_args()
    py_spy = shutil.which('py-spy', path=os.path.dirname(sys.executable)) or shutil.which('py-spy')
    if py_spy is None:
        sys.exit("py-spy is not installed: pip install -e '.[bench]'")
    workload = make_workload(os.path.join(args.workdir, f'images-{args.n}'), args.n)
    output = os.path.join(args.workdir, 'sampled-profile-out')
    raw = os.path.join(args.workdir, 'sampled-profile.txt')
    subprocess.run([py_spy, 'record', '--subprocesses', '--rate', str(args.rate),
                    '--format', 'raw', '--output', raw, '--', sys.executable, '-m', 'pipeline.run',
                    f'--input_dir={workload}', f'--output_dir={output}', '--overwrite'],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.rmtree(output, ignore_errors=True)
    with open(raw) as stream:
        steps, workers = split_samples(stream.read())
    per_image = 1e6 / args.rate / args.n   # µs of CPU per image that one sample stands for
    conversion = sum(steps.values())
    print(f'{args.n} images, {os.cpu_count()} cores, {args.rate} samples/s; worker samples '
          f'{workers}, of them in chunk conversion {conversion} '
          f'({conversion * per_image:.0f} µs per image)')
    print('| step | µs per image | share of the conversion stage |')
    print('| --- | ---: | ---: |')
    for step, samples in steps.most_common():
        print(f'| {step} | {samples * per_image:.0f} | {samples / conversion:.0%} |')


if __name__ == '__main__':
    main()

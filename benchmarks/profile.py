"""Where one worker's time goes, per image: a whole conversion profiled with cProfile.

    python -m benchmarks.profile [--n 20000] [--reencode]

Converts the benchmark workload (benchmarks/workload.py) local -> local in this process, on one
worker thread (DirectRunner in memory), under cProfile, and splits the time into the steps an
image goes through. cProfile adds a fixed cost to every Python call, so steps made of many small
Python calls look larger than they are; the codec steps are single C calls and are not inflated.
"""
import argparse
import cProfile
import os
import pstats
import shutil
import tempfile

from benchmarks.workload import make_workload

# Step -> functions (file suffix, name) whose cumulative time is the step's.
STEPS = {
    'read the file': [('pipeline/io/fileio.py', 'read_bytes')],
    'header: Pillow open (format, size, mode)': [('PIL/Image.py', 'open')],
    'header: EXIF orientation': [('PIL/Image.py', 'getexif')],
    'header: JPEG header parse': [('transforms/images.py', 'jpeg_header')],
    'codec: strict reduced-scale decode (verdict)': [('pipeline/quality/jpeg_check.py', 'check_jpeg')],
    'perceptual hash and mirror hash': [('pipeline/quality/phash.py', 'perceptual_hashes')],
    'codec: decode, convert, re-encode': [('transforms/images.py', '_decode_rgb'),
                                          ('transforms/images.py', '_orient'),
                                          ('~', "<built-in method simplejpeg._jpeg.encode_jpeg>")],
    'SHA-256': [('~', '<built-in method _hashlib.openssl_sha256>'),
                ('~', "<method 'hexdigest' of '_hashlib.HASH' objects>")],
    'Example encoding': [('pipeline/output/records.py', 'encode_example')],
    'TFRecord framing (CRC32C)': [('pipeline/output/records.py', 'frame_record')],
}


def _cumulative(stats: pstats.Stats, file_suffix: str, name: str) -> float:
    return sum(ct for (path, _, func), (_, _, _, ct, _) in stats.stats.items()
               if func == name and path.endswith(file_suffix))


def _encode_chunk_seconds(stats: pstats.Stats) -> float:
    """Cumulative time of EncodeChunks.process."""
    import inspect

    from transforms.encode_chunks import EncodeChunks
    line = inspect.getsourcelines(EncodeChunks.process)[1]
    return sum(ct for (path, lineno, func), (_, _, _, ct, _) in stats.stats.items()
               if path.endswith('transforms/encode_chunks.py') and (lineno, func) == (line, 'process'))


def profile(workload: str, output: str, reencode: bool) -> tuple[pstats.Stats, dict]:
    from pipeline import job
    flags = [f'--input_dir={workload}', f'--output_dir={output}', '--overwrite',
             '--direct_running_mode=in_memory', '--direct_num_workers=1']
    profiler = cProfile.Profile()
    profiler.enable()
    summary = job.convert(flags + (['--reencode'] if reencode else []))
    profiler.disable()
    return pstats.Stats(profiler), summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=20000)
    parser.add_argument('--reencode', action='store_true')
    parser.add_argument('--workdir', default=os.path.join(tempfile.gettempdir(), 'image_tfrecords_bench'))
    args = parser.parse_args()
    workload = make_workload(os.path.join(args.workdir, f'images-{args.n}'), args.n)
    output = os.path.join(args.workdir, 'profile-out')
    stats, summary = profile(workload, output, args.reencode)
    shutil.rmtree(output, ignore_errors=True)
    images = sum(s['records'] + s['skipped'] for s in summary['splits'].values())
    total = stats.total_tt
    encode = _encode_chunk_seconds(stats)
    rows = [(step, sum(_cumulative(stats, *f) for f in functions)) for step, functions in STEPS.items()]
    rows.append(('rest of converting a chunk (bookkeeping, writing)', encode - sum(t for _, t in rows)))
    rows.append(('outside chunk conversion: start-up, listing, planning, shuffles, joining, commit',
                 total - encode))
    print(f'{images} images, {total:.1f} s profiled, one worker thread'
          f'{", --reencode" if args.reencode else ""}')
    print('| step | share of time | µs per image |')
    print('| --- | ---: | ---: |')
    for step, seconds in rows:
        print(f'| {step} | {seconds / total:.1%} | {seconds / images * 1e6:.0f} |')
    print(f'| total | 100% | {total / images * 1e6:.0f} |')


if __name__ == '__main__':
    main()

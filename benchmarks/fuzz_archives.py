"""A seeded, time-bounded fuzzer over the archive readers (pipeline/inputs/archives.py and the
readers of each kind it picks).

    python -m benchmarks.fuzz_archives --seconds 300 [--seed 1] [--folder DIR]
    python -m benchmarks.fuzz_archives --replay DIR/case-1-2041.tar

Each case is one of a few small valid archives made by pipeline/testing/archivemaker.py (tars
with pax and GNU long names, zips deflated, stored, bzip2 and zip64, gzip tars and concatenated
gzip members, archives inside archives), mutated where its structure is (tar header fields with
their checksum made valid again, pax records, a pax header grown to 1 MiB, zip local headers,
central directory, zip64 and end records) and anywhere (bytes flipped, stretches cut, copied or
repeated up to 1 MiB); a gzip tar is mutated before or after it is compressed.

A worker process lists each case as the folder layout does (folders.walk, archives inside
expanded) and reads every member as a conversion does (Member.read by byte range, one pass for
a gzip tar's members, members_read as webdataset shards are read). The invariant: every problem
is a member with an error naming it, or a fileio.DamagedInput from a read, never another
exception; no case takes more than CASE_SECONDS (a linear read of a case takes milliseconds) nor
CASE_MEMORY of resident memory above the worker's before it. A case that breaks it is written to
the folder, to be replayed with --replay.
"""
import argparse
import dataclasses
import gzip
import json
import os
import random
import re
import resource
import select
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
import zipfile

from pipeline.testing import archivemaker

CASE_SECONDS = 10.0
WARM_UP_SECONDS = 120.0         # For a worker to load what the readers need.
CASE_MEMORY = 128 << 20
READ_LIMIT = 4 << 20            # --max_input_mb of the reads: members over it are reported.
GROWTH = 1 << 20                # Bytes a mutation adds at most.
SUFFIXES = {'tar': '.tar', 'zip': '.zip', 'gz': '.tar.gz'}

_INTS = [0, 1, 2, 7, 8, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0xFFFF, 0x10000, 0x7FFFFFFF,
         0xFFFFFFFF, 1 << 32, 1 << 33, (1 << 63) - 1, (1 << 64) - 1]
_TAR_FIELDS = [(0, 100), (100, 8), (124, 12), (136, 12), (148, 8), (156, 1), (157, 100),
               (257, 6), (263, 2), (345, 155), (482, 1)]
_TAR_TYPES = [b'0', b'\0', b'1', b'2', b'5', b'7', b'L', b'K', b'x', b'g', b'S', b'X', b'V']
# Signature -> (offset, width) of its number fields: local header, central directory entry,
# end record, zip64 end record, zip64 locator.
_ZIP_FIELDS = {b'PK\3\4': [(6, 2), (8, 2), (14, 4), (18, 4), (22, 4), (26, 2), (28, 2)],
               b'PK\1\2': [(8, 2), (10, 2), (16, 4), (20, 4), (24, 4), (28, 2), (30, 2), (32, 2),
                           (34, 2), (42, 4)],
               b'PK\5\6': [(4, 2), (6, 2), (8, 2), (10, 2), (12, 4), (16, 4), (20, 2)],
               b'PK\6\6': [(4, 8), (24, 8), (32, 8), (40, 8), (48, 8)],
               b'PK\6\7': [(4, 4), (8, 8), (16, 4)]}
_PATTERNS = [b'0', b'1', b'2 ', b'9 ', b' ', b'\0', b'/', b'a=', b'\n', b'PK\3\4', b'PK\1\2',
             b'PK\5\6', b'\x1f\x8b\x08\0\0\0\0\0\0\xff']


@dataclasses.dataclass
class Report:
    cases: int = 0
    failures: list = dataclasses.field(default_factory=list)   # {case, what, file}
    counts: dict = dataclasses.field(default_factory=dict)      # Outcomes over all cases.
    slowest: float = 0.0        # Seconds of the slowest case.
    peak: int = 0               # Bytes of resident memory the largest case added.


def seeds() -> list[tuple[str, bytes]]:
    """(kind, bytes) of the valid archives cases are made from; a gzip tar's bytes are its tar."""
    a, b, c, d = (random.Random(i).randbytes(300 + 200 * i) for i in range(4))
    long_name = 'n' * 120 + '/long.jpg'
    inner_tar = archivemaker.tar({'x/a.jpg': a, 'b.jpg': b})
    inner_zip = archivemaker.zip_({'c/a.jpg': c, 'c/': b''})
    pax_tar = archivemaker.tar({'cat/': b'', 'cat/a.jpg': a, long_name: b, 'dog/b.jpg': c})
    pax_described = (archivemaker.tar_entry('x', archivemaker.pax_record(b'path', b'p/a.jpg')
                                            + archivemaker.pax_record(b'size', b'300'), b'x')
                     + archivemaker.tar_entry('a.jpg', a) + bytes(1024))
    stored = zipfile.ZIP_STORED
    return [
        ('tar', pax_tar),
        ('tar', archivemaker.tar({long_name: d, 'cat/a.jpg': b}, form=tarfile.GNU_FORMAT)),
        ('tar', archivemaker.tar({'in.tar': inner_tar, 'in.zip': inner_zip, 'c.jpg': a})),
        ('tar', pax_described),
        ('zip', archivemaker.zip_({'cat/': b'', 'cat/a.jpg': a, long_name: b})),
        ('zip', archivemaker.zip_({'in.tar': inner_tar, 'in.zip': inner_zip, 'b.jpg': c}, stored)),
        ('zip', archivemaker.zip_({'a.jpg': d, 'b.jpg': a}, zipfile.ZIP_BZIP2)),
        ('zip', archivemaker.zip64({'cat/a.jpg': a, 'in.tar': inner_tar})),
        ('gz', pax_tar),
        ('gz', archivemaker.tar({'in.zip': inner_zip, 'in.tar': inner_tar, 'b.jpg': d,
                                 'in.tar.gz': archivemaker.tar({'d.jpg': b}, 'gz')})),
    ]


def make_case(seed: int, index: int) -> tuple[str, bytes]:
    """The file name and bytes of case `index` of the run `seed`: the same on every machine."""
    rng = random.Random(f'{seed}/{index}')
    kinds = seeds()
    kind, data = rng.choice(kinds)
    others = [d for _, d in kinds]
    if kind != 'gz':
        return f'case{SUFFIXES[kind]}', mutate(rng, data, others)
    if rng.random() < 0.7:
        return 'case.tar.gz', gzip.compress(mutate(rng, data, others), 1, mtime=0)
    compressed = gzip.compress(data, 1, mtime=0) * rng.choice([1, 1, 2])   # Concatenated too.
    return 'case.tar.gz', mutate(rng, compressed, [])


def mutate(rng: random.Random, data: bytes, others: list[bytes]) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        rng.choice(_MUTATIONS)(rng, out, others)
    if rng.random() < 0.85:
        _fix_tar_checksums(out)
    return bytes(out)


def _flip(rng, out, others):
    for _ in range(rng.randint(1, 8)):
        if out:
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)


def _tar_field(rng, out, others):
    headers = _tar_headers(out)
    if not headers:
        return _flip(rng, out, others)
    at = rng.choice(headers)
    start, width = rng.choice(_TAR_FIELDS)
    number = rng.choice(_INTS + [len(out), rng.randrange(1 << 40)])
    value = rng.choice([
        (b'%o' % (number % 8 ** (width - 1))).rjust(width - 1, b'0') + b'\0',
        b'\x80' + (number % 256 ** (width - 1)).to_bytes(width - 1, 'big'),
        b'\xff' * width, rng.randbytes(width), rng.choice(_TAR_TYPES) * width,
        b'../' * (width // 3), b'/' + b'a' * (width - 1)])
    out[at + start:at + start + width] = value[:width].ljust(width, b'\0')


def _pax_record(rng, out, others):
    found = list(re.finditer(rb'(\d{1,7}) (path|size|linkpath|[A-Za-z.]{1,40})=', out))
    if not found:
        return _tar_field(rng, out, others)
    match = rng.choice(found)
    value = rng.choice([b'-1', b'0', b'abc', b'1' * 30, b'%d' % rng.choice(_INTS), b'../x',
                        b'/etc/x', b'', b'a' * 200])
    if rng.random() < 0.5:
        out[match.start(1):match.end(1)] = value.strip(b'-') or b'0'
    else:
        end = out.find(b'\n', match.end())
        out[match.end():end if end > 0 else match.end()] = value


def _grown_pax(rng, out, others):
    """A pax header grown by up to GROWTH bytes of one pattern, its size field saying so."""
    headers = [at for at in _tar_headers(out) if out[at + 156:at + 157] in (b'x', b'g')]
    if not headers:
        return _repeat(rng, out, others)
    at = rng.choice(headers)
    digits = bytes(out[at + 124:at + 135]).strip(b'\0 ')
    if digits.strip(b'01234567'):
        return _repeat(rng, out, others)
    size = int(digits or b'0', 8)
    grown = (rng.choice(_PATTERNS) * GROWTH)[:rng.randrange(1, GROWTH)]
    records = bytes(out[at + 512:at + 512 + size]) + grown
    out[at + 512:at + 512 + -(-size // 512) * 512] = records + bytes(-len(records) % 512)
    out[at + 124:at + 136] = b'%011o\0' % len(records)


def _zip_field(rng, out, others):
    places = [(m.start(), signature) for signature in _ZIP_FIELDS
              for m in re.finditer(re.escape(signature), out)]
    if not places:
        return _flip(rng, out, others)
    at, signature = rng.choice(places)
    start, width = rng.choice(_ZIP_FIELDS[signature])
    number = rng.choice(_INTS + [len(out), at, rng.randrange(1 << 32)])
    out[at + start:at + start + width] = (number % 256 ** width).to_bytes(width, 'little')


def _cut(rng, out, others):
    start = rng.randrange(len(out) + 1)
    end = rng.choice([len(out), min(len(out), start + rng.randrange(1, 2048))])
    del out[start:end]


def _copy(rng, out, others):
    start = rng.randrange(len(out) + 1)
    piece = out[start:start + rng.randrange(1, 4096)]
    at = rng.randrange(len(out) + 1)
    out[at:at] = piece


def _repeat(rng, out, others):
    pattern = rng.choice(_PATTERNS + [bytes(out[a:a + 512]) for a in _tar_headers(out)[:3]])
    at = rng.randrange(len(out) + 1)
    out[at:at] = (pattern * (GROWTH // len(pattern) + 1))[:rng.randrange(1, GROWTH)]


def _splice(rng, out, others):
    if others:
        other = rng.choice(others)
        start = rng.randrange(len(other))
        at = rng.randrange(len(out) + 1)
        out[at:at] = other[start:start + rng.randrange(1, len(other) + 1)]


_MUTATIONS = [_flip, _tar_field, _tar_field, _pax_record, _grown_pax, _zip_field, _zip_field,
              _cut, _copy, _repeat, _splice]


def _tar_headers(out: bytearray) -> list[int]:
    return [m.start() - 257 for m in re.finditer(rb'ustar', out)
            if m.start() >= 257 and (m.start() - 257) % 512 == 0]


def _fix_tar_checksums(out: bytearray) -> None:
    """Makes the checksum of each tar header valid again, so mutations reach what is behind it."""
    for at in _tar_headers(out):
        block = out[at:at + 512]
        if len(block) == 512:
            out[at + 148:at + 156] = b'%06o\0 ' % (sum(block[:148]) + 256 + sum(block[156:]))


# The worker: lists and reads cases, says how each went on stdout.

def check(path: str) -> dict:
    """Lists the archive at `path` and reads its members as the pipeline does; the outcomes by
    kind. AssertionError if a member breaks the invariant; any exception other than
    fileio.DamagedInput from a read propagates."""
    from pipeline.inputs import archives, folders, gzip_pass
    from pipeline.io import fileio
    counts = {}

    def count(outcome: str) -> None:
        counts[outcome] = counts.get(outcome, 0) + 1

    wanted = []
    for _, file in folders.walk(folders.place_of(path)):
        member = file.member
        assert member is not None and member.path.startswith(path + '/'), file
        assert file.error is None or (isinstance(file.error, str) and file.error), file
        count('error' if file.error else 'directory' if file.is_dir else 'member')
        if file.error is None and not file.is_dir:
            wanted.append(member)
    for member in wanted:
        if not member.archive.streamed:
            try:
                assert len(member.read(READ_LIMIT)) == member.size, member
                count('read')
            except fileio.DamagedInput:
                count('damaged')
    streamed = [m for m in wanted if m.archive.streamed]   # Read in one pass, as a chunk is.
    found = gzip_pass.read_streamed(streamed, READ_LIMIT) if streamed else {}
    for member in streamed:
        data = found.get((member.name, member.index))
        assert data is None or isinstance(data, str) or len(data) == member.size, member
        count('damaged' if isinstance(data, str) else 'read')
    archive = archives.Archive.of_file(path, os.path.getsize(path), None)
    for member, value in archives.members_read(archive, lambda m: True, lambda m, d: len(d)):
        assert value is None or value <= max(member.size, 0), member
    return counts


def _peak_above(before: int) -> int:
    status = open('/proc/self/status').read()
    return int(re.search(r'VmHWM:\s+(\d+)', status)[1]) * 1024 - before


def _resident() -> int:
    open('/proc/self/clear_refs', 'w').write('5')   # Resets the peak to what is resident now.
    return int(re.search(r'VmRSS:\s+(\d+)', open('/proc/self/status').read())[1]) * 1024


def _run_case(folder: str, seed: int, index: int) -> dict:
    name, data = make_case(seed, index)
    path = os.path.join(folder, f'c{index}', name)   # Its own path: listings are cached by it.
    os.makedirs(os.path.dirname(path))
    with open(path, 'wb') as stream:
        stream.write(data)
    before, started = _resident(), time.monotonic()
    try:
        counts, broken = check(path), None
    except Exception:   # noqa: BLE001 (every exception is the finding)
        counts, broken = {}, traceback.format_exc(limit=-6)
    seconds, peak = time.monotonic() - started, _peak_above(before)
    os.remove(path)
    os.rmdir(os.path.dirname(path))
    return {'case': index, 'counts': counts, 'broken': broken, 'seconds': seconds, 'peak': peak}


def worker(folder: str, seed: int, first: int, seconds: float) -> None:
    """Runs cases from `first` for `seconds` after a warm-up (`ready`), a line of JSON on stdout
    for each (and a line `start N` before it). Its data segment is bounded: a bomb is a
    MemoryError, not the machine's memory."""
    _warm_up(folder)
    used = int(re.search(r'VmData:\s+(\d+)', open('/proc/self/status').read())[1]) * 1024
    resource.setrlimit(resource.RLIMIT_DATA, (used + 4 * CASE_MEMORY, resource.RLIM_INFINITY))
    print('ready', flush=True)
    index, until = first, time.monotonic() + seconds
    while time.monotonic() < until:
        print(f'start {index}', flush=True)
        print(json.dumps(_run_case(folder, seed, index)), flush=True)
        index += 1


def _warm_up(folder: str) -> None:
    """Checks each seed once, so that what a first listing loads (Beam's file systems) is not
    counted in a case's memory."""
    for number, (kind, data) in enumerate(seeds()):
        path = os.path.join(folder, f'seed{number}{SUFFIXES[kind]}')
        with open(path, 'wb') as stream:
            stream.write(gzip.compress(data) if kind == 'gz' else data)
        check(path)
        os.remove(path)


# The parent: runs a worker, restarts it after a case that kills it or takes too long.

def run(seconds: float, seed: int = 1, folder: str | None = None) -> Report:
    """Fuzzes for `seconds` (of cases, not counting the workers' start); failing cases are
    written to `folder` (a temporary one if None)."""
    folder = folder or tempfile.mkdtemp(prefix='fuzz-archives-')
    os.makedirs(folder, exist_ok=True)
    report, index = Report(), 0
    while seconds > 0:
        index, spent = _run_worker(report, folder, seed, index, seconds)
        seconds -= spent
        index += 1
    return report


def _run_worker(report: Report, folder: str, seed: int, first: int,
                seconds: float) -> tuple[int, float]:
    """Runs a worker from case `first` for at most `seconds`: the index of the last case it
    started, and the seconds it ran cases."""
    command = [sys.executable, '-m', 'benchmarks.fuzz_archives', '--worker', f'--seed={seed}',
               f'--first={first}', f'--seconds={seconds}', f'--folder={folder}']
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(folder, 'worker.log'), 'wb') as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, cwd=root)
    lines, index = _Lines(process.stdout.fileno()), first - 1
    try:
        if lines.next(WARM_UP_SECONDS) != 'ready':
            raise RuntimeError(f'the fuzzing worker did not start: see {folder}/worker.log')
        started = time.monotonic()
        while (line := lines.next(CASE_SECONDS)) not in (None, ''):
            if line.startswith('start '):
                index = int(line.split()[1])
            else:
                _record(report, folder, seed, json.loads(line))
        if line is None:
            _fail(report, folder, seed, index, f'took over {CASE_SECONDS:.0f} s')
        elif process.wait() != 0:
            with open(os.path.join(folder, 'worker.log')) as log:
                _fail(report, folder, seed, index,
                      f'the worker died ({process.returncode}): {log.read()[-2000:]}')
        return index, time.monotonic() - started
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait()
        process.stdout.close()


class _Lines:
    """Lines of a pipe, each waited for at most a given time."""

    def __init__(self, fd: int):
        self._fd, self._buffer = fd, b''

    def next(self, timeout: float) -> str | None:
        """The next line; '' at the end of the pipe, None if none came within `timeout`."""
        deadline = time.monotonic() + timeout
        while b'\n' not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._fd], [], [], left)[0]:
                return None
            data = os.read(self._fd, 1 << 16)
            if not data:
                return ''
            self._buffer += data
        line, self._buffer = self._buffer.split(b'\n', 1)
        return line.decode()


def _record(report: Report, folder: str, seed: int, result: dict) -> None:
    report.cases += 1
    report.slowest = max(report.slowest, result['seconds'])
    report.peak = max(report.peak, result['peak'])
    for outcome, number in result['counts'].items():
        report.counts[outcome] = report.counts.get(outcome, 0) + number
    if result['broken']:
        _fail(report, folder, seed, result['case'], result['broken'])
    elif result['peak'] > CASE_MEMORY:
        _fail(report, folder, seed, result['case'], f'took {result["peak"] >> 20} MiB')


def _fail(report: Report, folder: str, seed: int, index: int, what: str) -> None:
    name, data = make_case(seed, index)
    path = os.path.join(folder, f'case-{seed}-{index}{name[4:]}')
    with open(path, 'wb') as stream:
        stream.write(data)
    report.failures.append({'case': index, 'what': what, 'file': path})


def replay(path: str) -> None:
    """Checks one case file in this process and prints what it found (a traceback if it broke)."""
    started = time.monotonic()
    print(check(path), f'{time.monotonic() - started:.2f} s')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--seconds', type=float, default=60)
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--folder', help='where failing cases are written (default: a new '
                                         'temporary folder)')
    parser.add_argument('--replay', metavar='FILE', help='check one case file')
    parser.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--first', type=int, default=0, help=argparse.SUPPRESS)

    args = parser.parse_args(argv)
    if args.replay:
        replay(args.replay)
        return 0
    if args.worker:
        worker(args.folder, args.seed, args.first, args.seconds)
        return 0
    started = time.monotonic()
    report = run(args.seconds, args.seed, args.folder)
    print(f'{report.cases} cases in {time.monotonic() - started:.0f} s (seed {args.seed}); '
          f'slowest case {report.slowest:.2f} s, largest case +{report.peak / 2 ** 20:.1f} MiB '
          f'resident; '
          f'outcomes {report.counts}')
    for failure in report.failures:
        print(f'case {failure["case"]} ({failure["file"]}): {failure["what"]}')
    return 1 if report.failures else 0


if __name__ == '__main__':
    sys.exit(main())

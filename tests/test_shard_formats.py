"""A shard format added from outside the product: one module and one `register` call.

The module below is written by the test; the command line and `verify` run with it imported,
so the format is converted, committed, resumed after a kill and verified without any product
module knowing its name.
"""
import glob
import hashlib
import json
import os
import signal
import subprocess
import sys

import pytest

from pipeline.output import shard_formats
from pipeline.testing import imagemaker
from tests.helpers import IN_PROCESS, output_files, run_with_module, write_tree

pytestmark = pytest.mark.slow

# The three conversions (killed, resumed, whole) run without the check for copies across splits
# (--leakage=off): what is tested is the format's seam, and the check's Beam stages take half of
# a small conversion's time (a kill after a shard with the check on is in
# tests/test_hostile_folders.py).
NO_LEAKAGE_CHECK = '--leakage=off'

FORMAT_MODULE = '''
"""Length-prefixed records with a CRC32 each."""
import struct
import zlib

from pipeline.io import fileio
from pipeline.output import shard_formats
from pipeline.output.records import RecordError


def write_file(records, local_path):
    count = 0
    with open(local_path, 'wb') as out:
        for record in records:
            out.write(struct.pack('>II', len(record), zlib.crc32(record)) + record)
            count += 1
    return count


def read_records(path):
    data, pos = fileio.read_bytes(path), 0
    while pos < len(data):
        length, crc = struct.unpack_from('>II', data, pos)
        record = data[pos + 8:pos + 8 + length]
        if len(record) != length or zlib.crc32(record) != crc:
            raise RecordError(f'record at byte {pos} is damaged')
        yield record
        pos += 8 + length


LENPREFIX = shard_formats.register(shard_formats.ShardFormat(
    name='lenprefix', suffix='lenprefix', tfds_name='lenprefix', write_file=write_file,
    read_records=read_records))
'''


def _run(tmp_path, module: str, *argv, kill_at: str | None = None) -> subprocess.CompletedProcess:
    return run_with_module(tmp_path, 'lenprefix_format', FORMAT_MODULE, module, *argv,
                           kill_at=kill_at)


def test_a_format_registered_outside_the_product_converts_resumes_and_verifies(tmp_path):
    inputs = write_tree(tmp_path / 'in', {f'train/c{i % 3}/{i}.jpg': imagemaker.jpeg(24, 16, seed=i)
                                          for i in range(300)})
    flags = [f'--input_dir={inputs}', '--num_shards=3', '--output_format=tfrecord,lenprefix',
             *IN_PROCESS, NO_LEAKAGE_CHECK]
    out, reference = tmp_path / 'out', tmp_path / 'reference'
    killed = _run(tmp_path, 'pipeline.run', *flags, f'--output_dir={out}', kill_at='shard:2')
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(glob.glob(f'{out}/.tmp-*/shards/*.lenprefix')) == 2
    rerun = _run(tmp_path, 'pipeline.run', *flags, f'--output_dir={out}')
    assert rerun.returncode == 0, rerun.stderr
    assert 'an earlier attempt finished' in rerun.stderr and '2 shards' in rerun.stderr
    whole = _run(tmp_path, 'pipeline.run', *flags, f'--output_dir={reference}')
    assert whole.returncode == 0, whole.stderr
    assert output_files(out) == output_files(reference)

    info = json.loads((out / 'dataset_info.json').read_text())
    assert (info['fileFormat'], info['alternativeFileFormats']) == ('tfrecord', ['lenprefix'])
    tfrecords = sorted(glob.glob(f'{out}/dataset-train.tfrecord-*'))
    twins = sorted(glob.glob(f'{out}/dataset-train.lenprefix-*'))
    assert [os.path.basename(p) for p in twins] == [
        f'dataset-train.lenprefix-0000{i}-of-00003' for i in range(3)]
    (tmp_path / 'reader.py').write_text(
        'import hashlib, sys, lenprefix_format\n'
        'for path in sys.argv[1:]:\n'
        '    records = list(lenprefix_format.LENPREFIX.read_records(path))\n'
        '    print(len(records), hashlib.sha256(b"".join(records)).hexdigest())\n')
    read = subprocess.run([sys.executable, str(tmp_path / 'reader.py'), *twins],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    written = [list(shard_formats.TFRECORD.read_records(path)) for path in tfrecords]
    assert read == [f'{len(shard)} {hashlib.sha256(b"".join(shard)).hexdigest()}'
                    for shard in written]   # The same records, read by the format.

    verified = _run(tmp_path, 'pipeline.tools.verify', str(out))
    assert verified.returncode == 0, verified.stderr
    assert 'lenprefix shards' in verified.stdout
    with open(twins[1], 'r+b') as stream:   # One byte of a record's image.
        stream.seek(500)
        byte = stream.read(1)
        stream.seek(500)
        stream.write(bytes([byte[0] ^ 0xFF]))
    damaged = _run(tmp_path, 'pipeline.tools.verify', str(out))
    assert damaged.returncode == 1
    assert ('train shard 1 (dataset-train.lenprefix-00001-of-00003) record at byte '
            in damaged.stderr) and 'is damaged' in damaged.stderr

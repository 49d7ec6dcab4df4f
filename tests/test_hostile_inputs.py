"""Hostile inputs and leftovers: a hard link into the temporary folder.

Each test runs the command line in a subprocess on a few dozen generated images.
"""
import glob
import os

from pipeline.testing import imagemaker
from tests.helpers import IN_PROCESS, output_files, run_cli, write_tree

TIMEOUT = 120   # No run may hang: a pipe read by mistake would wait for ever.


def _images(n: int, classes: int = 3) -> dict:
    return {f'train/c{i % classes}/{i}.jpg': imagemaker.jpeg(24, 16, seed=i) for i in range(n)}


def _run(inputs: str, out: str, *more: str, **kwargs):
    return run_cli(f'--input_dir={inputs}', f'--output_dir={out}', '--num_shards=2', *IN_PROCESS,
                   *more, timeout=TIMEOUT, **kwargs)


def test_a_hard_linked_part_file_is_replaced_never_written_through(tmp_path):
    inputs = write_tree(tmp_path / 'in', _images(40))
    reference, out = str(tmp_path / 'reference'), str(tmp_path / 'out')
    assert _run(inputs, reference).returncode == 0
    assert _run(inputs, out, kill_at='chunk:1').returncode == -9
    outside = tmp_path / 'outside.txt'
    outside.write_bytes(b'not the tool\'s')
    part = sorted(glob.glob(f'{out}/.tmp-*/parts/*.tfrecord'))[0]
    os.remove(part)
    os.link(outside, part)

    rerun = _run(inputs, out)
    assert rerun.returncode == 0, rerun.stderr
    assert outside.read_bytes() == b'not the tool\'s'
    assert output_files(out) == output_files(reference)

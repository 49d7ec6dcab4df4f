"""What a run reads back from its temporary folder is data, checked before it is used: a file
changed there while the run is on is never executed (a listed input's ref is decoded, not
unpickled: pipeline/inputs/ref_codec.py), and work an earlier attempt left is reused only when
its bytes match the digest its sidecar holds (transforms/resume.py); else it is done again,
with a line saying so, and the dataset is the one an uninterrupted run writes."""
import glob
import os
import pickle
import struct

import pytest

from tests.helpers import IN_PROCESS, stopped_at

FLAGS = ['--num_shards=4', '--leakage=off', *IN_PROCESS]


class _Plant:
    """What unpickled creates a file: a stand-in for any code a pickle can run."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return open, (self.marker, 'w')


def _plant_pickles(folder: str, marker: str) -> int:
    """Replaces the first payload of every listed run under `folder` with a pickle of the same
    length that would create `marker`; returns how many it replaced."""
    planted = 0
    for path in glob.glob(f'{folder}/.tmp-*/listed/*.run'):
        with open(path, 'r+b') as run:
            _, length = struct.unpack('>QI', run.read(12))
            bomb = pickle.dumps(_Plant(marker), pickle.HIGHEST_PROTOCOL)
            assert len(bomb) <= length
            run.write(bomb.ljust(length, b'\0'))
            planted += 1
    return planted


@pytest.mark.slow
def test_a_pickle_planted_in_a_listed_run_is_never_run(tmp_path, image_folders):
    out, marker = str(tmp_path / 'out'), str(tmp_path / 'ran')
    planted = []
    answer = stopped_at('listed:1', lambda: planted.append(_plant_pickles(out, marker)),
                        f'--input_dir={image_folders(60)}', f'--output_dir={out}', *FLAGS)
    assert planted[0] >= 1
    assert not os.path.exists(marker)
    assert answer.returncode == 2, answer.stderr
    assert 'Traceback' not in answer.stderr
    lines = [line for line in answer.stderr.splitlines() if 'was changed under it' in line]
    assert len(lines) == 1 and '/listed/' in lines[0] and lines[0].startswith('error: ')


"""No process holds state per input: the launcher's and the workers' peak memory barely grow with
the number of inputs (benchmarks/imagenet_local.py measures it at ImageNet's size)."""
import os

import pytest

from pipeline.testing import imagenet_shape
from pipeline.testing.process_memory import run_sampled

SIZES = (1_000, 7_000)
MOST_BYTES_PER_INPUT = 2_000   # Measured: under 100; before, 6,000 to 8,700 in the launcher.


@pytest.fixture(scope='module')
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp('imagenet-shape')
    return {n: imagenet_shape.make(str(root / str(n)), n, classes=100) for n in SIZES}


@pytest.mark.slow
def test_the_launcher_and_the_workers_do_not_grow_with_the_inputs(inputs, tmp_path):
    peaks = {}
    for n in SIZES:
        result = run_sampled(f'--input_dir={inputs[n]}', f'--output_dir={tmp_path}/{n}',
                             timeout=600)
        assert result.returncode == 0, result.stderr
        assert len(result.others) == (os.cpu_count() or 1)   # A worker process per core.
        peaks[n] = result.launcher, result.largest_other
    added = SIZES[1] - SIZES[0]
    launcher, worker = ((peaks[SIZES[1]][i] - peaks[SIZES[0]][i]) / added for i in (0, 1))
    assert launcher < MOST_BYTES_PER_INPUT and worker < MOST_BYTES_PER_INPUT, peaks

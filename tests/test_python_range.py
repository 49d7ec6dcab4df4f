"""The Pythons setup.py declares (PYTHONS): the suite runs on one of them, and pip refuses the one
below the range with a line that names the range. Installing the newest of them and converting
with it takes a minute or more of downloads, so benchmarks/python_versions.py does that outside
the suite; the Flex image's Python is checked in tests/test_dataflow.py."""
import os
import shutil
import subprocess
import sys

import pytest

from benchmarks.python_versions import REPO, declared, find_python


def test_the_suite_runs_on_a_declared_python():
    running = f'{sys.version_info.major}.{sys.version_info.minor}'
    assert running in declared('PYTHONS'), (
        f'Python {running} is not in setup.py\'s PYTHONS: prove it with '
        f'`python -m benchmarks.python_versions --python {running}` and declare it')


@pytest.mark.slow   # It starts pip, which builds the package's metadata.
def test_pip_refuses_the_python_below_the_range_naming_the_range(tmp_path):
    oldest = declared('PYTHONS')[0]
    major, minor = map(int, oldest.split('.'))
    below = find_python(f'{major}.{minor - 1}')
    if below is None:
        pytest.skip(f'no python{major}.{minor - 1} on this machine')
    for name in ('setup.py', 'README.md'):   # What pip reads of the checkout to judge it.
        shutil.copy(os.path.join(REPO, name), tmp_path)
    # --no-deps: the verdict on the package itself, which a current pip gives before it looks
    # for any dependency (an old one may first report a dependency with no such release).
    result = subprocess.run([below, '-m', 'pip', 'install', '--dry-run', '--no-deps',
                             '--no-build-isolation', str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert "ERROR: Package 'image-tfrecords' requires a different Python: " in result.stderr
    assert f"not in '>={oldest}'" in result.stderr

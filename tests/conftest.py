import atexit
import logging
import os
import shutil
import signal
import tempfile

from pipeline.testing.bytecode import keep_bytecode

keep_bytecode()   # Before anything heavier is imported.

import pytest   # noqa: E402

from pipeline.testing import gcs_servers, imagemaker   # noqa: E402
from tests.helpers import write_tree   # noqa: E402

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
# A suite started in the background by a script (`pytest &`) inherits SIGINT ignored, and so
# would every command line it starts; the Ctrl-C tests need what a terminal's foreground job has.
signal.signal(signal.SIGINT, signal.default_int_handler)
# Before any Google library reads them (some read at import time), and for worker processes.
_PORTS = gcs_servers.free_port(), gcs_servers.free_port()
gcs_servers.hermetic_environment(*_PORTS)
atexit.register(shutil.rmtree, os.environ['CLOUDSDK_CONFIG'], True)   # Its empty gcloud folder.
# The suite's own resume key (pipeline/base/resume_key.py), not the user's.
os.environ['XDG_CONFIG_HOME'] = tempfile.mkdtemp(prefix='image-tfrecords-config-')
atexit.register(shutil.rmtree, os.environ['XDG_CONFIG_HOME'], True)


def pytest_collection_modifyitems(items):
    """A test that starts the Cloud Storage emulator is marked `gcs` and `slow`."""
    for item in items:
        if 'gcs_server' in item.fixturenames:
            item.add_marker(pytest.mark.gcs)
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope='session', autouse=True)
def _temp_folder(tmp_path_factory):
    """The system temp folder of this process and of the processes it starts, inside the
    session's own: what a test leaves there (a job built and never run, a command killed
    mid-run) goes with the session's folders, not into /tmp."""
    folder = str(tmp_path_factory.mktemp('tmp'))
    before = tempfile.tempdir, os.environ.get('TMPDIR')
    tempfile.tempdir, os.environ['TMPDIR'] = folder, folder
    yield
    tempfile.tempdir = before[0]
    if before[1] is None:
        os.environ.pop('TMPDIR', None)
    else:
        os.environ['TMPDIR'] = before[1]


@pytest.fixture(autouse=True)
def _quiet_beam():
    logging.getLogger('apache_beam').setLevel(logging.ERROR)


@pytest.fixture(scope='session')
def gcs_server():
    server = gcs_servers.LocalGcs(*_PORTS)
    yield server
    server.stop()


@pytest.fixture
def gcs(gcs_server):
    """An empty bucket `gs://test-bucket` on the emulator."""
    gcs_server.wipe()
    return gcs_server


class ImageFolders:
    """Folder layouts of small generated JPEGs (`train/c<i % classes>/<i>.jpg`), each made once
    per session. Tests share them as they are: a test that changes its input copies it first
    (shutil.copytree)."""

    def __init__(self, root):
        self._root = root
        self._made: dict[tuple, str] = {}

    def __call__(self, count: int, classes: int = 3, width: int = 24, height: int = 16) -> str:
        key = (count, classes, width, height)
        if key not in self._made:
            self._made[key] = write_tree(
                self._root / '-'.join(map(str, key)),
                {f'train/c{i % classes}/{i}.jpg': imagemaker.jpeg(width, height, seed=i)
                 for i in range(count)})
        return self._made[key]


@pytest.fixture(scope='session')
def image_folders(tmp_path_factory) -> ImageFolders:
    return ImageFolders(tmp_path_factory.mktemp('image-folders'))

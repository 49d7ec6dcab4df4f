import logging
import os
import signal

import pytest

from pipeline.testing import gcs_servers

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
# A suite started in the background by a script (`pytest &`) inherits SIGINT ignored, and so
# would every command line it starts; the Ctrl-C tests need what a terminal's foreground job has.
signal.signal(signal.SIGINT, signal.default_int_handler)
# Before any Google library reads them (some read at import time), and for worker processes.
_PORTS = gcs_servers.free_port(), gcs_servers.free_port()
gcs_servers.hermetic_environment(*_PORTS)


def pytest_collection_modifyitems(items):
    """A test that starts the Cloud Storage emulator is marked `gcs` and `slow`."""
    for item in items:
        if 'gcs_server' in item.fixturenames:
            item.add_marker(pytest.mark.gcs)
            item.add_marker(pytest.mark.slow)


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

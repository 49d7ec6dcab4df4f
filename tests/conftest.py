import logging
import os

import pytest

from tests import gcs_servers

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
# Before any Google library reads them (some read at import time), and for worker processes.
_PORTS = gcs_servers.free_port(), gcs_servers.free_port()
gcs_servers.hermetic_environment(*_PORTS)


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

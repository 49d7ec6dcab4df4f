import logging
import os

import pytest

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')


@pytest.fixture(autouse=True)
def _quiet_beam():
    logging.getLogger('apache_beam').setLevel(logging.ERROR)

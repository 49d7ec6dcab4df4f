"""Google Cloud credentials for gs:// paths, checked once before anything reads or writes them.

Whether there are any is decided without a slow network wait: google.auth alone would, with no
key file and no gcloud sign-in, ask the metadata server (169.254.169.254) up to three times with
a 3 s timeout each before giving up; here it is asked once, for at most METADATA_PROBE_SECONDS.
"""
import os
from typing import Iterable

from pipeline.io import fileio
from pipeline.errors import DatasetError

METADATA_PROBE_SECONDS = 1


def missing_credentials(paths: Iterable[str | None]) -> str | None:
    """The first gs:// path among `paths` when none of them can be reached for want of
    credentials (no Application Default Credentials found), else None. An emulator
    (STORAGE_EMULATOR_HOST) needs none."""
    cloud = [p for p in paths if p and fileio.is_gcs(p)]
    if not cloud or os.environ.get('STORAGE_EMULATOR_HOST') or _credentials_found():
        return None
    return cloud[0]


def check_credentials(paths: Iterable[str | None]) -> None:
    """Raises a DatasetError saying how to sign in when a gs:// path is given and no Application
    Default Credentials are found."""
    path = missing_credentials(paths)
    if path is None:
        return
    raise DatasetError(f'no Google Cloud credentials to access {path}: run `gcloud auth '
                       'application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to '
                       'a service account key file')


def _credentials_found() -> bool:
    """Where google.auth.default looks, in its order: a key file named by
    GOOGLE_APPLICATION_CREDENTIALS, gcloud's application default credentials, then the metadata
    server of a Google Cloud machine (one bounded probe)."""
    import google.auth
    from google.auth import _cloud_sdk, environment_vars
    from google.auth.exceptions import DefaultCredentialsError
    key_file = os.environ.get(environment_vars.CREDENTIALS)
    gcloud_file = _cloud_sdk.get_application_default_credentials_path()
    if not key_file and not os.path.isfile(gcloud_file) and not _metadata_server_answers():
        return False
    try:
        google.auth.default()
    except DefaultCredentialsError:
        return False
    return True


def _metadata_server_answers() -> bool:
    from google.auth.compute_engine import _metadata
    from google.auth.transport.requests import Request
    return _metadata.ping(Request(), timeout=METADATA_PROBE_SECONDS, retry_count=1)

"""Google Cloud credentials for gs:// paths, checked once before anything reads or writes them."""
import os
from typing import Iterable

from pipeline.io import fileio
from pipeline.errors import DatasetError


def check_credentials(paths: Iterable[str | None]) -> None:
    """Raises a DatasetError saying how to sign in when a gs:// path is given and no Application
    Default Credentials are found (an emulator, STORAGE_EMULATOR_HOST, needs none)."""
    cloud = [p for p in paths if p and fileio.is_gcs(p)]
    if not cloud or os.environ.get('STORAGE_EMULATOR_HOST'):
        return
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError
    try:
        google.auth.default()
    except DefaultCredentialsError:
        raise DatasetError(f'no Google Cloud credentials to access {cloud[0]}: run `gcloud auth '
                           'application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to '
                           'a service account key file') from None

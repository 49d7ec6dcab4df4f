"""Beam's FileSystems, for what it does for every scheme alike: matching a glob with sizes, and
(Cloud Storage) streams and moves. Imported when first needed, so that reading a local dataset
(verify, the readers) does not load Apache Beam."""
from typing import TYPE_CHECKING

from pipeline.errors import DatasetError
from pipeline.io.failures import _short

if TYPE_CHECKING:
    from apache_beam.io.filesystem import FileMetadata


def filesystems():
    from apache_beam.io.filesystems import FileSystems
    return FileSystems


def match(pattern: str) -> list['FileMetadata']:
    """Files matching a glob (`*`, `**`), with sizes; [] when nothing matches."""
    try:
        result = filesystems().match([pattern])[0]
    except Exception as exc:  # Beam wraps every backend error in BeamIOError.
        raise DatasetError(f'cannot list {pattern}: {_short(exc)}') from None
    return sorted(result.metadata_list, key=lambda m: m.path)

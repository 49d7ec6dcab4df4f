"""Images a parquet row names by path instead of holding their bytes (`{bytes: None, path}`, as
`datasets` writes an Image column made from paths, or a column of path strings): read from the
path, and when none is read, the row's reason says why and what to do.

Every path is read under one root (ImageRoot: --image_root, by default the folder the command was
started in, where `datasets` itself opens a relative path): a relative path is joined to it, and
whatever a path leads to must lie in it, local links followed and `..` taken out first (a gs://
path must start with a gs:// root's prefix and have no `.` or `..` segment). A path that leads
outside is never read, only reported: a parquet file from elsewhere could otherwise copy any
image its user can read (another folder's, through a link, any bucket's) into the dataset.
"""
import dataclasses
import os

import pyarrow as pa

from pipeline.errors import printable
from pipeline.io import failures, fileio

MAX_PATH = 4096   # Bytes of an image's path that is used, at most.
_EMBED = 'write the file with the images in it (datasets embeds them in push_to_hub)'


@dataclasses.dataclass(frozen=True)
class ImageRoot:
    """The folder every image path of a row is read under, as the launcher resolved it once
    (local: absolute, its links followed; gs://: without a trailing `/`): every worker gets it
    as data (a forked or remote worker's own current folder says nothing). `given`: it is
    --image_root's, else the folder the command was started in. `path` is None where there is
    none, and `why_not` then says why and what to do."""
    path: str | None
    given: bool = False
    why_not: str = ''

    @property
    def named(self) -> str:
        """The root as the flag that sets it."""
        return f'--image_root={self.path}' + (
            '' if self.given else ' (by default the folder the command was started in)')

    def resolve(self, path: str) -> tuple[str, bool]:
        """Where a row's `path` leads (a relative one: from the root) and whether that lies
        under the root."""
        root = self.path
        if fileio.is_gcs(root):
            if not fileio.is_gcs(path) and path.startswith('/'):
                return path, False
            full = path if fileio.is_gcs(path) else fileio.join(root, path)
            segments = full[len('gs://'):].split('/')[1:]
            return full, (full.startswith(root + '/') and '.' not in segments
                          and '..' not in segments)
        if fileio.is_gcs(path):
            return path, False
        full = os.path.realpath(os.path.join(root, path))
        return full, os.path.commonpath([root, full]) == root


# A file read without a launcher (a tool's, a test's): no path of a row is read.
NO_IMAGE_ROOT = ImageRoot(None, why_not='is not read: no --image_root is known here')


@dataclasses.dataclass(frozen=True)
class BadPath:
    """A path that is not used, and why ('is not valid UTF-8')."""
    why: str


def paths(values: pa.Array) -> list['str | BadPath | None']:
    """A column's paths as text; None for a null or empty one; a BadPath for one over MAX_PATH
    bytes (not made into text), one that is not UTF-8 and one with a NUL byte (no file's)."""
    import pyarrow.compute as pc   # Here: its import costs every launch ~0.1 s.
    raw = values.cast(pa.large_binary())   # Not checked as UTF-8 when read: checked here.
    sizes = pc.fill_null(pc.binary_length(raw), 0)
    fits = pc.less_equal(sizes, MAX_PATH)
    return [_path(data, size) for data, size in
            zip(pc.if_else(fits, raw, pa.scalar(None, raw.type)).to_pylist(), sizes.to_pylist())]


def _path(data: bytes | None, size: int) -> 'str | BadPath | None':
    if not size:
        return None
    if data is None:
        return BadPath(f'is {size:,} bytes long (a path may be {MAX_PATH:,} at most)')
    if b'\0' in data:
        return BadPath('holds a NUL byte')
    try:
        return data.decode('utf-8')
    except UnicodeDecodeError:
        return BadPath('is not valid UTF-8')


class ImagePaths:
    """The images of one parquet file's rows read from their paths under `root`, and the reason
    kept for each path that gave none. `column`: the column of image bytes (None for a column of
    paths alone); `path_column`: the column of their paths."""

    def __init__(self, column: str | None, path_column: str | None, limit: int, root: ImageRoot):
        self._bytes_column, self._path_column = column, path_column
        self._column = (column or path_column).partition('.')[0]
        self._limit, self._root = limit, root
        self._reasons: dict[str, str] = {}

    def read(self, path: str) -> bytes | None:
        """The image at `path` if it lies under the root, else None with the reason kept."""
        root = self._root
        if root.path is None:
            return self._kept(path, f'{self._its_path(path)} {root.why_not}, or {_EMBED}')
        where, inside = root.resolve(path)
        if not inside:
            leads = 'lies' if where == path else f'leads to {printable(where)[:200]},'
            return self._kept(path, f'{self._its_path(path)} {leads} outside {root.named}; '
                              f'pass --image_root=FOLDER holding it, or {_EMBED}')
        try:
            return fileio.read_input(where, self._limit)
        except Exception as exc:   # Whatever stops it, the row's input fails, as a file would.
            if _missing(exc) and not (fileio.is_gcs(path) or path.startswith('/')):
                return self._kept(path, f'{self._relative} under {root.named} '
                                  f'({printable(where)[:200]}); pass --image_root=FOLDER the '
                                  f'paths are relative to, or {_EMBED}')
            why = failures.unreadable_input(exc) or f'{type(exc).__name__}: {exc}'
            return self._kept(path, f'the file {self._naming} cannot be read '
                              f'({printable(where)[:200]}: {printable(why)[:200]}); put the '
                              f'image there, or {_EMBED}')

    def why_not(self, path: 'str | BadPath | None') -> str:
        """Why a row with this path (None: none) has no image."""
        if isinstance(path, BadPath):
            return (f'{self._no_bytes}the path in column {self._path_column} {path.why}; write '
                    f'it again, or {_EMBED}')
        if path is not None and (path in self._reasons or self.read(path) is None):
            return self._reasons[path]
        return (f'no image (column {self._column} holds no '
                + ('path)' if self._bytes_column is None else 'bytes)'))

    def _kept(self, path: str, why: str) -> None:
        """Keeps why `path` gave no image."""
        self._reasons[path] = self._no_bytes + why

    @property
    def _no_bytes(self) -> str:
        """How the reason for a row without an image from its path starts."""
        return ('no image: ' if self._bytes_column is None
                else f'no image: column {self._column} holds no bytes, and ')

    def _its_path(self, path: str) -> str:
        shown = printable(path)[:200]
        return (f'the path in column {self._column}, {shown},' if self._bytes_column is None
                else f'its path {shown}')

    @property
    def _relative(self) -> str:
        return (f'the relative path in column {self._column} names no file'
                if self._bytes_column is None else 'its relative path names no file')

    @property
    def _naming(self) -> str:
        return (f'column {self._column} names' if self._bytes_column is None
                else 'its path names')


def _missing(exc: BaseException) -> bool:
    """Whether a read failed because no file (or object) has the name."""
    from google.api_core import exceptions as google
    return isinstance(exc, (FileNotFoundError, NotADirectoryError, google.NotFound))

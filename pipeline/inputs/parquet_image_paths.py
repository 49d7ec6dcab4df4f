"""Images a parquet row names by path instead of holding their bytes (`{bytes: None, path}`, as
`datasets` writes an Image column made from paths, or a column of path strings): read from the
path, and when none is read, the row's reason says why and what to do.

An absolute path (or gs://) is read as it is; a relative one from the parquet file's folder or,
where no file is there, from the folder the command was started in (StartFolder), which is where
`datasets` itself looks (it opens the path as given, against its process's current folder).
"""
import dataclasses

import pyarrow as pa

from pipeline.errors import printable
from pipeline.io import failures, fileio, gcs

MAX_PATH = 4096   # Bytes of an image's path that is used, at most.
_EMBED = 'write the file with the images in it (datasets embeds them in push_to_hub)'


@dataclasses.dataclass(frozen=True)
class StartFolder:
    """The folder the command was started in, as the launcher found it once: every worker gets
    it as data (a forked or remote worker's own current folder says nothing). A relative image
    path that names no file in the parquet file's folder is looked for there. `path` is None
    where it cannot be read, and `why_not` then says why and what to do."""
    path: str | None
    why_not: str = ''


# A file read without a launcher's folder (a tool's, a test's): relative paths only beside it.
NO_START_FOLDER = StartFolder(None, 'is not looked in here; write the paths absolute')


@dataclasses.dataclass(frozen=True)
class BadPath:
    """A path that is not used, and why ('is not valid UTF-8')."""
    why: str


def paths(values: pa.Array) -> list['str | BadPath | None']:
    """A column's paths as text; None for a null or empty one; a BadPath for one over MAX_PATH
    bytes (not made into text) and one that is not UTF-8."""
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
    try:
        return data.decode('utf-8')
    except UnicodeDecodeError:
        return BadPath('is not valid UTF-8')


class ImagePaths:
    """The images of one parquet file's rows read from their paths, and the reason kept for each
    path that gave none. `column`: the column of image bytes (None for a column of paths
    alone); `path_column`: the column of their paths."""

    def __init__(self, parquet: str, column: str | None, path_column: str | None, limit: int,
                 start: StartFolder):
        self._parquet, self._bytes_column, self._path_column = parquet, column, path_column
        self._column = (column or path_column).partition('.')[0]
        self._limit, self._start = limit, start
        self._reasons: dict[str, str] = {}

    def read(self, path: str) -> bytes | None:
        """The image at `path`, or None with the reason kept."""
        bucket = fileio.is_gcs(path) and gcs.bucket_name_problem(path)
        if bucket:
            self._reasons[path] = f'{self._no_bytes}its path {printable(path)[:200]}: {bucket}'
            return None
        relative = not (fileio.is_gcs(path) or path.startswith('/'))
        places = [fileio.join(fileio.dirname(self._parquet), path)] if relative else [path]
        if relative and self._start.path:
            places.append(fileio.join(self._start.path, path))
        for where in places:
            try:
                return fileio.read_input(where, self._limit)
            except Exception as exc:   # Whatever stops it, the row's input fails, as a file would.
                if relative and _missing(exc):
                    continue
                why = failures.unreadable_input(exc) or f'{type(exc).__name__}: {exc}'
                self._reasons[path] = (f'{self._no_bytes}the file {self._naming} cannot be read '
                                       f'({where}: {printable(why)[:200]}); put the image there, '
                                       f'or {_EMBED}')
                return None
        if self._start.path:
            self._reasons[path] = (
                f'{self._no_bytes}{self._relative} in the parquet file\'s '
                f'folder ({places[0]}) or in the folder the command was started in '
                f'({places[1]}); run the command from the folder the paths are relative to, put '
                f'the images beside the parquet file, or {_EMBED}')
        else:
            self._reasons[path] = (
                f'{self._no_bytes}{self._relative} in the parquet file\'s '
                f'folder ({places[0]}); a path relative to the folder the command was '
                f'started in {self._start.why_not}, or {_EMBED}')
        return None

    def why_not(self, path: 'str | BadPath | None') -> str:
        """Why a row with this path (None: none) has no image."""
        if isinstance(path, BadPath):
            return (f'{self._no_bytes}the path in column {self._path_column} {path.why}; write '
                    f'it again, or {_EMBED}')
        if path is not None and (path in self._reasons or self.read(path) is None):
            return self._reasons[path]
        return (f'no image (column {self._column} holds no '
                + ('path)' if self._bytes_column is None else 'bytes)'))

    @property
    def _no_bytes(self) -> str:
        """How the reason for a row without an image from its path starts."""
        return ('no image: ' if self._bytes_column is None
                else f'no image: column {self._column} holds no bytes, and ')

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

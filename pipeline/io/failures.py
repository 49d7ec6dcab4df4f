"""Which failures of file I/O no retry can fix, and the messages that say so."""
import errno
from typing import Iterator


class DamagedInput(Exception):
    """An input that cannot be read however often it is retried; the message says why."""


MIB = 1 << 20


class TooLarge(DamagedInput):
    """An input with more bytes than the bound on what is read for one input (--max_input_mb)."""

    def __init__(self, what: str, limit: int):
        super().__init__(f'{what} more than --max_input_mb={limit // MIB} MiB, the most read '
                         'for one input; raise --max_input_mb to read it')


_FULL = (errno.ENOSPC, errno.EDQUOT)
_DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _permanent_write_error(exc: BaseException) -> str | None:
    from google.api_core import exceptions as google
    for cause in _causes(exc):
        if isinstance(cause, OSError) and cause.errno in _FULL:
            return f'{cause.strerror}; free some space or choose another --output_dir'
        if isinstance(cause, OSError) and cause.errno in _DENIED:
            return f'{cause.strerror}; check the permissions or choose another --output_dir'
        if isinstance(cause, (google.Forbidden, google.Unauthorized)):
            return (f'access denied ({_short(cause)}); the account needs '
                    'roles/storage.objectAdmin on the bucket')
        if isinstance(cause, google.NotFound):
            return f'the bucket is gone ({_short(cause)}); create it or choose another --output_dir'
    return None


_PERMANENT_ERRNOS = frozenset({errno.ENXIO, errno.EIO, errno.ENODEV, errno.ELOOP,
                               errno.ENAMETOOLONG, errno.EINVAL})


def unreadable_input(exc: BaseException) -> str | None:
    """Why an input file cannot be read, if retrying cannot help (missing, denied, a socket);
    else None."""
    from google.api_core import exceptions as google
    for cause in _causes(exc):
        if isinstance(cause, DamagedInput):
            return str(cause)
        if isinstance(cause, (FileNotFoundError, PermissionError, IsADirectoryError,
                              NotADirectoryError)) or (isinstance(cause, OSError)
                                                       and cause.errno in _PERMANENT_ERRNOS):
            return cause.strerror or type(cause).__name__
        if isinstance(cause, (google.NotFound, google.Forbidden)):
            return _short(cause)
    return None


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__

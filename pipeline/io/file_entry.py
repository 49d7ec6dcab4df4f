"""A name found by listing a folder, on local disk or Cloud Storage, and how a local file that is
no regular file is named to the user."""
import dataclasses
import stat


@dataclasses.dataclass(frozen=True)
class Entry:
    """One name found by listing a folder."""
    path: str
    name: str
    is_dir: bool = False
    size: int | None = None
    mtime: float | None = None
    error: str | None = None    # Why the entry cannot be read (a broken link, say).

    @property
    def hidden(self) -> bool:
        return self.name.startswith('.')


def not_regular(mode: int) -> str:
    """Why a file that is not a regular one is not read, in words."""
    kind = ('a folder' if stat.S_ISDIR(mode) else 'a named pipe (FIFO)' if stat.S_ISFIFO(mode)
            else 'a device' if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else 'a socket' if stat.S_ISSOCK(mode) else 'a special file')
    return (f'not a regular file but {kind}; only regular files are read: replace it with the '
            'file it stands for, or remove it')

"""The file system of local paths, as pipeline/io/fileio.py asks every file system: plain
os calls, with what local disk needs besides (a name is unlinked before it is created, so a write
never goes through a name that existed before; only regular files are read; links into /proc,
/sys and /dev are not followed; a move is an atomic rename)."""
import contextlib
import errno
import os
import shutil
import stat
import uuid
from typing import Iterator

from pipeline.errors import DatasetError
from pipeline.io.failures import DamagedInput, TooLarge
from pipeline.io.file_entry import Entry, not_regular

_SYSTEM_FOLDERS = ('/proc', '/sys', '/dev')


class LocalFiles:
    """Local paths."""

    def join(self, base: str, *parts: str) -> str:
        return os.path.join(base, *parts)

    def basename(self, path: str) -> str:
        return os.path.basename(path)

    def dirname(self, path: str) -> str:
        return os.path.dirname(path)

    def read_bytes(self, path: str) -> bytes:
        with open(path, 'rb') as stream:
            return stream.read()

    def read_input(self, path: str, limit: int) -> bytes:
        """A regular file, at most `limit` bytes: its size checked before it is read (a pipe
        would block, a device never end) and while (a file may grow)."""
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)   # A pipe opens without a writer.
        with os.fdopen(fd, 'rb') as stream:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise DamagedInput(not_regular(info.st_mode))
            os.set_blocking(fd, True)   # A regular file: read it whole, as read() promises.
            if info.st_size > limit:
                raise TooLarge(f'{info.st_size} bytes,', limit)
            # Its size first: a read of `limit` bytes sets that much memory aside (3x the time).
            data = stream.read(info.st_size + 1)
            if len(data) > info.st_size:   # It grew since: the rest, up to the limit.
                data += stream.read(limit + 1 - len(data))
        if len(data) > limit:
            raise TooLarge('grew while read:', limit)
        return data

    def not_regular(self, path: str) -> str | None:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return None   # Missing: its reader says so.
        return None if stat.S_ISREG(mode) else not_regular(mode)

    def read_range(self, path: str, start: int, length: int) -> bytes:
        with open(path, 'rb') as stream:
            return os.pread(stream.fileno(), length, start)

    def open_read(self, path: str):
        return open(path, 'rb')

    def create(self, path: str):
        """A file created new for writing: the name is unlinked, then created exclusively
        (O_CREAT|O_EXCL), so a write never goes through a name that existed before (a hard
        link to a file outside the output, say)."""
        os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return os.fdopen(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644), 'wb')

    def is_untrusted(self, path: str) -> bool:
        """Whether a file is not one this tool could have made: it has other names too (one
        may lie outside the output), or it is no regular file. False when absent."""
        try:
            found = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return found.st_nlink > 1 or not stat.S_ISREG(found.st_mode)

    @contextlib.contextmanager
    def writing_atomic(self, path: str, writing):
        """Writes through a temporary name and a rename; `writing` opens a file to write."""
        partial = f'{path}.partial-{uuid.uuid4().hex[:8]}'
        try:
            with writing(partial) as stream:
                yield stream
        except BaseException:
            self.delete([partial])
            raise
        os.replace(partial, path)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """O_CREAT|O_EXCL: False when the file exists."""
        os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, 'wb') as stream:
            stream.write(data)
        return True

    def upload(self, local_path: str, destination: str, crc32c) -> tuple[int, str]:
        """Copies a local file to `destination`; (size, CRC32C) of the copy, read back."""
        with open(local_path, 'rb') as source, self.create(destination) as out:
            shutil.copyfileobj(source, out, 1 << 20)
        return os.path.getsize(destination), crc32c(destination)

    def read_if_exists(self, path: str) -> bytes | None:
        try:
            return self.read_bytes(path)
        except FileNotFoundError:
            return None

    def file_names(self, folder: str) -> list[str]:
        try:
            return sorted(os.path.join(folder, name) for name in os.listdir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def modified(self, path: str) -> float | None:
        try:
            return os.stat(path).st_mtime
        except FileNotFoundError:
            return None

    def size(self, path: str) -> int:
        return os.path.getsize(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def delete(self, paths: list[str]) -> None:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)

    def delete_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def rename(self, sources: list[str], destinations: list[str]) -> None:
        """Atomic renames, folders made as needed."""
        for source, destination in zip(sources, destinations):
            os.makedirs(os.path.dirname(destination) or '.', exist_ok=True)
            os.replace(source, destination)

    def concatenate(self, sources: list[str], destination: str) -> int:
        """Copied inside the kernel, file after file."""
        with self.create(destination) as out:
            for source in sources:
                with open(source, 'rb') as stream:
                    remaining = os.fstat(stream.fileno()).st_size
                    while remaining > 0:
                        copied = os.copy_file_range(stream.fileno(), out.fileno(), remaining)
                        if not copied:   # It shrank since: never loop on it.
                            raise OSError(errno.EIO, f'{source} ended {remaining} bytes early')
                        remaining -= copied
            return os.fstat(out.fileno()).st_size

    def list_dir(self, path: str) -> list[Entry]:
        try:
            with os.scandir(path) as entries:
                return sorted((_entry(e) for e in entries), key=lambda e: e.path)
        except OSError as exc:
            raise DatasetError(f'cannot list folder {path}: {exc.strerror}') from None

    def walk_files(self, path: str, list_dir) -> Iterator[tuple[str, Entry]]:
        """(path relative to `path`, entry) of every file below `path`, listed by `list_dir`,
        in the order a depth-first walk meets them, with a stack of its own however deep the
        folders nest. Links are followed (each real folder is visited once, so a link loop
        ends); a folder below `path` that cannot be listed is an entry with an error."""
        seen: set[tuple[int, int]] = set()
        stack: list[tuple[str, Iterator[Entry]]] = []

        def enter(folder: str, relative: str) -> Entry | None:
            try:
                identity = os.stat(folder)
                entries = list_dir(folder) if (identity.st_dev, identity.st_ino) not in seen else []
            except (OSError, DatasetError) as exc:   # Gone since its parent was listed, ...
                if not relative:
                    raise
                return Entry(folder, os.path.basename(folder), error=(
                    f'folder cannot be listed: {getattr(exc, "strerror", None) or exc}'))
            seen.add((identity.st_dev, identity.st_ino))
            stack.append((relative, iter(entries)))
            return None

        enter(path, '')
        while stack:
            relative, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
            elif not entry.is_dir:
                yield f'{relative}{entry.name}', entry
            elif (failed := enter(entry.path, f'{relative}{entry.name}/')) is not None:
                yield f'{relative}{entry.name}', failed

    def check_bucket(self, path: str) -> None:
        """Local paths have none."""


def _entry(entry: os.DirEntry) -> Entry:
    try:
        found = entry.stat()  # Follows links.
    except OSError as exc:
        reason = ('symbolic link whose target does not exist' if exc.errno == errno.ENOENT else
                  'symbolic link loop' if exc.errno == errno.ELOOP else
                  f'cannot read file: {exc.strerror}')
        return Entry(entry.path, entry.name, error=reason)
    if entry.is_dir():
        if entry.is_symlink() and _is_system_folder(os.path.realpath(entry.path)):
            return Entry(entry.path, entry.name, error='a link into /proc, /sys or /dev (they '
                         'change as they are read and never end), not followed')
        return Entry(entry.path, entry.name, is_dir=True)
    if not stat.S_ISREG(found.st_mode):   # Never opened: a pipe would block, a device not end.
        return Entry(entry.path, entry.name, error=not_regular(found.st_mode))
    return Entry(entry.path, entry.name, size=found.st_size, mtime=found.st_mtime)


def _is_system_folder(real: str) -> bool:
    return real in _SYSTEM_FOLDERS or real.startswith(tuple(f'{f}/' for f in _SYSTEM_FOLDERS))

"""Each command's own folder in the system temp folder, for its log and every temporary file of
its run (Beam's, the runner's, its worker processes'), so that a run leaves nothing there, not
even after a kill.

The folder is `image-tfrecords-run-XXXXXXXX/`; the command points `tempfile` and TMPDIR (for the
processes it starts) at it and removes it when it exits. Its log is locked (flock) for the
command's life, and its worker processes share the lock through their stderr (the log), so the
kernel drops the lock only when they are all gone. A command that can take the lock of another
folder's log removes that folder: a killed command left it. A run that fails with an unexpected
error keeps its log in image-tfrecords-logs/ (`keep_log`; in image-tfrecords-logs-XXXXXXXX/
where that name is not this user's folder).
"""
import atexit
import contextlib
import dataclasses
import fcntl
import os
import shutil
import stat
import tempfile
import time

PREFIX = 'image-tfrecords-run-'
LOG = 'run.log'
KEPT_LOGS = 'image-tfrecords-logs'
UNLOGGED_SECONDS = 60   # A folder still without its log this long after it was made is left.


@dataclasses.dataclass(frozen=True)
class RunFolder:
    path: str
    log: str       # The command's full log.
    log_fd: int    # The log, open for appending and locked for the command's life.

    def keep_log(self) -> str:
        """Moves the log out of the folder, to stay after the command; returns where to."""
        folder = _logs_folder(os.path.dirname(self.path))
        kept = os.path.join(folder, f'run-{time.strftime("%Y%m%d-%H%M%S")}-{os.getpid()}.log')
        os.replace(self.log, kept)
        return kept


def _logs_folder(base: str) -> str:
    """KEPT_LOGS in the shared folder `base`, made for this user alone if absent; where something
    else has that name (a file, a link, another user's folder), a new folder beside it."""
    folder = os.path.join(base, KEPT_LOGS)
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    found = os.lstat(folder)
    if stat.S_ISDIR(found.st_mode) and found.st_uid == os.getuid():
        return folder
    return tempfile.mkdtemp(prefix=f'{KEPT_LOGS}-', dir=base)


def start() -> RunFolder:
    """Removes the folders of killed commands, makes this command's, and points the temp folder
    of this process and of those it starts at it until the process exits."""
    base = tempfile.gettempdir()
    _remove_abandoned(base)
    path = tempfile.mkdtemp(prefix=PREFIX, dir=base)
    log = os.path.join(path, LOG)
    fd = os.open(f'{log}.new', os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(f'{log}.new', log)   # Found under its name only once locked.
    tempfile.tempdir = os.environ['TMPDIR'] = path
    atexit.register(shutil.rmtree, path, True)
    return RunFolder(path, log, fd)


def _remove_abandoned(base: str) -> None:
    for entry in os.scandir(base):
        if (entry.name.startswith(PREFIX) and entry.is_dir(follow_symlinks=False)
                and _abandoned(entry.path)):
            shutil.rmtree(entry.path, ignore_errors=True)


def _abandoned(folder: str) -> bool:
    """Whether no process holds the lock of the folder's log (or, without a log, whether it is
    older than UNLOGGED_SECONDS: its command was killed as it made it)."""
    try:
        fd = os.open(os.path.join(folder, LOG), os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        try:
            return time.time() - os.stat(folder).st_mtime > UNLOGGED_SECONDS
        except OSError:
            return False
    except OSError:   # Another user's, say.
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)

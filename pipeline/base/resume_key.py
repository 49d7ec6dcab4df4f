"""The per-user key that binds what an attempt leaves in its temporary folder to whoever ran it.

The temporary folder is anyone's who can write the output, and a digest kept there can be
rewritten with the data it describes. So every sidecar holds an HMAC-SHA256, under a key that
never lives in the output folder, of its content and of the piece it stands for
(transforms/resume.py): a sidecar edited, or copied to another piece's name, or written under
another key, is not reused. The key is 32 random bytes in
`$XDG_CONFIG_HOME/image-tfrecords/resume.key` (else `~/.config/...`), made 0600 in a 0700 folder
on first use. The launcher reads it once (`load`) and the job carries it in its settings (never
in the run id): a remote job's description holds it, so its staging location must be private.
"""
import errno
import hashlib
import hmac
import logging
import os
import stat
import tempfile

LOG = logging.getLogger('image_tfrecords')
KEY_BYTES = 32


def key_path() -> str:
    config = os.environ.get('XDG_CONFIG_HOME') or os.path.join(os.path.expanduser('~'), '.config')
    return os.path.join(config, 'image-tfrecords', 'resume.key')


def load() -> bytes:
    """This user's resume key, made on first use. A key file that is a link, no regular file,
    not the user's, open to others or of another size is refused with one line: the run then
    draws a key of its own, so it reuses no earlier work."""
    path = key_path()
    try:
        return _read(path) if os.path.lexists(path) else _create(path)
    except (OSError, ValueError) as exc:
        LOG.warning('not reusing work of earlier attempts: the resume key %s %s', path,
                    exc.strerror if isinstance(exc, OSError) and exc.strerror else exc)
        return os.urandom(KEY_BYTES)


def _create(path: str) -> bytes:
    """Writes a new key to `path` atomically (a link of a complete file: a concurrent first use
    keeps the first key written); returns the key at `path`."""
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    handle, staged = tempfile.mkstemp(dir=folder, prefix='.resume-key-')   # Made 0600.
    try:
        with os.fdopen(handle, 'wb') as stream:
            stream.write(os.urandom(KEY_BYTES))
            stream.flush()
            os.fsync(stream.fileno())
        try:
            os.link(staged, path)
        except FileExistsError:
            pass
    finally:
        os.remove(staged)
    return _read(path)


def _read(path: str) -> bytes:
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError('is a symbolic link; remove it (a new key is made)') from None
        raise
    with os.fdopen(handle, 'rb') as stream:
        info = os.fstat(stream.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError('is not a regular file; remove it (a new key is made)')
        if info.st_uid != os.getuid():
            raise ValueError('is not yours; remove it (a new key is made)')
        if info.st_mode & 0o077:
            raise ValueError('is open to other users; chmod 600 it')
        key = stream.read(KEY_BYTES + 1)
    if len(key) != KEY_BYTES:
        raise ValueError(f'does not hold {KEY_BYTES} bytes; remove it (a new key is made)')
    return key


def seal(key: bytes, message: bytes) -> str:
    """The hex HMAC-SHA256 of `message` under `key`."""
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def sealed(key: bytes, message: bytes, found: object) -> bool:
    """Whether `found` is the seal of `message` under `key`."""
    return type(found) is str and hmac.compare_digest(seal(key, message), found)

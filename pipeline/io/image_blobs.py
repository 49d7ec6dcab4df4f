"""Image blobs: the images of a group of inputs laid end to end in one file, so that each reaches
its chunk as a byte range of the file, not as bytes through a shuffle (transforms/grouped_reads.py).

    IMAGE 0 | IMAGE 1 | ... | LENGTH 0 | LENGTH 1 | ... | DIGEST | COUNT | MAGIC

Lengths and the count are little-endian 64-bit integers; a length of -1 is an input without
bytes; DIGEST is the HMAC-SHA256 of the blob's name (its temporary folder's and its own) and
its images under the run's resume key (pipeline/base/resume_key.py; 32 bytes). A blob is
written under a temporary name and moved into place (fileio.writing_atomic), so one that exists is complete; a rerun reuses
one (`read_index`) only when its size is the one its index gives and its images match its
digest: it is in a folder others may write (a blob written whole by someone else, or moved
from another name, does not match), and a flipped bit would otherwise pass into the dataset.
"""
import hashlib
import hmac
import struct
from typing import Iterable

from pipeline.io import fileio

MAGIC = b'IMGBLOB2'
_TAIL = 48                   # DIGEST, COUNT and MAGIC.
_BLOCK = 1 << 20             # Bytes read at a time to check the digest.
Window = tuple[int, int]     # (offset, length) of an image in its blob.


def write(path: str, images: Iterable[bytes | None],
          key: bytes) -> tuple[int, list[Window | None]]:
    """Writes `images` (None: an input without bytes), one at a time, into blob `path`, sealed
    under `key`; returns its size and each image's window, or None."""
    lengths, windows, offset, digest = [], [], 0, _sealing(key, path)
    with fileio.writing_atomic(path) as out:
        for data in images:
            if data is None:
                lengths.append(-1)
                windows.append(None)
                continue
            out.write(data)
            digest.update(data)
            lengths.append(len(data))
            windows.append((offset, len(data)))
            offset += len(data)
        out.write(struct.pack(f'<{len(lengths)}q', *lengths) + digest.digest()
                  + struct.pack('<q', len(lengths)) + MAGIC)
    return offset + 8 * len(lengths) + _TAIL, windows


def read_index(path: str, count: int, key: bytes) -> tuple[int, list[Window | None]] | None:
    """(size, windows) of blob `path` if it is complete, holds `count` images and they match
    its digest under `key`; else None (absent, untrusted as fileio.is_untrusted says, or not
    such a blob)."""
    if fileio.is_untrusted(path):
        return None
    try:
        size = fileio.size(path)
    except FileNotFoundError:
        return None
    index_start = size - 8 * count - _TAIL
    if index_start < 0:
        return None
    tail = fileio.read_range(path, index_start, size - index_start)
    if len(tail) != size - index_start or tail[-8:] != MAGIC:
        return None
    *lengths, = struct.unpack(f'<{count}q', tail[:8 * count])
    recorded, (stored,) = tail[8 * count:-16], struct.unpack('<q', tail[-16:-8])
    if (stored != count or min(lengths, default=0) < -1
            or sum(max(n, 0) for n in lengths) != index_start
            or not hmac.compare_digest(_digest(path, index_start, key), recorded)):
        return None
    windows, offset = [], 0
    for length in lengths:
        windows.append(None if length < 0 else (offset, length))
        offset += max(length, 0)
    return size, windows


def _sealing(key: bytes, path: str) -> 'hmac.HMAC':
    """The HMAC-SHA256 under `key` that DIGEST is, its images not yet given."""
    return hmac.new(key, '/'.join(path.split('/')[-3:]).encode() + b'\0', hashlib.sha256)


def _digest(path: str, size: int, key: bytes) -> bytes:
    """DIGEST of the first `size` bytes of `path` under `key`, read a block at a time."""
    digest = _sealing(key, path)
    with fileio.open_read(path) as stream:
        while size > 0 and (block := stream.read(min(_BLOCK, size))):
            digest.update(block)
            size -= len(block)
    return digest.digest()

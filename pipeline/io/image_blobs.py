"""Image blobs: the images of a group of inputs laid end to end in one file, so that each reaches
its chunk as a byte range of the file, not as bytes through a shuffle (transforms/grouped_reads.py).

    IMAGE 0 | IMAGE 1 | ... | LENGTH 0 | LENGTH 1 | ... | COUNT | MAGIC

Lengths and the count are little-endian 64-bit integers; a length of -1 is an input without
bytes. A blob is written under a temporary name and moved into place (fileio.writing_atomic), so
one that exists is complete; `read_index` also checks that its size is the one its index gives.
"""
import struct
from typing import Iterable

from pipeline.io import fileio

MAGIC = b'IMGBLOB1'
_TAIL = 16                   # COUNT and MAGIC.
Window = tuple[int, int]     # (offset, length) of an image in its blob.


def write(path: str, images: Iterable[bytes | None]) -> tuple[int, list[Window | None]]:
    """Writes `images` (None: an input without bytes), one at a time, into blob `path`; returns
    its size and each image's window, or None."""
    lengths, windows, offset = [], [], 0
    with fileio.writing_atomic(path) as out:
        for data in images:
            if data is None:
                lengths.append(-1)
                windows.append(None)
                continue
            out.write(data)
            lengths.append(len(data))
            windows.append((offset, len(data)))
            offset += len(data)
        out.write(struct.pack(f'<{len(lengths)}q', *lengths) + struct.pack('<q', len(lengths))
                  + MAGIC)
    return offset + 8 * len(lengths) + _TAIL, windows


def read_index(path: str, count: int) -> tuple[int, list[Window | None]] | None:
    """(size, windows) of blob `path` if it is complete and holds `count` images; else None
    (absent, untrusted as fileio.is_untrusted says, or not such a blob)."""
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
    *lengths, stored = struct.unpack(f'<{count + 1}q', tail[:-8])
    if (stored != count or min(lengths, default=0) < -1
            or sum(max(n, 0) for n in lengths) != index_start):
        return None
    windows, offset = [], 0
    for length in lengths:
        windows.append(None if length < 0 else (offset, length))
        offset += max(length, 0)
    return size, windows

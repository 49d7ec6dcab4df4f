"""PNG input without the chunks Pillow would only keep: Pillow reads every chunk it has no
handler for whole and holds the private ones with the image (a 250 MiB padding chunk cost
twice that while the image decoded), so such chunks of SKIPPED_BYTES or more are skipped before
Pillow sees them (smaller ones are left to it, so that the ranges kept stay few)."""
import io
import struct

from PIL import PngImagePlugin

_SIGNATURE = b'\x89PNG\r\n\x1a\n'
SKIPPED_BYTES = 1 << 16


def png_stream(data: bytes) -> io.BufferedReader | io.BytesIO:
    """A stream of `data` that omits every PNG chunk of SKIPPED_BYTES or more that Pillow has no
    handler for; `data` itself when it is no PNG or has none (no byte is copied either way)."""
    if not data.startswith(_SIGNATURE):
        return io.BytesIO(data)
    kept, start, pos = [], 0, len(_SIGNATURE)
    while pos + 8 <= len(data):
        length, kind = struct.unpack_from('>I4s', data, pos)
        end = pos + 12 + length
        if kind == b'IEND' or end > len(data):
            break
        if length >= SKIPPED_BYTES and not hasattr(PngImagePlugin.PngStream,
                                                   'chunk_' + kind.decode('latin-1')):
            kept.append((start, pos))
            start = end
        pos = end
    if not kept:
        return io.BytesIO(data)
    kept.append((start, len(data)))
    return io.BufferedReader(_Spliced(memoryview(data), kept))


class _Spliced(io.RawIOBase):
    """The concatenation of ranges of a buffer, read and sought without copying it."""

    def __init__(self, buffer: memoryview, ranges: list[tuple[int, int]]):
        super().__init__()
        self._parts = [buffer[a:b] for a, b in ranges if b > a]
        self._size = sum(len(part) for part in self._parts)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, target) -> int:
        skip, done = self._pos, 0
        target = memoryview(target).cast('B')
        for part in self._parts:
            if skip >= len(part):
                skip -= len(part)
                continue
            piece = part[skip:skip + len(target) - done]
            target[done:done + len(piece)] = piece
            done, skip = done + len(piece), 0
            if done == len(target):
                break
        self._pos += done
        return done

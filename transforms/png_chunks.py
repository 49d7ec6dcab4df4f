"""PNG input, read chunk by chunk.

`png_stream`: the input without the chunks Pillow would only copy. Pillow reads every chunk
whole: one it has no handler for (a private one) it holds with the image, so such chunks are
skipped once they reach SKIPPED_BYTES, alone or together (a 250 MiB padding chunk cost twice
that while the image decoded); one it has a handler for it reads, joins and copies again (an
eXIf chunk: three copies, four with an EXIF entry pointing into it: a 250 MiB one took a worker
to 1.2-1.4 GB), so those are skipped from HANDLED_BYTES on (Pillow's own bound on a text
chunk's text). Pixels (IDAT, fdAT) are never skipped. A skipped eXIf or text chunk gives no
orientation: such an image is converted as stored.

`plain_png`: whether a PNG's pixels are exactly what libspng decodes, with nothing for Pillow
to apply (transparency, an orientation, a palette, 16-bit samples), so the faster decoder can
take it (transforms/images.py).
"""
import bisect
import io
import struct

from PIL import PngImagePlugin

_SIGNATURE = b'\x89PNG\r\n\x1a\n'
SKIPPED_BYTES = 1 << 16
HANDLED_BYTES = 1 << 20
_PIXELS = frozenset((b'IDAT', b'fdAT'))


def png_stream(data: bytes) -> io.BufferedReader | io.BytesIO:
    """A stream of `data` without the PNG chunks Pillow would only copy (see above); `data`
    itself when it is no PNG or has none (no byte is copied either way)."""
    if not data.startswith(_SIGNATURE):
        return io.BytesIO(data)
    kept, start, pos, private = [], 0, len(_SIGNATURE), 0
    while pos + 8 <= len(data):
        length, kind = struct.unpack_from('>I4s', data, pos)
        end = pos + 12 + length
        if kind == b'IEND' or end > len(data):
            break
        handled = hasattr(PngImagePlugin.PngStream, 'chunk_' + kind.decode('latin-1'))
        private += 0 if handled else length
        if kind not in _PIXELS and (length >= HANDLED_BYTES if handled
                                    else private >= SKIPPED_BYTES):
            kept.append((start, pos))
            start = end
        pos = end
    if not kept:
        return io.BytesIO(data)
    kept.append((start, len(data)))
    return io.BufferedReader(_Spliced(memoryview(data), kept))


# Text chunks Pillow reads an EXIF orientation from (Image.getexif: EXIF or XMP).
_ORIENTING_TEXT = frozenset((b'exif', b'xmp', b'Raw profile type exif', b'XML:com.adobe.xmp'))
# A second header, transparency, animation (APNG's control and frame chunks), EXIF.
_UNPLAIN = frozenset((b'IHDR', b'tRNS', b'acTL', b'fcTL', b'fdAT', b'eXIf'))


def plain_png(data: bytes) -> bool:
    """Whether `data` is a PNG of 8-bit grey or RGB samples whose chunks are all whole, one
    header, then the pixels (IDAT) and nothing but IEND after them, with no transparency, no
    animation and no chunk Pillow takes an orientation from (eXIf; a tEXt, zTXt or iTXt named
    exif, xmp, 'Raw profile type exif' or XML:com.adobe.xmp), and less than SKIPPED_BYTES in
    all of its other chunks. Its pixels are then the samples as stored, whichever decoder reads
    them; Pillow would read no chunk after them (which it may refuse) and Image.open has read
    every one before them. libspng keeps what it parses of the other chunks (an sPLT took 2.5
    times its size), so those must stay small."""
    if not data.startswith(_SIGNATURE) or len(data) < 33:
        return False
    header = struct.unpack_from('>I4s', data, 8)
    if header != (13, b'IHDR') or data[24] != 8 or data[25] not in (0, 2):
        return False
    pos, pixels, other = 33, False, 0
    while pos + 12 <= len(data):
        length, kind = struct.unpack_from('>I4s', data, pos)
        if pos + 12 + length > len(data) or kind in _UNPLAIN:
            return False
        if kind == b'IEND':
            return pixels
        if kind == b'IDAT':
            pixels = True
        elif pixels or other + length >= SKIPPED_BYTES:
            return False
        else:
            other += length
        if kind in (b'tEXt', b'zTXt', b'iTXt') and data[pos + 8:pos + 8 + min(length, 80)].split(
                b'\0', 1)[0] in _ORIENTING_TEXT:
            return False
        pos += 12 + length
    return False


class _Spliced(io.RawIOBase):
    """The concatenation of ranges of a buffer, read and sought without copying it."""

    def __init__(self, buffer: memoryview, ranges: list[tuple[int, int]]):
        super().__init__()
        self._parts = [buffer[a:b] for a, b in ranges if b > a]
        self._starts = [0]   # Where each part starts in the stream, then its end.
        for part in self._parts:
            self._starts.append(self._starts[-1] + len(part))
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._starts[-1]}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, target) -> int:
        target = memoryview(target).cast('B')
        index, done = bisect.bisect_right(self._starts, self._pos) - 1, 0
        while index < len(self._parts) and done < len(target):
            skip = self._pos + done - self._starts[index]
            piece = self._parts[index][skip:skip + len(target) - done]
            target[done:done + len(piece)] = piece
            done, index = done + len(piece), index + 1
        self._pos += done
        return done

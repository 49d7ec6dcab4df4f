"""The verdict on a JPEG's data: ok, damaged or undecodable, as strict libjpeg-turbo judges it.

A JPEG is decoded at a reduced scale, which still entropy-decodes the whole stream, first
strictly (any libjpeg warning is an error), then, if that fails, leniently (warnings tolerated,
as Pillow and most readers do). Clean both ways: ok. Only leniently: damaged, with libjpeg's own
message as the reason ("Corrupt JPEG data: ...", "Premature end of JPEG file"): the decoder
filled in the pixels it could not read, so the image is grey or garbled in places. Bytes after
the end-of-image marker are never read, so harmless trailing data stays ok. Neither way: the
verdict is left to the caller (Pillow reads some JPEGs libjpeg-turbo cannot convert).

The same decode gives the luminance the perceptual hash is computed from (phash.py).
"""
import dataclasses

import numpy as np
import simplejpeg

OK, DAMAGED = 'ok', 'damaged'
HASH_SIDE = 64   # Decode to at least this many pixels a side (when the image has them).


@dataclasses.dataclass(frozen=True)
class JpegVerdict:
    verdict: str          # OK or DAMAGED
    reason: str           # libjpeg's message for a damaged JPEG; '' when ok
    pixels: np.ndarray    # The reduced-scale decode: HxWx1 luminance


def check_jpeg(data: bytes, width: int, height: int) -> JpegVerdict | None:
    """The verdict on a JPEG of the given size; None when libjpeg-turbo cannot decode it even
    leniently (the caller decides)."""
    scale = dict(colorspace='GRAY', fastdct=True, fastupsample=True,
                 min_height=min(height, max(HASH_SIDE, height // 8)),
                 min_width=min(width, max(HASH_SIDE, width // 8)))
    try:
        return JpegVerdict(OK, '', simplejpeg.decode_jpeg(data, strict=True, **scale))
    except ValueError as strict_error:
        try:
            pixels = simplejpeg.decode_jpeg(data, strict=False, **scale)
        except ValueError:
            return None
        return JpegVerdict(DAMAGED, str(strict_error), pixels)

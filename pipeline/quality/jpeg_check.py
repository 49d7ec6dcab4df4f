"""The verdict on a JPEG's data: ok, damaged or undecodable, as strict libjpeg-turbo judges it.

A JPEG is decoded at a reduced scale, which still entropy-decodes the whole stream (so the
verdict is the same at every scale: libjpeg warns only while it reads the stream), first
strictly (any libjpeg warning is an error), then, if that fails, leniently (warnings tolerated,
as Pillow and most readers do). Clean both ways: ok. Only leniently: damaged, with libjpeg's own
message as the reason ("Corrupt JPEG data: ...", "Premature end of JPEG file"): the decoder
filled in the pixels it could not read, so the image is grey or garbled in places. Bytes after
the end-of-image marker are never read, so harmless trailing data stays ok. Neither way: the
verdict is left to the caller (Pillow reads some JPEGs libjpeg-turbo cannot convert).

The same decode gives the luminance the perceptual hash is computed from (phash.py), at the
scale the hash reads; without a hash to compute (--leakage=off), at 1/8 scale, the least work.
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


def check_jpeg(data: bytes, width: int, height: int, hashed: bool = True) -> JpegVerdict | None:
    """The verdict on a JPEG of the given size, with its luminance at the scale the perceptual
    hash reads (at 1/8 scale without `hashed`); None when libjpeg-turbo cannot decode it even
    leniently (the caller decides)."""
    side = HASH_SIDE if hashed else 1
    scale = dict(colorspace='GRAY', fastdct=True, fastupsample=True,
                 min_height=min(height, max(side, height // 8)),
                 min_width=min(width, max(side, width // 8)))
    try:
        return JpegVerdict(OK, '', simplejpeg.decode_jpeg(data, strict=True, **scale))
    except ValueError as strict_error:
        try:
            pixels = simplejpeg.decode_jpeg(data, strict=False, **scale)
        except ValueError:
            return None
        return JpegVerdict(DAMAGED, str(strict_error), pixels)

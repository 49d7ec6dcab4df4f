"""Test images of every kind the converter must handle, as bytes."""
import io
import zlib

import numpy as np
from PIL import Image

from pipeline.sample_data import photo  # noqa: F401  (tests and benchmarks make photos too)


def gradient(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A smooth RGB image (compresses like a photo, survives JPEG with small error)."""
    y, x = np.mgrid[0:height, 0:width]
    rng = np.random.default_rng(seed)
    a, b, c = rng.integers(0, 256, 3)
    return np.stack([(x * 255 // max(1, width - 1) + a) % 256,
                     (y * 255 // max(1, height - 1) + b) % 256,
                     ((x + y) * 127 // max(1, width + height) + c) % 256], -1).astype(np.uint8)


def encode(image: Image.Image, fmt: str, **kwargs) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **kwargs)
    return out.getvalue()


def jpeg(width: int = 320, height: int = 240, seed: int = 0, **kwargs) -> bytes:
    return encode(Image.fromarray(gradient(width, height, seed)), 'JPEG', quality=90, **kwargs)


def png(width: int = 64, height: int = 48, seed: int = 0) -> bytes:
    return encode(Image.fromarray(gradient(width, height, seed)), 'PNG')


def png_chunk(kind: bytes, body: bytes) -> bytes:
    """A PNG chunk: length, type, data and the CRC of type and data."""
    return len(body).to_bytes(4, 'big') + kind + body + zlib.crc32(kind + body).to_bytes(4, 'big')


def exif_rotated_jpeg(width: int, height: int, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(Image.fromarray(gradient(width, height)), 'JPEG', quality=95, exif=exif.tobytes())


def decode(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert('RGB'))


def mosaics(count: int, side: int = 192, seed: int = 0):
    """`count` distinct photo-like JPEGs of side x side, quickly made: each a 2x2 mosaic of four
    different quarter tiles (turned 0-3 quarter turns) of 48 generated photos."""
    rng = np.random.default_rng(seed)
    half = side // 2
    bases = [photo(side, side, seed=s) for s in range(48)]
    tiles = [np.rot90(b[y:y + half, x:x + half], k) for b in bases for y in (0, half)
             for x in (0, half) for k in range(4)]
    for _ in range(count):
        a, b, c, d = (tiles[j] for j in rng.choice(len(tiles), 4, replace=False))
        mosaic = np.concatenate([np.concatenate([a, b], 1), np.concatenate([c, d], 1)], 0)
        yield encode(Image.fromarray(mosaic), 'JPEG', quality=90)

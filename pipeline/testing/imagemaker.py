"""Test images of every kind the converter must handle, as bytes."""
import io

import numpy as np
from PIL import Image, ImageDraw


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


def exif_rotated_jpeg(width: int, height: int, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(Image.fromarray(gradient(width, height)), 'JPEG', quality=95, exif=exif.tobytes())


def decode(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert('RGB'))


def photo(width: int = 256, height: int = 192, seed: int = 0) -> np.ndarray:
    """A photo-like RGB image, distinct for every seed: colour noise with a natural image's 1/f
    spectrum (structure at every scale) under a few shapes of random colours."""
    rng = np.random.default_rng(seed)
    fy, fx = np.fft.fftfreq(height)[:, None], np.fft.rfftfreq(width)[None, :]
    falloff = 1 / np.maximum(np.hypot(fx, fy), 1 / max(width, height))
    shared = rng.normal(size=falloff.shape) + 1j * rng.normal(size=falloff.shape)
    channels = []
    for _ in range(3):
        own = rng.normal(size=falloff.shape) + 1j * rng.normal(size=falloff.shape)
        plane = np.fft.irfft2((shared + 0.5 * own) * falloff ** 1.5, s=(height, width))
        channels.append((plane - plane.min()) / (np.ptp(plane) or 1) * rng.uniform(120, 255))
    image = Image.fromarray(np.stack(channels, -1).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(rng.integers(2, 6)):
        x, y = rng.integers(0, width), rng.integers(0, height)
        w, h = rng.integers(width // 10, width // 3), rng.integers(height // 10, height // 3)
        shape = draw.ellipse if rng.random() < 0.5 else draw.rectangle
        shape((x, y, x + w, y + h), fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
    return np.asarray(image)

"""A 64-bit perceptual hash of an image's luminance, and of its mirror image.

The luminance is resampled to 32x32 (Lanczos), transformed with a 2-D DCT, and the 64
lowest-frequency coefficients after the DC term (in zigzag order) are compared with their
median: bit i is set when coefficient i lies above it. Low frequencies survive resizing, JPEG re-encoding and
greyscale conversion; a brightness change scales or shifts them, which moves neither their order
nor their median much. The mirror image's hash is the hash of the horizontally flipped
luminance, so a mirrored copy is found by comparing one image's hash with the other's mirror
hash.

An image whose 32x32 luminance is flat (blank, constant) has no structure to hash: its hashes
are FLAT (0), which no other image gets (every other hash has 32 bits set).
"""
import numpy as np
from PIL import Image

SIZE = 32
BITS = 64
FLAT = 0
FLAT_STD = 2.0   # Luminance standard deviation (0..255) below which an image counts as flat.


def _dct_rows(n: int, size: int) -> np.ndarray:
    """The first n rows of the orthonormal DCT-II matrix of `size` points."""
    k, x = np.arange(n)[:, None], np.arange(size)[None, :]
    rows = np.cos(np.pi * (2 * x + 1) * k / (2 * size)) * np.sqrt(2 / size)
    rows[0] /= np.sqrt(2)
    return rows


def _zigzag(count: int, block: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of the first `count` AC coefficients of a block, lowest frequencies first."""
    cells = sorted(((u + v, u if (u + v) % 2 else v, u, v) for u in range(block)
                    for v in range(block) if u or v))
    chosen = cells[:count]
    return np.array([c[2] for c in chosen]), np.array([c[3] for c in chosen])


_BLOCK = 10   # 10x10 - 1 = 99 AC coefficients; the 64 of lowest frequency are used.
_DCT = _dct_rows(_BLOCK, SIZE)
_ROWS, _COLS = _zigzag(BITS, _BLOCK)
_WEIGHTS = 1 << np.arange(BITS - 1, -1, -1, dtype=np.uint64)
_LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)


def _luminance(pixels: np.ndarray) -> np.ndarray:
    """HxW float luminance (0..255) of HxWx3 RGB or HxW(x1) grey pixels."""
    if pixels.ndim == 3 and pixels.shape[2] == 3:
        return pixels.astype(np.float32) @ _LUMA
    return pixels.reshape(pixels.shape[0], pixels.shape[1]).astype(np.float32)


def _bits(coefficients: np.ndarray) -> int:
    chosen = coefficients[_ROWS, _COLS]
    bits = chosen > np.median(chosen)
    return int(np.sum(_WEIGHTS[bits], dtype=np.uint64))


def perceptual_hashes(pixels: np.ndarray) -> tuple[int, int]:
    """(hash, hash of the mirror image) of RGB or grey pixels, as unsigned 64-bit ints."""
    small = np.asarray(Image.fromarray(np.ascontiguousarray(_luminance(pixels)), 'F')
                       .resize((SIZE, SIZE), Image.Resampling.LANCZOS), dtype=np.float64)
    if small.std() < FLAT_STD:
        return FLAT, FLAT
    left = _DCT @ small
    return _bits(left @ _DCT.T), _bits(left[:, ::-1] @ _DCT.T)


def to_int64(value: int) -> int:
    """An unsigned 64-bit hash as the signed int64 a record stores."""
    return value - (1 << 64) if value >= 1 << 63 else value


def from_int64(value: int) -> int:
    """The unsigned 64-bit hash of a stored signed int64."""
    return value & ((1 << 64) - 1)


def distance(a: int, b: int) -> int:
    """Hamming distance of two 64-bit hashes."""
    return (a ^ b).bit_count()

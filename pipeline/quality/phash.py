"""A 64-bit perceptual hash of an image's luminance, and of its mirror image.

The luminance is resampled to 32x32 (Lanczos-3, as Pillow resizes), transformed with a 2-D DCT
(both as one small matrix product per axis), and the 64 lowest-frequency coefficients after
the DC term (in zigzag order) are compared with their median: bit i is set when coefficient i
lies above it. Low frequencies survive resizing, JPEG re-encoding and greyscale conversion; a brightness change scales or shifts them, which moves neither their order
nor their median much. The mirror image's hash is the hash of the horizontally flipped
luminance, so a mirrored copy is found by comparing one image's hash with the other's mirror
hash. It costs no second transform: the resampling is symmetric, and flipping a sequence
flips the sign of its odd DCT coefficients.

An image whose low frequencies are flat (blank, constant: a variation of under FLAT_STD levels)
has no structure to hash: its hashes are FLAT (0), which no other image gets (every other hash
has 32 bits set).
"""
import functools

import numpy as np

SIZE = 32
BITS = 64
FLAT = 0
FLAT_STD = 2.0   # Low-frequency luminance variation (0..255) below which an image counts as flat.


def _dct_rows(n: int, size: int) -> np.ndarray:
    """The first n rows of the orthonormal DCT-II matrix of `size` points."""
    k, x = np.arange(n)[:, None], np.arange(size)[None, :]
    rows = np.cos(np.pi * (2 * x + 1) * k / (2 * size)) * np.sqrt(2 / size)
    rows[0] /= np.sqrt(2)
    return rows


def _lanczos(x: np.ndarray) -> np.ndarray:
    """The Lanczos-3 kernel at x, evaluated only inside its support (a band of the resampling
    matrix): each weight is computed as it would be alone, so the values do not change."""
    weights = np.zeros_like(x)
    inside = np.abs(x) < 3
    near = x[inside]
    weights[inside] = np.sinc(near) * np.sinc(near / 3)
    return weights


def _resampling(n: int) -> np.ndarray:
    """SIZE x n weights resampling n samples to SIZE with a Lanczos-3 filter, widened when
    reducing (as Pillow's resize does)."""
    scale = n / SIZE
    support = 3 * max(scale, 1.0)
    centers = (np.arange(SIZE) + 0.5) * scale
    positions = np.arange(n) + 0.5
    weights = _lanczos((positions[None, :] - centers[:, None]) / max(scale, 1.0))
    weights[np.abs(positions[None, :] - centers[:, None]) >= support] = 0
    return weights / weights.sum(axis=1, keepdims=True)


def _zigzag(count: int, block: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of the first `count` AC coefficients of a block, lowest frequencies first."""
    cells = sorted(((u + v, u if (u + v) % 2 else v, u, v) for u in range(block)
                    for v in range(block) if u or v))
    chosen = cells[:count]
    return np.array([c[2] for c in chosen]), np.array([c[3] for c in chosen])


_BLOCK = 10   # 10x10 - 1 = 99 AC coefficients; the 64 of lowest frequency are used.
_DCT = _dct_rows(_BLOCK, SIZE)
_ROWS, _COLS = _zigzag(BITS, _BLOCK)
_LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)
_FLAT_ENERGY = (SIZE * FLAT_STD) ** 2
_CHOSEN = _ROWS * _BLOCK + _COLS     # The chosen coefficients' places in the flattened block.
_SIGNS = np.stack([np.ones(BITS), np.where(_COLS % 2, -1.0, 1.0)])   # Of the image; flipped.


@functools.lru_cache(maxsize=1024)
def _transform(n: int, dtype: type = np.float64) -> np.ndarray:
    """_BLOCK x n: resampling n samples to SIZE, then the DCT, in one matrix."""
    return (_DCT @ _resampling(n)).astype(dtype)


def _luminance(pixels: np.ndarray) -> np.ndarray:
    """HxW luminance (0..255) of HxWx3 RGB or HxW(x1) grey pixels."""
    if pixels.ndim == 3 and pixels.shape[2] == 3:
        return pixels.astype(np.float32) @ _LUMA
    return pixels.reshape(pixels.shape[0], pixels.shape[1])


BLOCK_PIXELS = 1 << 22   # Pixels whose luminance is held at once (~16 MB as float32).


def _resampled_rows(pixels: np.ndarray, dtype: type) -> np.ndarray:
    """_transform(H) @ luminance: the rows resampled, a block of rows at a time, so a large
    image's luminance is never held whole (one block for an image of BLOCK_PIXELS or fewer)."""
    height, width = pixels.shape[:2]
    rows = _transform(height, dtype)
    step = max(1, BLOCK_PIXELS // width)
    total = None
    for top in range(0, height, step):
        part = rows[:, top:top + step] @ _luminance(pixels[top:top + step])
        total = part if total is None else total + part
    return total


def perceptual_hashes(pixels: np.ndarray, single: bool = False) -> tuple[int, int]:
    """(hash, hash of the mirror image) of RGB or grey pixels, as unsigned 64-bit ints: bit i
    (from the top) set where chosen coefficient i lies above the median of the 64. `single`:
    the transforms in float32, as the luminance is, not float64; on a full-size photo that is
    about half the work (the luminance is not converted again), and a bit differs only where
    a coefficient lies within float32's rounding of the median."""
    dtype = np.float32 if single else np.float64
    chosen = (_resampled_rows(pixels, dtype)
              @ _transform(pixels.shape[1], dtype).T).ravel()[_CHOSEN]
    if chosen @ chosen < _FLAT_ENERGY:
        return FLAT, FLAT
    both = chosen * _SIGNS
    middle = np.partition(both, (BITS // 2 - 1, BITS // 2), axis=1)
    median = (middle[:, BITS // 2 - 1:BITS // 2] + middle[:, BITS // 2:BITS // 2 + 1]) / 2
    hashed, mirrored = np.packbits(both > median, axis=1).view('>u8').ravel().tolist()
    return hashed, mirrored


def to_int64(value: int) -> int:
    """An unsigned 64-bit hash as the signed int64 a record stores."""
    return value - (1 << 64) if value >= 1 << 63 else value


def from_int64(value: int) -> int:
    """The unsigned 64-bit hash of a stored signed int64."""
    return value & ((1 << 64) - 1)


def distance(a: int, b: int) -> int:
    """Hamming distance of two 64-bit hashes."""
    return (a ^ b).bit_count()

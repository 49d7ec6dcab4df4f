"""A folder of many small distinct JPEGs shaped as ImageNet is (1,000 class folders, 4% of the
images in validation/), for the tests and benchmarks of memory per input: made once per size
and reused. Images are 24-40 px of random waves of colour (~0.7 KB): no two are alike, and no
two are near-duplicates to the perceptual hash (which random blocks of colour would be)."""
import os
import random
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import simplejpeg

CLASSES = 1000
VALIDATION_SHARE = 0.04
WAVES = 4


def make(root: str, count: int, classes: int = CLASSES, seed: int = 0) -> str:
    """Writes `count` images under ROOT/train/<class>/ and ROOT/validation/<class>/ (or reuses
    those a call with the same arguments wrote: a marker file names them); returns ROOT."""
    marker = os.path.join(root, f'.made-{count}-{classes}-{seed}')
    if os.path.exists(marker):
        return root
    shares = [(start, min(count, start + 50_000)) for start in range(0, count, 50_000)]
    with ProcessPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(_write, [(root, start, end, classes, seed) for start, end in shares]))
    with open(marker, 'w'):
        pass
    return root


def _write(task: tuple) -> None:
    root, start, end, classes, seed = task
    rng = np.random.default_rng((seed, start))
    made: set[str] = set()
    for index in range(start, end):
        split = 'validation' if random.Random(index).random() < VALIDATION_SHARE else 'train'
        folder = os.path.join(root, split, f'n{index % classes:08d}')
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        side = int(rng.integers(24, 41))
        pixels = _waves(rng, side)
        pixels[0, 0] = (index & 255, (index >> 8) & 255, (index >> 16) & 255)   # Distinct.
        with open(os.path.join(folder, f'{index:08d}.JPEG'), 'wb') as stream:
            stream.write(simplejpeg.encode_jpeg(pixels, quality=80))


def _waves(rng: np.random.Generator, side: int) -> np.ndarray:
    """A side x side RGB image: per channel, a sum of WAVES cosine waves of random direction,
    frequency and phase."""
    y, x = np.mgrid[:side, :side].astype(np.float32) / side
    waves = rng.uniform(-6, 6, (3, WAVES, 2)).astype(np.float32)
    phases = rng.uniform(0, 2 * np.pi, (3, WAVES, 1, 1)).astype(np.float32)
    planes = np.cos(2 * np.pi * (waves[..., 0, None, None] * x + waves[..., 1, None, None] * y)
                    + phases).sum(axis=1)
    return np.ascontiguousarray((127.5 + 127.5 / WAVES * planes).transpose(1, 2, 0)
                                .clip(0, 255).astype(np.uint8))

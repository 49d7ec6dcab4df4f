"""A small generated dataset in the folder layout, as the old simple_example.py made."""
import os
import random

import numpy as np
from PIL import Image, ImageDraw

from pipeline.base.splits import SPLITS


def write_sample_dataset(root: str, num_classes: int = 5, per_class: tuple[int, int] = (10, 20),
                         seed: int = 0) -> str:
    """Writes ROOT/<split>/class-<i>/<image> (photo-like JPEGs and PNGs, varied sizes, no two
    alike); returns ROOT."""
    rng = random.Random(seed)
    for split in SPLITS:
        for label in range(num_classes):
            folder = os.path.join(root, split, f'class-{label}')
            os.makedirs(folder, exist_ok=True)
            for index in range(rng.randint(*per_class)):
                width, height = rng.choice([(224, 224), (320, 240), (240, 320), (500, 375)])
                image = Image.fromarray(photo(width // 4, height // 4, seed=rng.getrandbits(32)))
                image = image.resize((width, height), Image.Resampling.BICUBIC)   # Quicker made.
                extension = rng.choice(['jpg', 'jpg', 'png'])
                image.save(   # A fast PNG: the sample is made at every run.
                    os.path.join(folder, f'class-{label}-ex-{index}.{extension}'), compress_level=1)
    return root


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

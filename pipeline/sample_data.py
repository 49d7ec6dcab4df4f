"""A small generated dataset in the folder layout, as the old simple_example.py made."""
import os
import random

import numpy as np
from PIL import Image

from pipeline.formats.metadata import SPLITS


def write_sample_dataset(root: str, num_classes: int = 5, per_class: tuple[int, int] = (10, 20),
                         seed: int = 0) -> str:
    """Writes ROOT/<split>/class-<i>/<image> (random JPEGs and PNGs, varied sizes); returns ROOT."""
    rng = random.Random(seed)
    for split in SPLITS:
        for label in range(num_classes):
            folder = os.path.join(root, split, f'class-{label}')
            os.makedirs(folder, exist_ok=True)
            for index in range(rng.randint(*per_class)):
                width, height = rng.choice([(224, 224), (320, 240), (240, 320), (500, 375)])
                pixels = np.random.default_rng(rng.getrandbits(32)).integers(
                    0, 256, (height, width, 3), dtype=np.uint8)
                extension = rng.choice(['jpg', 'jpg', 'png'])
                Image.fromarray(pixels).save(
                    os.path.join(folder, f'class-{label}-ex-{index}.{extension}'))
    return root

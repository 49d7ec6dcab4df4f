"""An ImageNet-like workload made from real photos that scikit-image and scikit-learn ship.

Random crops of the photos, resized to 300-500 px on the long side, written as the folder
layout ROOT/<split>/<class>/<image>: ~94% RGB JPEG (quality 90), ~3% PNG, ~2% grayscale JPEG,
~1% CMYK JPEG; 80/10/10 train/validation/test over 10 classes. Photos compress like photos;
random noise would not.

Crops of 16 photos overlap, so many images are near-duplicates of each other (about one pair
across splits per image): the worst case for the leakage check. With `distinct`, each crop is
cut into a 4x4 grid whose cells are shuffled and turned by random quarter turns before it is
resized: the same photos, compressing about the same, but no two images alike. With `photos`,
crops of that many generated photo-like images: groups of look-alikes that grow with the
workload. With `copies` (copies_workload), crops of the same photos in one split, each present
several times under other names, byte for byte: a dataset with many exact copies.
"""
import multiprocessing
import os
import random

import numpy as np
from PIL import Image

from pipeline.testing import imagemaker

SPLITS = (('train', 0.8), ('validation', 0.1), ('test', 0.1))
CLASSES = 10


def _photos() -> list[np.ndarray]:
    import skimage.data
    from sklearn.datasets import load_sample_images
    names = ['astronaut', 'coffee', 'chelsea', 'hubble_deep_field', 'immunohistochemistry',
             'rocket', 'retina', 'cat', 'camera', 'coins', 'moon', 'grass', 'gravel', 'brick']
    photos = [getattr(skimage.data, name)() for name in names]
    photos += list(load_sample_images().images)
    return [p if p.ndim == 3 else np.stack([p] * 3, -1) for p in photos]


def _few_photos(count: int) -> list[np.ndarray]:
    """`count` photo-like images of 1024x768 (pipeline/testing/imagemaker.py; no scikit-image
    needed)."""
    return [imagemaker.photo(1024, 768, seed=seed) for seed in range(count)]


_PHOTOS: list = []


def _mosaic(image: np.ndarray, rng: random.Random) -> np.ndarray:
    """The image's 4x4 grid of square cells, shuffled, each turned by 0-3 quarter turns."""
    side = min(image.shape[0], image.shape[1]) // 4
    cells = [np.rot90(image[y * side:(y + 1) * side, x * side:(x + 1) * side], rng.randrange(4))
             for y in range(4) for x in range(4)]
    rng.shuffle(cells)
    return np.concatenate([np.concatenate(cells[r * 4:r * 4 + 4], axis=1) for r in range(4)])


def _make(task: tuple[str, int, int, bool, int]) -> None:
    path, index, seed, distinct, photos = task
    if not _PHOTOS:
        _PHOTOS.extend(_few_photos(photos) if photos else _photos())
    rng = random.Random(seed)
    photo = _PHOTOS[rng.randrange(len(_PHOTOS))]
    h, w = photo.shape[:2]
    least = 0.9 if photos else 0.5   # Of each side: crops of a few photos are look-alikes.
    ch, cw = rng.randint(int(h * least), h), rng.randint(int(w * least), w)
    y, x = rng.randint(0, h - ch), rng.randint(0, w - cw)
    crop = photo[y:y + ch, x:x + cw, :3]
    image = Image.fromarray(np.ascontiguousarray(_mosaic(crop, rng) if distinct else crop))
    side = rng.randint(300, 500)
    scale = side / max(image.size)
    image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))),
                         Image.Resampling.BICUBIC)
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    kind = rng.random()
    if kind < 0.03:
        image.save(path.replace('.jpg', '.png'), 'PNG')
    elif kind < 0.05:
        image.convert('L').save(path, 'JPEG', quality=90)
    elif kind < 0.06:
        image.convert('CMYK').save(path, 'JPEG', quality=90)
    else:
        image.save(path, 'JPEG', quality=90)


def make_workload(root: str, n: int, seed: int = 0, distinct: bool = False,
                  photos: int = 0) -> str:
    """Writes n images under root (skipped if a complete workload is there); returns root.
    `photos`: crops of that many photo-like images (_few_photos) instead, so that groups of
    look-alikes grow with n (the pair-dense case of the leakage check)."""
    marker = os.path.join(root, f'.complete-{n}-{seed}{"-distinct" if distinct else ""}'
                                f'{f"-photos{photos}" if photos else ""}')
    if os.path.exists(marker):
        return root
    tasks, rng = [], random.Random(seed)
    for index in range(n):
        r, split = rng.random(), SPLITS[-1][0]
        for name, share in SPLITS:
            if r < share:
                split = name
                break
            r -= share
        label = rng.randrange(CLASSES)
        folder = os.path.join(root, split, f'class_{label:02d}')
        os.makedirs(folder, exist_ok=True)
        tasks.append((os.path.join(folder, f'img_{index:07d}.jpg'), index, rng.getrandbits(32),
                      distinct, photos))
    _generate(tasks)
    open(marker, 'w').close()
    return root


def _generate(tasks: list[tuple[str, int, int, bool, int]]) -> None:
    with multiprocessing.Pool() as pool:
        pool.map(_make, tasks, chunksize=64)


def copies_workload(root: str, n: int, copies: int = 4, seed: int = 0) -> str:
    """n files under root/train (skipped if a complete workload is there); returns root:
    n // copies crops as make_workload makes them, in 10 class folders, each present `copies`
    times in its folder, the others as hard links named img_NNNNNNN_copyK (exact byte copies
    under other names; a converter reads the same bytes from a link as from a copy)."""
    marker = os.path.join(root, f'.complete-copies-{n}-{copies}-{seed}')
    if os.path.exists(marker):
        return root
    tasks, rng = [], random.Random(seed)
    for index in range(n // copies):
        folder = os.path.join(root, 'train', f'class_{rng.randrange(CLASSES):02d}')
        os.makedirs(folder, exist_ok=True)
        tasks.append((os.path.join(folder, f'img_{index:07d}.jpg'), index, rng.getrandbits(32),
                      False, 0))
    _generate(tasks)
    for path, *_ in tasks:
        made = path if os.path.exists(path) else path.replace('.jpg', '.png')
        stem, extension = os.path.splitext(made)
        for copy in range(1, copies):
            link = f'{stem}_copy{copy}{extension}'
            if not os.path.lexists(link):
                os.link(made, link)
    open(marker, 'w').close()
    return root


def list_images(root: str) -> list[tuple[str, str, str]]:
    """(split, class, path) of every image in a workload, sorted."""
    out = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            if not name.startswith('.'):
                split, label = os.path.relpath(dirpath, root).split(os.sep)
                out.append((split, label, os.path.join(dirpath, name)))
    return sorted(out)


def linked_workload(source: str, target: str, copies: int = 1, every: int = 1) -> str:
    """Every `every`-th image of `source`, as symlinks: a smaller or larger workload of the same
    images without generating more. Copies go into new class folders (class_03_c1, ...), so a
    larger workload grows as datasets do, by classes, not by ever larger class folders."""
    marker = os.path.join(target, f'.complete-{copies}-{every}')
    if os.path.exists(marker):
        return target
    for split, label, path in list_images(source)[::every]:
        for copy in range(copies):
            folder = os.path.join(target, split, f'{label}_c{copy}')
            os.makedirs(folder, exist_ok=True)
            link = os.path.join(folder, os.path.basename(path))
            if not os.path.lexists(link):
                os.symlink(path, link)
    open(marker, 'w').close()
    return target

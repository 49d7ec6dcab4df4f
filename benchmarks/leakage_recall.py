"""Recall and false pairs of the leakage check, by kind of copy and Hamming radius, on real
photos: the basis of the radius chosen (pipeline/quality/pairing.py RADIUS).

    python -m benchmarks.leakage_recall [--tile 128] [--reencode]

Distinct images are the non-overlapping tiles of the photos benchmarks/workload.py draws from
(its own images are overlapping crops of 16 photos, so they are not distinct), scaled to 256 px
and stored as JPEG at quality 90. Each tile gets one copy of each kind (resized to 40-90% and
re-encoded at quality 60-90, brightness +20% and -20%, greyscale, mirrored, enlarged three times
and stored as PNG). Images go through the converter's own path (convert_image: the strict
decode and the hashes); pairs are found exhaustively and by multi-index hashing
(pairing.find_clusters, which the pipeline uses: a copy is found when it falls in its original's
cluster), each copy in a split of its own. Flat tiles (blank sky, black space) are counted apart: they are never
paired. With --reencode, every image is hashed as a run given --reencode hashes it.
"""
import argparse
import io
import random

import numpy as np
from PIL import Image, ImageEnhance

from benchmarks.workload import _photos
from pipeline.quality import pairing
from pipeline.base.settings import ImageOptions
from transforms.images import convert_image
from pipeline.quality.phash import FLAT, distance, to_int64

KINDS = {
    'resized, q60-90': lambda im, rng: _jpeg(im.resize(
        (int(im.width * rng.uniform(0.4, 0.9)), int(im.height * rng.uniform(0.4, 0.9))),
        Image.Resampling.BICUBIC), rng.randint(60, 90)),
    'brightness +20%': lambda im, rng: _jpeg(ImageEnhance.Brightness(im).enhance(1.2), 85),
    'brightness -20%': lambda im, rng: _jpeg(ImageEnhance.Brightness(im).enhance(0.8), 85),
    'greyscale': lambda im, rng: _jpeg(im.convert('L'), 85),
    'mirrored': lambda im, rng: _jpeg(im.transpose(Image.Transpose.FLIP_LEFT_RIGHT), 85),
    'enlarged 3x, PNG': lambda im, rng: _png(im.resize((im.width * 3, im.height * 3),
                                                      Image.Resampling.BICUBIC)),
}
RADII = (4, 6, 8, 10, 12)


def _jpeg(image: Image.Image, quality: int = 90) -> bytes:
    out = io.BytesIO()
    image.save(out, 'JPEG', quality=quality)
    return out.getvalue()


def _png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, 'PNG')
    return out.getvalue()


def _hashes(data: bytes, options: ImageOptions) -> tuple[int, int]:
    stored = convert_image(data, options)
    return stored.phash, stored.phash_mirrored


def _tiles(side: int) -> list[Image.Image]:
    tiles = []
    for photo in _photos():
        for y in range(0, photo.shape[0] - side + 1, side):
            for x in range(0, photo.shape[1] - side + 1, side):
                tile = np.ascontiguousarray(photo[y:y + side, x:x + side, :3])
                tiles.append(Image.fromarray(tile).resize((256, 256), Image.Resampling.BICUBIC))
    return tiles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--tile', type=int, default=128)
    parser.add_argument('--reencode', action='store_true', help='Hash as --reencode does.')
    args = parser.parse_args()
    options = ImageOptions(reencode=args.reencode)
    rng = random.Random(0)
    tiles = _tiles(args.tile)
    originals = [_hashes(_jpeg(t), options) for t in tiles]
    usable = [i for i, h in enumerate(originals) if h[0] != FLAT]
    print(f'{len(tiles)} distinct tiles of {args.tile} px, {len(tiles) - len(usable)} flat')
    print(f'{"copy":<18}' + ''.join(f'{"r<=" + str(r):>8}' for r in RADII) + f'{"bands":>8}')
    for kind, make in KINDS.items():
        copies = {i: _hashes(make(tiles[i], rng), options) for i in usable}
        near = [min(distance(originals[i][0], c[0]), distance(originals[i][0], c[1]))
                for i, c in copies.items()]
        entries = [('train', str(i), '', to_int64(originals[i][0]), to_int64(originals[i][1]))
                   for i in usable]
        entries += [('test', str(i), '', to_int64(c[0]), to_int64(c[1])) for i, c in copies.items()]
        found_clusters, _, _ = pairing.find_clusters(entries)
        found = sum(len(set(members.get('train', ())) & set(members.get('test', ())))
                    for members in (dict(c.members) for c in found_clusters))
        print(f'{kind:<18}' + ''.join(f'{np.mean(np.array(near) <= r):>8.3f}' for r in RADII)
              + f'{found / len(usable):>8.3f}')
    distinct = [min(distance(originals[i][0], originals[j][0]),
                    distance(originals[i][0], originals[j][1]))
                for a, i in enumerate(usable) for j in usable[a + 1:]]
    distinct = np.array(distinct)
    print(f'{"false pairs":<18}' + ''.join(f'{np.mean(distinct <= r):>8.4%}' for r in RADII)
          + f'   of {len(distinct)} pairs of distinct tiles')
    print(f'{"  count":<18}' + ''.join(f'{int(np.sum(distinct <= r)):>8}' for r in RADII))


if __name__ == '__main__':
    main()

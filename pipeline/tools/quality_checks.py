"""What `verify` checks of the data-quality findings: the strict libjpeg-turbo verdict on each
stored image, and leakage across splits recomputed from the records' perceptual hashes (from
the images themselves for datasets written before records carried them), against leakage.jsonl.
"""
import json

from pipeline.formats import fileio, metadata, records
from transforms.jpeg_check import DAMAGED, check_jpeg
from transforms.pairing import RADIUS, find_pairs
from transforms.phash import perceptual_hashes, to_int64

HASH_FEATURES = records.HASH_FEATURES


def damage(encoded: bytes, width: int, height: int) -> str | None:
    """The problem of a stored JPEG that strict libjpeg-turbo finds damaged, else None."""
    verdict = check_jpeg(encoded, width, height)
    if verdict is not None and verdict.verdict == DAMAGED:
        return f'damaged JPEG (strict libjpeg-turbo): {verdict.reason}'
    return None


def stored_hashes(example: dict) -> tuple[int, int]:
    """A record's (hash, mirror hash) as stored (int64), or computed from its image when the
    record has none."""
    if all(len(example.get(key, ())) == 1 for key in HASH_FEATURES):
        return example[records.PHASH][0], example[records.PHASH_MIRRORED][0]
    width, height = example[records.WIDTH][0], example[records.HEIGHT][0]
    verdict = check_jpeg(example[records.ENCODED][0], width, height)
    if verdict is None:
        return 0, 0
    return tuple(to_int64(h) for h in perceptual_hashes(verdict.pixels))


def leakage_problems(output_dir: str, entries: list) -> list[str]:
    """Recomputes the pairs across splits; prints how many; a problem when leakage.jsonl (if
    the dataset has one) lists others, or, after --leakage=drop, when the records give any."""
    pairs, flat, crowded = find_pairs(entries)
    print(f'leakage: {len(pairs)} near-duplicate pair(s) across splits within {RADIUS} of 64 bits'
          f' ({sum(p.exact for p in pairs)} exact); {sum(flat.values())} flat image(s), '
          f'{len(crowded)} crowded bucket(s) not compared')
    listed = fileio.read_if_exists(fileio.join(output_dir, metadata.LEAKAGE))
    summary = json.loads(fileio.read_if_exists(fileio.join(output_dir, metadata.SUMMARY)) or '{}')
    action = summary.get('leakage', {}).get('action')
    if action == 'off':   # Not checked: nothing to compare, and nothing should be listed.
        print('leakage: not checked by the conversion (--leakage=off)')
        return [f'{metadata.LEAKAGE}: present, yet summary.json says --leakage=off'] if (
            listed is not None) else []
    if listed is None:
        return []
    if action == 'drop':   # Each pair's later copy is out.
        return [f'{metadata.LEAKAGE}: --leakage=drop left out the later copy of each pair it '
                f'lists, yet the records give {len(pairs)} pair(s)'] if pairs else []
    lines = sorted((json.loads(line) for line in listed.decode().splitlines() if line),
                   key=lambda p: (p['split_a'], p['source_a'], p['split_b'], p['source_b']))
    if lines != [p.line() for p in pairs]:   # Pairs come sorted by those fields.
        return [f'{metadata.LEAKAGE}: lists {len(lines)} pair(s), the records give {len(pairs)}']
    return []

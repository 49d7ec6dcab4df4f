"""What `verify` checks of the data-quality findings: the strict libjpeg-turbo verdict on each
stored image, and the clusters of near-duplicates across splits recomputed from the records'
perceptual hashes (from the images themselves for datasets written before records carried
them), against leakage.jsonl.
"""
from pipeline.io import fileio
from pipeline.output import bounded_reads, metadata, records
from pipeline.quality.jpeg_check import DAMAGED, check_jpeg
from pipeline.quality.pairing import RADIUS, find_clusters
from pipeline.quality.phash import perceptual_hashes, to_int64

HASH_FEATURES = records.HASH_FEATURES


def damage(encoded: bytes, width: int, height: int) -> str | None:
    """The problem of a stored JPEG that strict libjpeg-turbo finds damaged, else None."""
    verdict = check_jpeg(encoded, width, height, hashed=False)
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


def _key(cluster: dict) -> tuple:
    """What verify compares of a cluster: its members and its closest distance (which of
    several pairs at that distance is named may differ)."""
    return (tuple((split, tuple(sorted(s))) for split, s in sorted(cluster['members'].items())),
            cluster['closest']['distance'])


def leakage_problems(output_dir: str, entries: list) -> list[str]:
    """Recomputes the clusters that span splits; prints how many; a problem when leakage.jsonl
    (if the dataset has one) lists others, or, after --leakage=drop, when the records give
    any."""
    path = fileio.join(output_dir, metadata.LEAKAGE)
    listed = bounded_reads.jsonl_lines(path)
    summary = bounded_reads.load_metadata(output_dir, metadata.SUMMARY) or {}
    action = summary.get('leakage', {}).get('action')
    if action == 'off':   # Not checked: nothing to compare, and nothing should be listed.
        print('leakage: not checked by the conversion (--leakage=off)')
        return [f'{metadata.LEAKAGE}: present, yet summary.json says --leakage=off'] if (
            listed is not None) else []
    found, flat, crowded = find_clusters(entries)
    print(f'leakage: {len(found)} cluster(s) of near-duplicates span splits within {RADIUS} of '
          f'64 bits ({sum(c.images for c in found)} images); {sum(flat.values())} flat '
          f'image(s), {len(crowded)} crowded bucket(s) not compared')
    if listed is None:
        return []
    if action == 'drop':   # Each cluster's members in later splits are out.
        return [f'{metadata.LEAKAGE}: --leakage=drop left out the members in later splits of '
                f'each cluster it lists, yet the records give {len(found)} cluster(s) across '
                'splits'] if found else []
    if 'clusters' not in summary.get('leakage', {}):   # Pairs, of a version before clusters.
        return []
    wanted, keys = sorted(_key(c.line()) for c in found), []
    for number, line in listed:
        try:
            keys.append(_key(line))
        except (TypeError, KeyError, AttributeError, IndexError):
            return [f'{metadata.LEAKAGE}: line {number} is not a cluster this tool wrote']
        if len(keys) > len(wanted):
            return [f'{metadata.LEAKAGE}: lists more than {len(wanted)} cluster(s), the records '
                    f'give {len(wanted)}']
    if sorted(keys) != wanted:
        return [f'{metadata.LEAKAGE}: lists {len(keys)} cluster(s), the records give '
                f'{len(found)}']
    return []

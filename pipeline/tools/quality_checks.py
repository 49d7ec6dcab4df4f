"""What `verify` checks of the data-quality findings, recomputed from the records: the strict
libjpeg-turbo verdict on each stored image (the damaged JPEGs --damaged_images=keep kept are a
finding, counted against summary.json), and exact copies (records of one image) within a split
and across splits (a finding; summary.json's `exact_copies`, where noted, must be the
records'). The clusters of near-duplicates are checked in leakage_checks.py.

The shard readers send each record as a RECORD row (its number in its shard, its SHA-256's
first 16 bytes, its hashes and a digest of its source): a few dozen bytes a record and no text,
whatever the dataset's size. Copies and clusters are found on the whole table with array
operations; a record is named by its place (split, shard, number) and, in the few examples
printed, by its source, read again from its shard (`verify.sources_at`).
"""
import dataclasses
import hashlib
import numpy as np

from pipeline.output import metadata, records
from pipeline.base.splits import SPLITS
from pipeline.quality.jpeg_check import DAMAGED, check_jpeg
from pipeline.quality.phash import perceptual_hashes, to_int64
from pipeline.tools.metadata_checks import shown

HASH_FEATURES = records.HASH_FEATURES
EXAMPLES = 3   # Examples printed of each finding.

# A record as a shard's reader sends it: its number in the shard, the first 16 bytes of its
# image's SHA-256 (two integers), its hash and mirror hash (int64, as stored), and a digest of
# its image/source (source_digest).
RECORD = np.dtype([('number', '<u4'), ('sha_a', '<u8'), ('sha_b', '<u8'), ('phash', '<i8'),
                   ('mirror', '<i8'), ('source', '<u8')])
# A record of the dataset: RECORD with its split (index in SPLITS) and shard.
PLACED = np.dtype([('split', 'u1'), ('shard', '<u4'), *RECORD.descr])
Place = tuple[str, int, int]   # (split, shard, record number)


def damage(encoded: bytes, width: int, height: int) -> str | None:
    """The problem of a stored JPEG that strict libjpeg-turbo finds damaged, else None."""
    verdict = check_jpeg(encoded, width, height, hashed=False)
    if verdict is not None and verdict.verdict == DAMAGED:
        return f'damaged JPEG (strict libjpeg-turbo): {verdict.reason}'
    return None


def stored_hashes(example: dict, compute: bool) -> tuple[int, int]:
    """A record's (hash, mirror hash) as stored (int64); when it has none, computed from its
    image if `compute`, else (0, 0)."""
    if all(len(example.get(key, ())) == 1 for key in HASH_FEATURES):
        return example[records.PHASH][0], example[records.PHASH_MIRRORED][0]
    width, height = example[records.WIDTH][0], example[records.HEIGHT][0]
    verdict = check_jpeg(example[records.ENCODED][0], width, height) if compute else None
    if verdict is None:
        return 0, 0
    return tuple(to_int64(h) for h in perceptual_hashes(verdict.pixels))


def source_digest(source: str) -> int:
    """64 bits standing for a record's image/source (as leakage.jsonl names it)."""
    return int.from_bytes(hashlib.blake2b(source.encode(errors='replace'), digest_size=8).digest(),
                          'little')


def record_row(number: int, sha256: bytes, hashes: tuple[int, int], source: str) -> tuple:
    """A RECORD row of record `number`, whose image has the SHA-256 `sha256` (32 bytes)."""
    return (number, int.from_bytes(sha256[:8], 'little'), int.from_bytes(sha256[8:16], 'little'),
            *hashes, source_digest(source))


def placed(split: str, shard: int, rows: np.ndarray) -> np.ndarray:
    """A shard's RECORD rows as PLACED rows."""
    table = np.zeros(len(rows), dtype=PLACED)
    for name in RECORD.names:
        table[name] = rows[name]
    table['split'], table['shard'] = SPLITS.index(split), shard
    return table


def where(place: Place) -> str:
    split, shard, number = place
    return f'{split} shard {shard} record {number}'


def place_of(row) -> Place:
    """The place of a PLACED row."""
    return SPLITS[int(row['split'])], int(row['shard']), int(row['number'])


@dataclasses.dataclass
class Copies:
    """Exact copies (records of one SHA-256): per split the records whose image an earlier
    record of the split has (`within`), per split the images an earlier split holds too
    (`across`), and a few (copy, original) places within splits."""
    within: dict[str, int]
    across: dict[str, int]
    examples: list[tuple[Place, Place]]


def exact_copies(table: np.ndarray) -> Copies:
    """The exact copies among the PLACED rows `table` (sorted once: linear memory, no
    per-record objects)."""
    order = np.lexsort((table['number'], table['shard'], table['split'], table['sha_b'],
                        table['sha_a']))
    rows = table[order]
    image = (rows['sha_a'][1:] == rows['sha_a'][:-1]) & (rows['sha_b'][1:] == rows['sha_b'][:-1])
    split = image & (rows['split'][1:] == rows['split'][:-1])
    copies = np.flatnonzero(split) + 1           # Each record after the first of its split.
    later = np.flatnonzero(image & ~split) + 1   # First of a split, not of its image.
    firsts = np.flatnonzero(np.r_[True, ~split])
    shown = copies[np.lexsort((rows['number'][copies], rows['shard'][copies],
                               rows['split'][copies]))[:EXAMPLES]]
    originals = firsts[np.searchsorted(firsts, shown, side='right') - 1]
    return Copies(per_split(rows['split'][copies]), per_split(rows['split'][later]),
                  [(place_of(rows[c]), place_of(rows[o])) for c, o in zip(shown, originals)])


def per_split(splits: np.ndarray) -> dict[str, int]:
    counts = np.bincount(splits, minlength=len(SPLITS))
    return {SPLITS[i]: int(n) for i, n in enumerate(counts) if n}


def counts_text(counts: dict[str, int]) -> str:
    return ', '.join(f'{split} {n}' for split, n in counts.items())


def copies_lines(copies: Copies, names: dict[Place, str]) -> list[str]:
    """What verify prints of the exact copies (a finding, not a problem): counts per split and
    a few examples, each named by place and by its source (`names`)."""
    lines = []
    if copies.within:
        lines.append(f'exact copies within a split: {sum(copies.within.values())} record(s) '
                     f'hold the image of an earlier record of their split '
                     f'({counts_text(copies.within)}); a data-quality finding, not damage')
        lines += [f'  e.g. {where(copy)} ({names.get(copy, "?")}) is a copy of {where(original)} '
                  f'({names.get(original, "?")})' for copy, original in copies.examples]
    if copies.across:
        lines.append(f'exact copies across splits: {sum(copies.across.values())} image(s) of '
                     f'a split are in an earlier split too ({counts_text(copies.across)}); see '
                     f'{metadata.LEAKAGE}')
    return lines


def copies_problems(splits: dict, copies: Copies) -> list[str]:
    """summary.json's `exact_copies` of each split (where the run noted it) against the
    records'."""
    problems = []
    for split, noted in sorted(splits.items()):
        if isinstance(noted, dict) and 'exact_copies' in noted:
            found = copies.within.get(split, 0)
            if noted['exact_copies'] != found:
                problems.append(f'{metadata.SUMMARY}: {split} has {shown(noted["exact_copies"])} '
                                f'exact_copies, the records give {found}')
    return problems


def damaged_lines(counts: dict[str, int], examples: list[tuple[Place, str, str]]
                  ) -> list[str]:
    """What verify prints of the damaged JPEGs that --damaged_images=keep kept (a finding)."""
    if not sum(counts.values()):
        return []
    return [f'damaged JPEGs kept (--damaged_images=keep): {sum(counts.values())} '
            f'({counts_text({s: n for s, n in counts.items() if n})}); see damaged-SPLIT.jsonl'
            ] + [f'  e.g. {where(place)} ({source}): {reason}'
                 for place, source, reason in examples]


def damaged_problems(summary: dict, counts: dict[str, int], sample: float) -> list[str]:
    """After --damaged_images=keep, each split's damaged JPEGs in the records against
    summary.json's `damaged` (at most as many when only a `sample` of images is decoded, or
    when --leakage=drop dropped some)."""
    if summary.get('damaged_images') != 'keep':
        return []
    problems = []
    for split, noted in sorted(summary['splits'].items()):
        if not isinstance(noted, dict):
            continue
        found, damaged = counts.get(split, 0), noted.get('damaged')
        exact = sample >= 1 and not noted.get('dropped_copies')
        if not isinstance(damaged, int) or found > damaged or (exact and found != damaged):
            problems.append(f'{metadata.SUMMARY}: {split} has {shown(damaged)} damaged, the '
                            f'records hold {found} damaged JPEGs (--damaged_images=keep keeps '
                            'each)')
    return problems

"""What the data-quality checks found, as the commit writes it: damaged JPEGs per split
(damaged-SPLIT.jsonl) and near-duplicate pairs across splits (leakage.jsonl), with their counts
for summary.json.

The pairs never meet in one place: each partition's PairList is written as a part of
leakage.jsonl in the run's temporary folder (its lines in PairList order), and the commit gets
only the parts' counts and paths, and joins the files (a compose on Cloud Storage), parts in the
order of their first pairs. With one partition (under ~32,768 images, leakage.group_bits) the
file is sorted throughout; with more, it is sorted within each part."""
import collections
import dataclasses
import hashlib
import json

import apache_beam as beam

from pipeline.formats import fileio, metadata, output_folder
from pipeline.formats.errors import DatasetError
from transforms.pairing import MAX_BUCKET, RADIUS, Pair, PairList
from transforms.settings import ConversionSettings


@dataclasses.dataclass(frozen=True)
class PairPart:
    """One partition's pairs, written as leakage.jsonl lines at `path`: its first pair's fields
    (PairList's order) and the counts summary.json gives."""
    path: str
    first: tuple
    pairs: int
    exact: int
    mirrored: int
    between: tuple[tuple[str, int], ...]   # ('earlier split/later split', pairs)


def pair_lines(pairs: tuple[Pair, ...]) -> bytes:
    """leakage.jsonl lines of `pairs`."""
    return ''.join(json.dumps(p.line()) + '\n' for p in pairs).encode()


def write_part(pair_list: PairList, temp_dir: str) -> PairPart:
    """Writes a partition's pairs into the temporary folder (named after its first pair, so a
    retried write rewrites the same file)."""
    pairs = pair_list.pairs
    name = hashlib.blake2b(repr(pair_list.rows[0][:2]).encode(), digest_size=8).hexdigest()
    path = output_folder.pairs_path(temp_dir, name)
    fileio.write_bytes(path, pair_lines(pairs))
    between = collections.Counter(f'{p.first[0]}/{p.second[0]}' for p in pairs)
    return PairPart(path, pair_list.rows[0], len(pairs), sum(p.exact for p in pairs),
                    sum(p.mirrored for p in pairs), tuple(sorted(between.items())))


@dataclasses.dataclass(frozen=True)
class Leakage:
    """The pairs' parts (in the order of their first pairs), flat images per split, and
    crowded buckets (band, value, images, example sources)."""
    parts: tuple[PairPart, ...] = ()
    flat: tuple[tuple[str, int], ...] = ()
    crowded: tuple[tuple, ...] = ()

    @property
    def count(self) -> int:
        return sum(part.pairs for part in self.parts)

    def write(self, path: str) -> None:
        """Writes leakage.jsonl at `path`: the parts' lines, part after part."""
        if self.parts:
            fileio.concatenate([part.path for part in self.parts], path)
        else:
            fileio.write_bytes(path, b'')

    def summary(self, action: str) -> dict:
        if action == 'off':
            return {'action': action}
        between: collections.Counter = collections.Counter()
        for part in self.parts:
            between.update(dict(part.between))
        return {'action': action, 'radius': RADIUS, 'pairs': self.count,
                'exact': sum(p.exact for p in self.parts),
                'mirrored': sum(p.mirrored for p in self.parts),
                'between': dict(sorted(between.items())), 'flat_images': dict(self.flat),
                'crowded_buckets': [{'band': band, 'value': value, 'images': images,
                                     'examples': examples}
                                    for band, value, images, examples in self.crowded]}


def _collect(parts: list, flat: dict, crowded: list) -> Leakage:
    return Leakage(tuple(sorted(parts, key=lambda part: part.first)),
                   tuple(sorted(flat.items())), tuple(sorted(crowded)))


class CollectLeakage(beam.PTransform):
    """PairLists, with FindLeakage's flat counts and crowded buckets -> one Leakage, after
    writing each PairList as a part of leakage.jsonl in `temp_dir`."""

    def __init__(self, flat: beam.PCollection, crowded: beam.PCollection, temp_dir: str):
        super().__init__()
        self._flat, self._crowded, self._temp_dir = flat, crowded, temp_dir

    def expand(self, pair_lists: beam.PCollection) -> beam.PCollection:
        return (pair_lists
                | 'Write Pair Parts' >> beam.Map(write_part, temp_dir=self._temp_dir)
                | 'All Parts' >> beam.combiners.ToList()
                | 'With Flat And Crowded' >> beam.Map(_collect, beam.pvalue.AsDict(self._flat),
                                                      beam.pvalue.AsList(self._crowded)))


def check_leakage(leakage: Leakage, settings: ConversionSettings) -> None:
    """With --leakage=fail, fails (committing nothing) when any pair was found; the pairs are
    then in the run's temporary folder."""
    if settings.leakage != 'fail' or not leakage.count:
        return
    report = fileio.join(settings.temp_dir, metadata.LEAKAGE)
    leakage.write(report)
    first = Pair(*min(part.first for part in leakage.parts))
    raise DatasetError(
        f'{leakage.count} near-duplicate pair(s) of images in different splits, e.g. '
        f'{first.second[1]} ({first.second[0]}) and {first.first[1]} ({first.first[0]}), '
        f'distance {first.distance}; --leakage=fail: nothing was committed. See {report} for '
        'every pair; --leakage=drop leaves the later split\'s copy out')


def damaged_lines(split: str, shard_results: list) -> bytes:
    """damaged-SPLIT.jsonl: every damaged JPEG of the split, with libjpeg's reason and what was
    done with it (skip, keep, reencode)."""
    entries = sorted(e for r in shard_results for e in r.damaged)
    return ''.join(json.dumps({'split': split, 'source': source, 'reason': reason,
                               'action': action}) + '\n'
                   for source, reason, action in entries).encode()


def quality_lines(summary: dict) -> list[str]:
    """The end-of-run table's lines on damaged JPEGs and leakage (none for older summaries)."""
    lines = []
    damaged = {split: s['damaged'] for split, s in summary['splits'].items() if s.get('damaged')}
    if damaged:
        action = {'skip': 'skipped', 'keep': 'kept as they are',
                  'reencode': 'stored as Pillow decodes them'}[summary['damaged_images']]
        lines.append(f'damaged JPEGs (strict libjpeg-turbo): {sum(damaged.values())}, {action} ('
                     + ', '.join(f'{split} {n}' for split, n in damaged.items())
                     + '; see damaged-SPLIT.jsonl)')
    leakage = summary.get('leakage')
    if leakage is None:
        return lines
    if leakage['action'] == 'off':
        return lines + ['leakage: not checked (--leakage=off: no perceptual hashes, no '
                        'leakage.jsonl)']
    if leakage['pairs']:
        dropped = sum(s.get('dropped_copies', 0) for s in summary['splits'].values())
        lines.append(f'leakage: {leakage["pairs"]} near-duplicate pair(s) across splits within '
                     f'{leakage["radius"]} of 64 bits ({leakage["exact"]} exact, '
                     f'{leakage["mirrored"]} mirrored): '
                     + ', '.join(f'{name} {n}' for name, n in leakage['between'].items())
                     + (f'; {dropped} later-split copies dropped' if dropped else '')
                     + '; see leakage.jsonl')
    else:
        lines.append(f'leakage: no near-duplicates across splits (within {leakage["radius"]} of '
                     '64 bits)')
    flat = sum(leakage['flat_images'].values())
    if flat:
        lines.append(f'leakage: {flat} flat image(s) (blank or constant) were not compared')
    if leakage['crowded_buckets']:
        images = sum(b['images'] for b in leakage['crowded_buckets'])
        lines.append(f'leakage: {len(leakage["crowded_buckets"])} hash bucket(s) shared by more '
                     f'than {MAX_BUCKET} images ({images} in all: a degenerate look, e.g. '
                     f'{leakage["crowded_buckets"][0]["examples"][0]}) were not paired')
    return lines

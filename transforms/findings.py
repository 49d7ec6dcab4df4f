"""What the data-quality checks found, as the commit writes it: damaged JPEGs per split
(damaged-SPLIT.jsonl) and near-duplicate pairs across splits (leakage.jsonl), with their counts
for summary.json."""
import dataclasses
import json

import apache_beam as beam

from pipeline.formats import fileio, metadata
from pipeline.formats.errors import DatasetError
from transforms.pairing import MAX_BUCKET, RADIUS, Pair, PairList
from transforms.settings import ConversionSettings


@dataclasses.dataclass(frozen=True)
class Leakage:
    """Every pair found (in order), flat images per split, and crowded buckets (band, value,
    images, example sources)."""
    found: PairList = PairList()
    flat: tuple[tuple[str, int], ...] = ()
    crowded: tuple[tuple, ...] = ()

    @property
    def pairs(self) -> tuple[Pair, ...]:
        return self.found.pairs

    def lines(self) -> bytes:
        return ''.join(json.dumps(p.line()) + '\n' for p in self.pairs).encode()

    def summary(self, action: str) -> dict:
        pairs = self.pairs
        between: dict[str, int] = {}
        for pair in pairs:
            name = f'{pair.first[0]}/{pair.second[0]}'
            between[name] = between.get(name, 0) + 1
        return {'action': action, 'radius': RADIUS, 'pairs': len(pairs),
                'exact': sum(p.exact for p in pairs),
                'mirrored': sum(p.mirrored for p in pairs),
                'between': dict(sorted(between.items())), 'flat_images': dict(self.flat),
                'crowded_buckets': [{'band': band, 'value': value, 'images': images,
                                     'examples': examples}
                                    for band, value, images, examples in self.crowded]}


def _collect(pair_lists: list, flat: dict, crowded: list) -> Leakage:
    return Leakage(PairList.merge(pair_lists), tuple(sorted(flat.items())),
                   tuple(sorted(crowded)))


class CollectLeakage(beam.PTransform):
    """PairLists, with FindLeakage's flat counts and crowded buckets -> one Leakage."""

    def __init__(self, flat: beam.PCollection, crowded: beam.PCollection):
        super().__init__()
        self._flat, self._crowded = flat, crowded

    def expand(self, pair_lists: beam.PCollection) -> beam.PCollection:
        return (pair_lists
                | 'All Pairs' >> beam.combiners.ToList()
                | 'With Flat And Crowded' >> beam.Map(_collect, beam.pvalue.AsDict(self._flat),
                                                      beam.pvalue.AsList(self._crowded)))


def check_leakage(leakage: Leakage, settings: ConversionSettings) -> None:
    """With --leakage=fail, fails (committing nothing) when any pair was found; the pairs are
    then in the run's temporary folder."""
    if settings.leakage != 'fail' or not leakage.found.rows:
        return
    report = fileio.join(settings.temp_dir, metadata.LEAKAGE)
    fileio.write_bytes(report, leakage.lines())
    first = Pair(*leakage.found.rows[0])
    raise DatasetError(
        f'{len(leakage.found.rows)} image(s) have a near-duplicate in another split, e.g. '
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

"""What `verify` checks of the clusters of near-duplicates across splits: recomputed from the
records' perceptual hashes (from the images themselves for datasets written before records
carried them), as pairing.find_clusters finds them, and compared with summary.json's counts and
with leakage.jsonl, line by line (its members, and its closest pair's distance and exactness
against the two records' hashes and images); after --leakage=drop, leakage.jsonl against the
records left and summary.json's dropped copies. A cluster's members are named by the digest of
their source (quality_checks.RECORD), so no text of a record is held.
"""
import collections
import dataclasses
from typing import Iterator

import numpy as np

from pipeline.io import fileio
from pipeline.output import bounded_reads, metadata, records
from pipeline.base.splits import SPLITS
from pipeline.quality.pairing import (MAX_BUCKET, RADIUS, ROW, WINDOW, Cluster, Table, clusters,
                                      filings, leaking, link_band, record_ids, reduce_links)
from pipeline.quality.phash import FLAT
from pipeline.tools.metadata_checks import shown
from pipeline.tools.quality_checks import (EXAMPLES, Place, per_split, place_of, source_digest,
                                           where)

NAME_LIMIT = 200   # Characters of a source from leakage.jsonl shown in a problem line.


@dataclasses.dataclass
class Leakage:
    """What the records give: the clusters across splits, flat images per split, crowded
    buckets (band, value, images, a few source digests)."""
    clusters: list[Cluster]
    flat: dict[str, int]
    crowded: list[tuple]


def find_leakage(table: np.ndarray) -> Leakage:
    """The clusters of near-duplicates across splits among the PLACED rows `table`, found as
    pairing.find_clusters finds them; a member is named by its source digest."""
    rows = np.zeros(len(table), dtype=ROW)
    for name in ('phash', 'mirror', 'split', 'shard'):
        rows[name] = table[name]
    rows['sha'] = table['sha_a'].view('<i8')
    rows['chunk'], rows['index'] = table['number'] >> 18, table['number'] & ((1 << 18) - 1)
    rows['id'] = record_ids(rows)
    found = Table(rows, table['source'].tolist())
    flat = per_split(rows['split'][rows['phash'] == FLAT])
    links, crowded = [], []
    for band, members in filings(found):
        linked, full = link_band(members, band)
        links.append(reduce_links(linked))
        crowded += full
    if not links:
        return Leakage([], flat, crowded)
    return Leakage(clusters(found, *leaking(np.concatenate(links))), flat, crowded)


class Places:
    """Where each record is, by its split and the digest of its source (one file listed in two
    splits is a record of each)."""

    def __init__(self, table: np.ndarray):
        self._order = np.lexsort((table['split'], table['source']))
        self._sources, self._splits = table['source'][self._order], table['split'][self._order]
        self._table = table

    def row(self, member: tuple[str, int]) -> np.void | None:
        """The PLACED row of the record of `member` (split, source digest), None when there is
        none."""
        split, digest = member
        if split not in SPLITS:
            return None
        code = SPLITS.index(split)
        lo, hi = (int(np.searchsorted(self._sources, np.uint64(digest), side))
                  for side in ('left', 'right'))
        at = lo + int(np.searchsorted(self._splits[lo:hi], code))
        if at == hi or self._splits[at] != code:
            return None
        return self._table[self._order[at]]

    def find(self, member: tuple[str, int]) -> Place | None:
        row = self.row(member)
        return None if row is None else place_of(row)


def leakage_action(summary: dict) -> str | None:
    """What summary.json says --leakage was (None for a version before the leakage check)."""
    leakage = summary.get('leakage')
    return leakage.get('action') if isinstance(leakage, dict) else None


def leakage_lines(found: Leakage) -> list[str]:
    return [f'leakage: {len(found.clusters)} cluster(s) of near-duplicates span splits within '
            f'{RADIUS} of 64 bits ({sum(c.images for c in found.clusters)} images); '
            f'{sum(found.flat.values())} flat image(s), {len(found.crowded)} crowded bucket(s) '
            'not compared']


def leakage_problems(output_dir: str, summary: dict, found: Leakage, places: Places,
                     hashed: bool) -> list[str]:
    """summary.json's leakage counts and leakage.jsonl, line by line, against the clusters the
    records give (`found`); after --leakage=drop, against each other and the records left.
    `hashed`: whether the records carry perceptual hashes."""
    leakage = summary.get('leakage')
    if leakage is None:   # A version before the leakage check.
        return []
    if not isinstance(leakage, dict):
        return [f'{metadata.SUMMARY}: leakage is {shown(leakage)}, not what this tool writes']
    path, action = fileio.join(output_dir, metadata.LEAKAGE), leakage.get('action')
    if action == 'off':
        return _off_problems(path, hashed)
    if 'clusters' not in leakage:   # Pairs, of a version before clusters.
        return []
    listed = bounded_reads.jsonl_lines(path)
    if listed is None:
        return [f'{metadata.LEAKAGE}: missing ({metadata.SUMMARY} says the run checked '
                f'leakage, --leakage={action}); rerun the conversion with --overwrite to write '
                'it again']
    problems = _constant_problems(leakage) + _flat_and_crowded_problems(
        leakage, found, crowded=action != 'drop')
    if action == 'drop':
        return problems + _dropped_problems(summary, leakage, listed, found, places)
    tally = _Tally()
    for cluster in found.clusters:
        tally.add(({split: len(s) for split, s in cluster.members}, cluster.closest.exact,
                   cluster.closest.mirrored))
    return (problems + _compared_problems(leakage, tally.counts, 'the records give')
            + _cluster_problems(listed, found.clusters, places)
            + [f'{metadata.SUMMARY}: {split} has {shown(noted.get("dropped_copies"))} '
               f'dropped_copies, yet --leakage={action} drops none'
               for split, noted in sorted(summary['splits'].items())
               if isinstance(noted, dict) and noted.get('dropped_copies', 0) != 0])


def _off_problems(path: str, hashed: bool) -> list[str]:
    """After --leakage=off: no leakage.jsonl, no perceptual hashes in the records."""
    problems = []
    if fileio.exists(path):
        problems.append(f'{metadata.LEAKAGE}: present, yet {metadata.SUMMARY} says '
                        '--leakage=off')
    if hashed:
        problems.append(f'{metadata.SUMMARY}: --leakage=off, yet the records carry perceptual '
                        f'hashes ({records.PHASH}); a run with --leakage=off writes none')
    return problems


def _constant_problems(leakage: dict) -> list[str]:
    return [f'{metadata.SUMMARY}: leakage {key} is {shown(leakage.get(key))}, this tool\'s is '
            f'{value}' for key, value in (('radius', RADIUS), ('window', WINDOW))
            if leakage.get(key) != value]


Sizes = tuple[dict[str, int], bool, bool]   # A cluster's images per split, exact, mirrored.


class _Tally:
    """summary.json's leakage counts of clusters, added one at a time by their sizes."""

    def __init__(self):
        self.counts = {'clusters': 0, 'images': 0, 'largest': 0, 'exact': 0, 'mirrored': 0,
                       'between': {}, 'by_split': {}}

    def add(self, sizes: Sizes) -> None:
        by_split, exact, mirrored = sizes
        images, counts = sum(by_split.values()), self.counts
        counts['clusters'] += 1
        counts['images'] += images
        counts['largest'] = max(counts['largest'], images)
        counts['exact'] += exact
        counts['mirrored'] += mirrored
        between = '/'.join(s for s in SPLITS if s in by_split)
        counts['between'][between] = counts['between'].get(between, 0) + 1
        for split, n in by_split.items():
            counts['by_split'][split] = counts['by_split'].get(split, 0) + n


def _compared_problems(leakage: dict, counts: dict, source: str) -> list[str]:
    """summary.json's leakage counts (those it has: older versions noted fewer) against
    `counts`, which `source` gives."""
    return [f'{metadata.SUMMARY}: leakage {key} is {shown(leakage[key])}, {source} {value}'
            for key, value in counts.items() if key in leakage and leakage[key] != value]


def _flat_and_crowded_problems(leakage: dict, found: Leakage, crowded: bool) -> list[str]:
    """summary.json's flat images per split, and (where `crowded`: not after a drop, which may
    thin a bucket) its crowded buckets, against the records'."""
    problems = _compared_problems(leakage, {'flat_images': found.flat}, 'the records give')
    if not crowded or 'crowded_buckets' not in leakage:
        return problems
    noted = leakage['crowded_buckets']
    buckets = [(band, value, images) for band, value, images, _ in found.crowded]
    try:
        same = sorted((b['band'], b['value'], b['images']) for b in noted) == sorted(buckets)
    except (TypeError, KeyError):
        same = False
    if not same:
        problems.append(f'{metadata.SUMMARY}: leakage crowded_buckets are not the '
                        f'{len(buckets)} bucket(s) of more than {MAX_BUCKET} images the '
                        'records give')
    return problems


@dataclasses.dataclass
class _Line:
    """A line of leakage.jsonl: its members {(split, source digest): source}, the distance of
    its closest pair, and its counts."""
    number: int
    members: dict[tuple[str, int], str]
    distance: int
    sizes: Sizes
    pair: tuple[tuple[str, int], tuple[str, int]]   # Its closest pair: (split, digest) each.
    pair_names: dict[tuple[str, int], str]          # ... and their sources.

    def named(self, member: tuple[str, int] | None = None) -> str:
        """A member (or one of the closest pair) as the line names it (default: the first of
        its earliest split)."""
        split, source = (member[0], {**self.pair_names, **self.members}[member]) if member else (
            min(((s, n) for (s, _), n in self.members.items()),
                key=lambda m: (SPLITS.index(m[0]), m[1])))
        return f'{source if len(source) <= NAME_LIMIT else source[:NAME_LIMIT] + "..."} ({split})'


def _parsed(number: int, line) -> _Line | None:
    """A line of leakage.jsonl as this tool writes it, else None."""
    try:
        members, closest = line['members'], line['closest']
        if not (isinstance(members, dict) and members and set(members) <= set(SPLITS)
                and all(isinstance(s, str) for sources in members.values() for s in sources)
                and isinstance(closest['distance'], int)
                and line['images'] == sum(map(len, members.values()))):
            return None
        named = {(split, source_digest(s)): s for split, sources in members.items()
                 for s in sources}
        ends = [(closest[f'split_{end}'], closest[f'source_{end}']) for end in 'ab']
        if not all(split in SPLITS and isinstance(s, str) for split, s in ends):
            return None
        pair_names = {(split, source_digest(s)): s for split, s in ends}
        if len(pair_names) != 2:
            return None
        return _Line(number, named, closest['distance'],
                     ({split: len(s) for split, s in members.items()},
                      closest['exact'] is True, closest['mirrored'] is True),
                     tuple(pair_names), pair_names)
    except (TypeError, KeyError, AttributeError, IndexError):
        return None


def _pair_problems(line: _Line, places: Places) -> tuple[str | None, str | None]:
    """What the records say otherwise of a line's closest pair (where both are records): of
    its distance (the first's hash against the second's, or when mirrored against the other's
    mirror hash), and of whether its two images are identical."""
    a, b = (places.row(member) for member in line.pair)
    if a is None or b is None:
        return None, None
    _, exact, mirrored = line.sizes
    pairs = ((a['phash'], b['mirror']), (a['mirror'], b['phash'])) if mirrored else (
        (a['phash'], b['phash']),)
    distances = sorted({bin((int(x) ^ int(y)) & ((1 << 64) - 1)).count('1') for x, y in pairs})
    identical = (a['sha_a'], a['sha_b']) == (b['sha_a'], b['sha_b'])
    return (None if line.distance in distances else
            f'its closest pair is {line.distance} bits apart, the records\' hashes of '
            f'{line.named(line.pair[0])} and {line.named(line.pair[1])} are '
            f'{" or ".join(map(str, distances))} apart',
            None if exact == identical else
            f'its closest pair is {"" if exact else "not "}marked exact, the records\' images '
            f'are {"" if identical else "not "}identical')


def _lines(listed: Iterator, limit: int, found: str) -> Iterator[_Line | str]:
    """The parsed lines of leakage.jsonl; a problem (str) ends them: a line that is not one
    this tool writes, or more than `limit` lines (`found`: what says how many)."""
    for number, line in listed:
        parsed = _parsed(number, line)
        if parsed is None:
            yield f'{metadata.LEAKAGE}: line {number} is not a cluster this tool wrote'
            return
        if number > limit:
            yield f'{metadata.LEAKAGE}: lists more than {limit} cluster(s), {found} {limit}'
            return
        yield parsed


def _cluster_problems(listed: Iterator, clusters_found: list[Cluster], places: Places
                      ) -> list[str]:
    """Each line of leakage.jsonl that is not a cluster the records give (naming the cluster
    and the members that differ), and each cluster the records give that no line lists."""
    members = [{(split, s) for split, sources in c.members for s in sources}
               for c in clusters_found]
    by_member = {m: i for i, found in enumerate(members) for m in found}
    problems, listed_clusters = [], set()
    for line in _lines(listed, len(clusters_found), 'the records give'):
        if isinstance(line, str):
            return problems + [line]
        overlap = collections.Counter(by_member[m] for m in line.members if m in by_member)
        if not overlap:
            problems.append(f'{metadata.LEAKAGE}: line {line.number} lists a cluster of '
                            f'{len(line.members)} images, of {line.named()}, that the records '
                            'do not give')
            continue
        index = overlap.most_common(1)[0][0]
        listed_clusters.add(index)
        differences = _member_differences(line, members[index], by_member, places)
        strangers = [m for m in line.pair if m not in line.members]
        if strangers:
            differences.append(f'its closest pair names {line.named(strangers[0])}, not one of '
                               'its members')
        distance_wrong, exact_wrong = (None, None) if strangers else _pair_problems(line, places)
        distance = clusters_found[index].closest.distance
        if distance_wrong or line.distance != distance:
            differences.append(distance_wrong or f'its closest pair is {line.distance} bits '
                               f'apart, the records give {distance}')
        differences += [exact_wrong] if exact_wrong else []
        if differences:
            problems.append(f'{metadata.LEAKAGE}: line {line.number}, the cluster of '
                            f'{line.named()}: ' + '; '.join(differences))
    for index in sorted(set(range(len(clusters_found))) - listed_clusters):
        closest = clusters_found[index].closest
        problems.append(f'{metadata.LEAKAGE}: does not list the cluster of '
                        f'{_named(closest.first, places)} and {_named(closest.second, places)} '
                        f'({clusters_found[index].images} images) that the records give')
    return problems


def _member_differences(line: _Line, found: set, by_member: dict, places: Places
                        ) -> list[str]:
    """The members of `line` that the records put elsewhere or nowhere, and those of its
    cluster in the records (`found`) that it leaves out (a few of each)."""
    differences = []
    for member in sorted(set(line.members) - found)[:EXAMPLES]:
        held = places.find(member)
        elsewhere = ('which the records put in another cluster' if member in by_member
                     else 'which no record is' if held is None
                     else f'which the records ({where(held)}) do not put in it')
        differences.append(f'lists {line.named(member)}, {elsewhere}')
    for split, digest in sorted(found - set(line.members))[:EXAMPLES]:
        differences.append(f'leaves out {_named((split, digest), places)}, which the records '
                           'put in it')
    return differences


def _more(items: list) -> str:
    return f' and {len(items) - 1} more' if len(items) > 1 else ''


def _named(member: tuple[str, int], places: Places) -> str:
    """A record named by its place (a cluster member: (split, source digest))."""
    held = places.find(member)
    return where(held) if held is not None else f'a record of {member[0]}'


def _dropped_problems(summary: dict, leakage: dict, listed: Iterator, found: Leakage,
                      places: Places) -> list[str]:
    """After --leakage=drop: the records give no cluster, each line's members in the cluster's
    earliest split are records and those in later splits are not, and summary.json counts the
    lines and the dropped copies."""
    problems, tally, dropped = [], _Tally(), collections.Counter()
    if found.clusters:
        problems.append(f'{metadata.LEAKAGE}: --leakage=drop left out the members in later '
                        f'splits of each cluster it lists, yet the records give '
                        f'{len(found.clusters)} cluster(s) across splits')
    limit = leakage['clusters'] if isinstance(leakage['clusters'], int) else 0
    for line in _lines(listed, limit, f'{metadata.SUMMARY} says'):
        if isinstance(line, str):
            return problems + [line]
        tally.add(line.sizes)
        first = min((split for split, _ in line.members), key=SPLITS.index)
        later = [member for member in line.members if member[0] != first]
        dropped.update(split for split, _ in later)
        absent = [m for m in line.members if m[0] == first and places.find(m) is None]
        held = [(m, place) for m in later if (place := places.find(m)) is not None]
        if absent:
            problems.append(f'{metadata.LEAKAGE}: line {line.number} lists '
                            f'{line.named(absent[0])}{_more(absent)}, which no record is')
        if held:
            problems.append(f'{metadata.LEAKAGE}: line {line.number} lists '
                            f'{line.named(held[0][0])}{_more(held)}, which --leakage=drop left '
                            f'out, yet the records hold it ({where(held[0][1])})')
    problems += _compared_problems(leakage, tally.counts, f'{metadata.LEAKAGE} gives')
    for split, noted in sorted(summary['splits'].items()):
        if isinstance(noted, dict) and noted.get('dropped_copies', 0) != dropped[split]:
            problems.append(f'{metadata.SUMMARY}: {split} has {shown(noted.get("dropped_copies"))} '
                            f'dropped_copies, {metadata.LEAKAGE} lists {dropped[split]} '
                            'members of later splits')
    return problems


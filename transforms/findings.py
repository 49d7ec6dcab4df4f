"""What the data-quality checks found, as the commit writes it: damaged JPEGs per split
(damaged-SPLIT.jsonl) and clusters of near-duplicates that span splits (leakage.jsonl), with
their counts for summary.json.

The clusters never meet in one place: each partition's clusters are written as a part of
leakage.jsonl in the run's temporary folder (its lines in cluster order: by their members), and
the commit gets only the parts' counts and paths, and joins the files (a compose on Cloud
Storage), parts in the order of their first clusters. With one partition (under ~32,768
images, leakage.group_bits) the file is sorted throughout; with more, it is sorted within each
part."""
import collections
import dataclasses
import hashlib
import json
from typing import Iterable

from pipeline.io import fileio
from pipeline.output import layout, metadata
from pipeline.errors import DatasetError
from pipeline.base.choices import LeakageAction
from pipeline.quality.pairing import RADIUS, WINDOW, Cluster
from pipeline.base.settings import ConversionSettings


@dataclasses.dataclass(frozen=True)
class ClusterPart:
    """One partition's clusters, written as leakage.jsonl lines at `path`: its first
    cluster's members (the clusters' order), the counts summary.json gives, and its largest
    cluster as (images, (split, images) per split, closest pair)."""
    path: str
    first: tuple
    clusters: int
    images: int
    exact: int
    mirrored: int
    between: tuple[tuple[str, int], ...]    # ('train/test', clusters): the splits they span
    by_split: tuple[tuple[str, int], ...]   # (split, images in the clusters)
    largest: tuple


def cluster_lines(found: tuple[Cluster, ...]) -> bytes:
    """leakage.jsonl lines of clusters."""
    return ''.join(json.dumps(c.line()) + '\n' for c in found).encode()


def _sizes(cluster: Cluster) -> tuple[tuple[str, int], ...]:
    return tuple((split, len(sources)) for split, sources in cluster.members)


def write_part(found: tuple[Cluster, ...], temp_dir: str) -> ClusterPart:
    """Writes a partition's clusters into the temporary folder (named after its first cluster,
    so a retried write rewrites the same file)."""
    name = hashlib.blake2b(repr(found[0].members).encode(), digest_size=8).hexdigest()
    path = layout.pairs_path(temp_dir, name)
    fileio.write_bytes(path, cluster_lines(found))
    between = collections.Counter('/'.join(split for split, _ in c.members) for c in found)
    by_split: collections.Counter = collections.Counter()
    for cluster in found:
        by_split.update(dict(_sizes(cluster)))
    largest = max(found, key=lambda c: (c.images, c.closest))
    return ClusterPart(path, found[0].members, len(found), sum(c.images for c in found),
                       sum(c.closest.exact for c in found), sum(c.closest.mirrored for c in found),
                       tuple(sorted(between.items())), tuple(sorted(by_split.items())),
                       (largest.images, _sizes(largest), largest.closest))


@dataclasses.dataclass(frozen=True)
class Leakage:
    """The clusters' parts (in the order of their first clusters), flat images per split, and
    crowded buckets (band, value, images, example sources)."""
    parts: tuple[ClusterPart, ...] = ()
    flat: tuple[tuple[str, int], ...] = ()
    crowded: tuple[tuple, ...] = ()

    @property
    def count(self) -> int:
        return sum(part.clusters for part in self.parts)

    @property
    def largest(self) -> tuple:
        """(images, (split, images) per split, closest pair) of the largest cluster."""
        return max(part.largest for part in self.parts)

    def write(self, path: str) -> None:
        """Writes leakage.jsonl at `path`: the parts' lines, part after part."""
        if self.parts:
            fileio.concatenate([part.path for part in self.parts], path)
        else:
            fileio.write_bytes(path, b'')

    def summary(self, action: LeakageAction | str) -> dict:
        action = LeakageAction(action)
        if action == LeakageAction.OFF:
            return {'action': action.value}
        between: collections.Counter = collections.Counter()
        by_split: collections.Counter = collections.Counter()
        for part in self.parts:
            between.update(dict(part.between))
            by_split.update(dict(part.by_split))
        return {'action': action.value, 'radius': RADIUS, 'window': WINDOW, 'clusters': self.count,
                'images': sum(p.images for p in self.parts),
                'largest': self.largest[0] if self.parts else 0,
                'exact': sum(p.exact for p in self.parts),
                'mirrored': sum(p.mirrored for p in self.parts),
                'between': dict(sorted(between.items())), 'by_split': dict(sorted(by_split.items())),
                'flat_images': dict(self.flat),
                'crowded_buckets': [{'band': band, 'value': value, 'images': images,
                                     'examples': examples}
                                    for band, value, images, examples in self.crowded]}


def collected(parts: Iterable[ClusterPart], filed: Iterable, crowded: Iterable[tuple]) -> Leakage:
    """The Leakage of the clusters' parts, with the flat images the conversion's bundles
    counted (`filed`: their leakage.Filed) and the link tasks' crowded buckets."""
    flat: collections.Counter[str] = collections.Counter()
    for found in filed:
        flat.update(found.flat)
    return Leakage(tuple(sorted(parts, key=lambda part: part.first)),
                   tuple(sorted(flat.items())), tuple(sorted(crowded)))


def _counts(sizes: tuple[tuple[str, int], ...]) -> str:
    return ', '.join(f'{split} {n}' for split, n in sizes)


def check_leakage(leakage: Leakage, settings: ConversionSettings) -> None:
    """With --leakage=fail, fails (committing nothing) when any cluster spans splits, naming the
    largest; the clusters are then in the run's temporary folder."""
    if settings.leakage != LeakageAction.FAIL or not leakage.count:
        return
    report = fileio.join(settings.temp_dir, metadata.LEAKAGE)
    leakage.write(report)
    images, sizes, closest = leakage.largest
    raise DatasetError(
        f'{leakage.count} cluster(s) of near-duplicate images span splits; the largest has '
        f'{images} images ({_counts(sizes)}), e.g. {closest.second[1]} ({closest.second[0]}) and '
        f'{closest.first[1]} ({closest.first[0]}), distance {closest.distance}; --leakage=fail: '
        f'nothing was committed. See {report} for every cluster; --leakage=drop leaves the '
        'members in later splits out')


def damaged_line(split: str, entry: tuple) -> bytes:
    """A line of damaged-SPLIT.jsonl: a damaged JPEG of the split, with libjpeg's reason and
    what was done with it (skip, keep, reencode)."""
    source, reason, action = entry
    return (json.dumps({'split': split, 'source': source, 'reason': reason,
                        'action': action}) + '\n').encode()

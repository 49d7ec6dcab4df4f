"""Clustering by multi-index hashing alone (pairing.py) and as Beam stages (CheckQuality):
distances, mirror hashes, flat images, clusters that span splits (also of look-alikes that
number in the thousands, one line each, not a pair for every two), and the cap that reports a
degenerate hash instead of comparing it with everything; and the collection of the clusters for
the commit (findings.collected), which gets them as parts of leakage.jsonl and their counts."""
import dataclasses
import json
import os
import pickle
import random

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that, equal_to

from tests.helpers import stage_pipeline
from transforms import leakage
from pipeline.base.settings import ConversionSettings
from pipeline.quality import pairing
from transforms.check_quality import CheckQuality
from transforms.findings import collected, write_part
from pipeline.io.sorted_runs import RunWriter
from pipeline.output import layout
from transforms import resume
from transforms.labels import DatasetFacts, LabelMap
from transforms.leakage import (GROUP_SIZE, Filed, dropped_copies, file_part, group_bits,
                                part_table)
from transforms.planning import Plan
from pipeline.quality.pairing import MAX_BUCKET, RADIUS, WINDOW, Cluster, Pair, find_clusters
from pipeline.quality.phash import FLAT, to_int64
from transforms.sharding import ShardPlan
from transforms.shard_results import ShardResult

RNG = random.Random(5)
KEY = bytes(32)   # The resume key the sidecars are sealed under.


def _hash() -> int:
    bits = RNG.sample(range(64), 32)   # As phash makes them: 32 bits set.
    return sum(1 << b for b in bits)


def _flip(value: int, bits: list[int]) -> int:
    for bit in bits:
        value ^= 1 << bit
    return value


def _find_leakage(p: beam.Pipeline, parts: list[ShardResult], images: int, out: str):
    """CheckQuality on `parts` as the conversion leaves them: each part's sidecar in the run's
    temporary folder in `out` (where the records' sources are found), its records filed into
    sorted runs; the plan holds one split of `images` examples (all the check reads of it)."""
    settings = ConversionSettings('d', ('train',), output_dir=out, resume_key=KEY)
    temp_dir = settings.temp_dir
    writer, flat, fps = RunWriter(layout.filed_folder(temp_dir), budget=4096), {}, {}
    for part in parts:
        fps[(part.split, part.chunk or 0)] = f'{part.chunk or 0:016x}'
        path = layout.part_path(temp_dir, part.split, part.shard, part.chunk or 0,
                                       fps[(part.split, part.chunk or 0)])
        resume.save_done(path, dataclasses.replace(part, temp_path=path, chunk=part.chunk or 0),
                         KEY)
        flat[part.split] = flat.get(part.split, 0) + file_part(writer, part_table(part))
    filed = Filed(writer.close(), {split: n for split, n in flat.items() if n}, fps)
    plan = Plan(DatasetFacts(), LabelMap((), ()), {'train': ShardPlan(
        1, images, 16, np.array([0]), np.array([0, images]))}, [])
    found = (p | 'Plan' >> beam.Create([plan])
             | CheckQuality(settings, p | 'Filed' >> beam.Create([filed])))
    return dict(found, filed=filed)


def _lines(part) -> list[dict]:
    """The leakage.jsonl lines of a part of it (findings.ClusterPart)."""
    with open(part.path) as lines:
        return [json.loads(line) for line in lines]


def _entry(split: str, source: str, phash: int, mirrored: int, sha: str = '') -> tuple:
    return split, source, sha or source, to_int64(phash), to_int64(mirrored)


def _members(found: list[Cluster]) -> list[dict]:
    return [cluster.line()['members'] for cluster in found]


def test_clusters_join_near_copies_within_and_across_splits():
    a, b, c = _hash(), _hash(), _hash()
    entries = [
        _entry('train', 'a', a, _hash()),
        _entry('test', 'a-near', _flip(a, [0, 17, 33]), _hash()),               # 3 bits
        _entry('validation', 'a-far', _flip(a, list(range(0, 64, 7))[:RADIUS + 1]), _hash()),
        _entry('train', 'b', b, c),
        _entry('validation', 'b-mirrored', c, b),
        _entry('train', 'b-again', b, c),                                        # Same split.
        _entry('test', 'a-copy', a, _hash(), sha='a'),
        _entry('train', 'c', c ^ 0xFF00FF, _hash()), _entry('train', 'c-near', c ^ 0xFF00FE, _hash()),
        _entry('train', 'blank', FLAT, FLAT), _entry('test', 'blank', FLAT, FLAT),
    ]
    found, flat, crowded = find_clusters(entries)
    assert _members(found) == [{'train': ['a'], 'test': ['a-copy', 'a-near']},
                               {'train': ['b', 'b-again'], 'validation': ['b-mirrored']}]
    assert [c.closest for c in found] == [
        Pair(('train', 'a'), ('test', 'a-copy'), 0, False, True),
        Pair(('train', 'b'), ('validation', 'b-mirrored'), 0, True, False)]
    assert [c.images for c in found] == [3, 3]
    assert flat == {'train': 1, 'test': 1} and crowded == []
    # --leakage=drop leaves out every member in a later split, each with its place.
    assert sorted((where, source) for where, (_, source, _, _) in dropped_copies(tuple(found))) == [
        (('test', 0, 0, 1), 'a-near'), (('test', 0, 0, 6), 'a-copy'),
        (('validation', 0, 0, 4), 'b-mirrored')]


def _look_alikes(count: int, splits: tuple[str, ...], seed_hash: int) -> list[tuple]:
    """`count` hashes of one look: each a few bits from a random earlier one (a chain of
    neighbours, as crops of one photo give), spread over `splits`."""
    hashes = [seed_hash]
    for _ in range(count - 1):
        hashes.append(_flip(RNG.choice(hashes), RNG.sample(range(64), 3)))
    return [_entry(splits[i % len(splits)], f'{seed_hash:x}-{i}', h, _hash())
            for i, h in enumerate(hashes)]


def test_thousands_of_look_alikes_make_one_cluster_not_millions_of_pairs():
    """Two groups of 3,000 look-alikes across splits (4.5 million pairs of one group within
    the radius, were every pair listed): one cluster each, found in time that grows with the
    images (a bucket's members are compared with their WINDOW nearest)."""
    entries = (_look_alikes(3000, ('train', 'validation', 'test'), _hash())
               + _look_alikes(3000, ('train', 'test'), _hash()))
    found, _, _ = find_clusters(entries)
    assert sorted(c.images for c in found) == [3000, 3000]
    assert sorted(tuple((split, len(s)) for split, s in c.members) for c in found) == [
        (('train', 1000), ('validation', 1000), ('test', 1000)), (('train', 1500), ('test', 1500))]
    assert all(c.closest.first[0] == 'train' and c.closest.distance <= RADIUS for c in found)
    assert sum(len(c.later) for c in found) == 2000 + 1500   # All but the train members.
    assert WINDOW < 3000   # The bound was in force.


def test_a_degenerate_hash_is_reported_not_compared_with_everything():
    common = _hash()
    entries = [_entry('train', f't{i}', common, common) for i in range(MAX_BUCKET)]
    entries.append(_entry('test', 'x', common, common))
    found, _, crowded = find_clusters(entries)
    assert found == []
    assert [(band, images) for band, _, images, _ in crowded] == [(b, MAX_BUCKET + 1)
                                                                  for b in range(4)]
    assert crowded[0][3] == sorted(f't{i}' for i in range(MAX_BUCKET))[:3]


def _clusters_of(found) -> list:
    return sorted(c for listed in found for c in listed)


@pytest.mark.slow
def test_find_leakage_stage_gives_the_same_clusters(tmp_path):
    a = _hash()
    parts = [ShardResult('train', 0, 'p0', hashes=[('a', 'x', to_int64(a), to_int64(_hash()), 0, 1),
                                                     ('f', 'y', FLAT, FLAT, 0, 1)]),
             ShardResult('test', 0, 'p1', hashes=[('b', 'z', to_int64(_flip(a, [5])),
                                                   to_int64(_hash()), 0, 1)])]
    with stage_pipeline() as p:
        found = _find_leakage(p, parts, 3, str(tmp_path))
        assert_that(found['clusters'] | beam.FlatMap(_lines),
                    equal_to([Cluster((('train', ('a',)), ('test', ('b',))),
                                      Pair(('train', 'a'), ('test', 'b'), 1, False, False)).line()]),
                    label='clusters')
        assert_that(found['spanning'] | beam.FlatMap(lambda spanning: spanning.crowded),
                    equal_to([]), label='crowded')
    assert found['filed'].flat == {'train': 1}   # Counted as the parts were filed.


@pytest.mark.slow
def test_shuffle_groups_grow_with_the_dataset_and_split_no_cluster(monkeypatch, tmp_path):
    assert [group_bits(n) for n in (0, GROUP_SIZE // 2, GROUP_SIZE, 10**8, 10**12)] == [
        0, 0, 1, 12, 16]
    monkeypatch.setattr(leakage, 'GROUP_SIZE', 16)   # 600 records: 128 groups per band.
    originals = [_hash() for _ in range(100)]
    look = _look_alikes(300, ('train', 'validation', 'test'), _hash())
    parts, entries = [], []
    for index in range(30):
        split = ('train', 'validation', 'test')[index % 3]
        hashes = []
        for record in range(20):   # 100 originals, 200 near copies of them, 300 look-alikes.
            number = index * 20 + record
            if number < 300:
                phash = originals[number] if number < 100 else _flip(
                    originals[number % 100], [record % 10, 40])
                mirrored = _hash()
            else:
                _, _, _, phash, mirrored = look[number - 300]
                phash, mirrored = phash & (2**64 - 1), mirrored & (2**64 - 1)
            hashes.append((f's{number}', f'h{number}', to_int64(phash), to_int64(mirrored), 0, 1))
            entries.append(_entry(split, f's{number}', phash, mirrored, sha=f'h{number}'))
        parts.append(ShardResult(split, index, f'p{index}', index, hashes=hashes))
    expected, _, _ = find_clusters(entries)
    assert len(expected) > 50 and max(c.images for c in expected) >= 300
    with stage_pipeline() as p:
        found = _find_leakage(p, parts, 600, str(tmp_path))
        assert_that(found['clusters'] | beam.FlatMap(_lines),
                    equal_to([c.line() for c in expected]))
        # A part per partition of the clusters (up to 128 here), not one per pair.
        assert_that(found['clusters'] | 'Lists' >> beam.combiners.Count.Globally()
                    | beam.Map(lambda lists: lists <= 128), equal_to([True]), label='lists')


@pytest.mark.slow
def test_a_crowded_bucket_spread_over_many_parts_is_counted_whole_and_never_compared(
        monkeypatch, tmp_path):
    monkeypatch.setattr(leakage, 'MAX_BUCKET', 50)
    monkeypatch.setattr(pairing, 'MAX_BUCKET', 50)
    common = _hash()
    parts = [ShardResult(('train', 'test')[index % 2], index, f'p{index}', index,
                         hashes=[(f's{index}-{r}', f'h{index}-{r}', to_int64(common),
                                  to_int64(common), 0, 1) for r in range(10)])
             for index in range(30)]
    with stage_pipeline() as p:
        found = _find_leakage(p, parts, 300, str(tmp_path))
        assert_that(found['clusters'], equal_to([]), label='clusters')
        assert_that(found['spanning'] | beam.FlatMap(lambda spanning: spanning.crowded)
                    | beam.Map(lambda c: (c[0], c[2], len(c[3]))),
                    equal_to([(band, 300, 3) for band in range(4)]), label='crowded')


def test_the_commit_gets_parts_of_leakage_jsonl_not_the_clusters(tmp_path):
    """Each tuple of clusters becomes a file of leakage.jsonl lines; the Leakage the commit
    reads holds their paths and counts, so its size does not grow with the clusters."""
    def cluster(i: int, later: str, size: int = 1) -> Cluster:
        return Cluster((('train', (f'a{i:05d}',)),
                        (later, tuple(f'b{i:05d}-{k}' for k in range(size)))),
                       Pair(('train', f'a{i:05d}'), (later, f'b{i:05d}-0'), i % 9, i % 2 == 0,
                            i % 9 == 0))
    many = tuple(cluster(i, 'test') for i in range(5000))
    few = tuple(cluster(i, 'validation', 4) for i in range(5000, 5003))

    found = collected([write_part(few, str(tmp_path)), write_part(many, str(tmp_path))],
                      [Filed([], {'train': 1}), Filed([], {}), Filed([], {'train': 1})], [])
    assert [part.clusters for part in found.parts] == [5000, 3]   # By their first clusters.
    assert len(pickle.dumps(found)) < 2000
    summary = found.summary('report')
    assert (summary['clusters'], summary['images'], summary['largest']) == (5003, 10015, 5)
    assert (summary['exact'], summary['mirrored']) == (556, 2502)
    assert summary['between'] == {'train/test': 5000, 'train/validation': 3}
    assert summary['by_split'] == {'train': 5003, 'test': 5000, 'validation': 12}
    assert summary['flat_images'] == {'train': 2}
    assert found.largest == (5, (('train', 1), ('validation', 4)), few[-1].closest)
    found.write(f'{tmp_path}/leakage.jsonl')
    lines = [json.loads(line) for line in open(f'{tmp_path}/leakage.jsonl')]
    assert lines == [c.line() for c in many + few]
    assert sorted(os.listdir(f'{tmp_path}/pairs')) == sorted(
        os.path.basename(part.path) for part in found.parts)

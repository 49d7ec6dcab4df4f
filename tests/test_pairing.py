"""Multi-index pairing alone (pairing.py) and as a Beam stage (FindLeakage): distances, mirror
hashes, flat images, and the cap that reports a degenerate hash instead of pairing it with
everything; and the collection of the pairs for the commit (CollectLeakage), which writes them
as parts of leakage.jsonl and passes on only their counts."""
import json
import os
import pickle
import random

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that, equal_to

from tests.helpers import stage_pipeline
from transforms import leakage, pairing
from transforms.findings import CollectLeakage
from transforms.leakage import GROUP_SIZE, FindLeakage, group_bits, part_table
from transforms.pairing import MAX_BUCKET, RADIUS, Pair, PairList, find_pairs
from transforms.phash import FLAT, to_int64
from transforms.sharding import ShardPlan
from transforms.write_shards import ShardResult

RNG = random.Random(5)


def _hash() -> int:
    bits = RNG.sample(range(64), 32)   # As phash makes them: 32 bits set.
    return sum(1 << b for b in bits)


def _flip(value: int, bits: list[int]) -> int:
    for bit in bits:
        value ^= 1 << bit
    return value


def _plans(p: beam.Pipeline, images: int) -> beam.pvalue.AsDict:
    """A shard plan side input of `images` examples: all FindLeakage reads of it."""
    plan = ShardPlan(1, images, 16, np.array([0]), np.array([0, images]))
    return beam.pvalue.AsDict(p | 'Plans' >> beam.Create([('train', plan)]))


def _entry(split: str, source: str, phash: int, mirrored: int, sha: str = '') -> tuple:
    return split, source, sha or source, to_int64(phash), to_int64(mirrored)


def test_pairs_within_the_radius_across_splits_only():
    a, b, c = _hash(), _hash(), _hash()
    entries = [
        _entry('train', 'a', a, _hash()),
        _entry('test', 'a-near', _flip(a, [0, 17, 33]), _hash()),               # 3 bits
        _entry('validation', 'a-far', _flip(a, list(range(0, 64, 7))[:RADIUS + 1]), _hash()),
        _entry('train', 'b', b, c),
        _entry('validation', 'b-mirrored', c, b),
        _entry('train', 'b-again', b, c),                                        # Same split.
        _entry('test', 'a-copy', a, _hash(), sha='a'),
        _entry('train', 'blank', FLAT, FLAT), _entry('test', 'blank', FLAT, FLAT),
    ]
    pairs, flat, crowded = find_pairs(entries)
    assert pairs == sorted([
        Pair(('train', 'a'), ('test', 'a-copy'), 0, False, True),
        Pair(('train', 'a'), ('test', 'a-near'), 3, False, False),
        Pair(('train', 'b'), ('validation', 'b-mirrored'), 0, True, False),
        Pair(('train', 'b-again'), ('validation', 'b-mirrored'), 0, True, False),
    ])
    assert flat == {'train': 1, 'test': 1} and crowded == []


def test_a_degenerate_hash_is_reported_not_paired_with_everything():
    common = _hash()
    entries = [_entry('train', f't{i}', common, common) for i in range(MAX_BUCKET)]
    entries.append(_entry('test', 'x', common, common))
    pairs, _, crowded = find_pairs(entries)
    assert pairs == []
    assert [(band, images) for band, _, images, _ in crowded] == [(b, MAX_BUCKET + 1)
                                                                  for b in range(4)]
    assert crowded[0][3] == sorted(f't{i}' for i in range(MAX_BUCKET))[:3]


@pytest.mark.slow
def test_find_leakage_stage_gives_the_same_pairs():
    a = _hash()
    parts = [ShardResult('train', 0, 'p0', hashes=[('a', 'x', to_int64(a), to_int64(_hash()), 0, 1),
                                                     ('f', 'y', FLAT, FLAT, 0, 1)]),
             ShardResult('test', 0, 'p1', hashes=[('b', 'z', to_int64(_flip(a, [5])),
                                                   to_int64(_hash()), 0, 1)])]
    with stage_pipeline() as p:
        found = p | beam.Create([part_table(t) for t in parts]) | FindLeakage(_plans(p, 3))
        assert_that(found['pairs'] | beam.FlatMap(lambda listed: listed.pairs),
                    equal_to([Pair(('train', 'a'), ('test', 'b'), 1, False, False)]), label='pairs')
        assert_that(found['flat'], equal_to([('train', 1)]), label='flat')
        assert_that(found['crowded'], equal_to([]), label='crowded')


@pytest.mark.slow
def test_shuffle_groups_grow_with_the_dataset_and_split_no_pair(monkeypatch):
    assert [group_bits(n) for n in (0, GROUP_SIZE // 2, GROUP_SIZE, 10**8, 10**12)] == [
        0, 0, 1, 12, 16]
    monkeypatch.setattr(leakage, 'GROUP_SIZE', 16)   # 300 records: 64 groups per band.
    originals = [_hash() for _ in range(100)]
    parts, entries = [], []
    for index in range(30):
        split = ('train', 'validation', 'test')[index % 3]
        hashes = []
        for record in range(10):   # The last 200 are near copies of the first 100.
            number = index * 10 + record
            phash = originals[number] if number < 100 else _flip(originals[number % 100],
                                                                  [record, 40])
            mirrored = _hash()
            hashes.append((f's{number}', f'h{number}', to_int64(phash), to_int64(mirrored), 0, 1))
            entries.append(_entry(split, f's{number}', phash, mirrored, sha=f'h{number}'))
        parts.append(ShardResult(split, index, f'p{index}', hashes=hashes))
    expected, _, _ = find_pairs(entries)
    assert len(expected) > 100
    with stage_pipeline() as p:
        found = p | beam.Create([part_table(t) for t in parts]) | FindLeakage(_plans(p, 300))
        assert_that(found['pairs'] | beam.FlatMap(lambda listed: listed.pairs), equal_to(expected))
        # A few elements per partition of the pair keys (64 here), not one per pair.
        assert_that(found['pairs'] | 'Lists' >> beam.combiners.Count.Globally()
                    | beam.Map(lambda lists: lists <= 64), equal_to([True]), label='lists')


@pytest.mark.slow
def test_a_crowded_bucket_spread_over_many_parts_is_counted_whole_and_never_paired(monkeypatch):
    monkeypatch.setattr(leakage, 'MAX_BUCKET', 50)
    monkeypatch.setattr(pairing, 'MAX_BUCKET', 50)
    common = _hash()
    parts = [ShardResult(('train', 'test')[index % 2], index, f'p{index}', index,
                         hashes=[(f's{index}-{r}', f'h{index}-{r}', to_int64(common),
                                  to_int64(common), 0, 1) for r in range(10)])
             for index in range(30)]
    with stage_pipeline() as p:
        found = p | beam.Create([part_table(t) for t in parts]) | FindLeakage(_plans(p, 300))
        assert_that(found['pairs'] | beam.FlatMap(lambda listed: listed.pairs), equal_to([]), label='pairs')
        assert_that(found['crowded'] | beam.Map(lambda c: (c[0], c[2], len(c[3]))),
                    equal_to([(band, 300, 3) for band in range(4)]), label='crowded')


@pytest.mark.slow
def test_the_commit_gets_parts_of_leakage_jsonl_not_the_pairs(tmp_path):
    """Each PairList becomes a file of leakage.jsonl lines; the Leakage the commit reads holds
    their paths and counts, so its size does not grow with the pairs."""
    def pair(i: int, later: str) -> Pair:
        return Pair(('train', f'a{i:05d}'), (later, f'b{i:05d}'), i % 9, i % 2 == 0, i % 9 == 0,
                    (0, 0, i, 0, True))
    many = PairList.of(pair(i, 'test') for i in range(5000))
    few = PairList.of(pair(i, 'validation') for i in range(5000, 5003))

    def check(collected: list) -> None:
        (found,) = collected
        assert [part.pairs for part in found.parts] == [5000, 3]   # By their first pairs.
        assert len(pickle.dumps(found)) < 2000
        summary = found.summary('report')
        assert (summary['pairs'], summary['exact'], summary['mirrored']) == (5003, 556, 2502)
        assert summary['between'] == {'train/test': 5000, 'train/validation': 3}
        assert summary['flat_images'] == {'train': 2}
        found.write(f'{tmp_path}/leakage.jsonl')
        lines = [json.loads(line) for line in open(f'{tmp_path}/leakage.jsonl')]
        assert lines == [p.line() for p in many.pairs + few.pairs]
        assert sorted(os.listdir(f'{tmp_path}/pairs')) == sorted(
            os.path.basename(part.path) for part in found.parts)

    with stage_pipeline() as p:
        flat = p | 'Flat' >> beam.Create([('train', 2)])
        crowded = p | 'Crowded' >> beam.Create([])
        found = p | beam.Create([few, many]) | CollectLeakage(flat, crowded, str(tmp_path))
        assert_that(found, check)

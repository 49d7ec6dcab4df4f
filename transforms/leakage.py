"""Near-duplicate leakage across splits as a Beam stage: pairing.py's multi-index hashing with
a GroupByKey of buckets. Each part sends one list per group of buckets (a band and the top bits
of its value, as many groups as keep each at about GROUP_SIZE members), so the shuffle moves a
few elements per part and memory per worker stays bounded at any scale.

With --leakage=drop the eval-side copy of each pair (the later split of train, validation, test)
is left out of its shard when the shard's parts are joined (`drop_from_part`).
"""
import dataclasses
from typing import Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipeline.formats import fileio, records
from transforms.pairing import BAND_BITS, Entry, Pair, band_keys, best, bucket_candidates
from transforms.phash import FLAT

NAMESPACE = 'image_tfrecords'
ACTIONS = ('report', 'drop', 'fail')


GROUP_SIZE = 1 << 16   # Members a shuffle group expects: a few MB, whatever the dataset's size.


def group_bits(total: int) -> int:
    """How many top bits of a band's value key a shuffle group: enough groups that each expects
    at most GROUP_SIZE members (every image is filed under its hash and its mirror hash)."""
    groups = -(-2 * total // GROUP_SIZE)
    return min(BAND_BITS, max(0, groups - 1).bit_length())


def _entries(part) -> Iterator[Entry]:
    for source, sha256, phash, mirrored, _, _ in part.hashes:
        yield part.split, source, sha256, phash, mirrored


def _flat(part) -> Iterator[tuple[str, int]]:
    count = sum(1 for h in part.hashes if h[2] == FLAT)
    if count:
        yield part.split, count


def _groups(part, total: int) -> Iterator[tuple[tuple[int, int], list]]:
    """The part's (bucket, member)s, one list per shuffle group (band, top bits of its value):
    a few elements per part instead of eight per image."""
    shift = BAND_BITS - group_bits(total)
    groups: dict[tuple[int, int], list] = {}
    for entry in _entries(part):
        if entry[3] != FLAT:
            for key, member in band_keys(entry):
                groups.setdefault((key[0], key[1] >> shift), []).append((key, member))
    yield from groups.items()


class PairGroup(beam.DoFn):
    """(group, lists of (bucket, member)) -> candidate pairs within RADIUS of each bucket; a
    crowded bucket goes to the 'crowded' output as (band, value, entries, a few sources)."""

    def setup(self) -> None:
        self._crowded = Metrics.counter(NAMESPACE, 'leakage_crowded_buckets')

    def process(self, element: tuple) -> Iterator:
        _, lists = element
        for kind, found in bucket_candidates(member for keyed in lists for member in keyed):
            if kind == 'crowded':
                self._crowded.inc()
                yield beam.pvalue.TaggedOutput('crowded', found)
            else:
                yield found


class FindLeakage(beam.PTransform):
    """Part results (with their records' hashes) -> a dict of PCollections: 'pairs' (Pair),
    'flat' ((split, flat images)) and 'crowded' ((band, value, entries, sources))."""

    def expand(self, parts: beam.PCollection):
        total = beam.pvalue.AsSingleton(parts
                                        | 'Records' >> beam.Map(lambda part: len(part.hashes))
                                        | 'Count Records' >> beam.CombineGlobally(sum))
        flat = (parts
                | 'Flat Images' >> beam.FlatMap(_flat)
                | 'Count Flat' >> beam.CombinePerKey(sum))
        buckets = (parts
                   | 'Key By Band' >> beam.FlatMap(_groups, total=total)
                   | 'Group By Band' >> beam.GroupByKey()
                   | 'Pair Within Buckets' >> beam.ParDo(PairGroup()).with_outputs(
                       'crowded', main='candidates'))
        pairs = (buckets.candidates
                 | 'Group Candidates' >> beam.GroupByKey()
                 | 'Best Distance' >> beam.MapTuple(best))
        return {'pairs': pairs, 'flat': flat, 'crowded': buckets.crowded}


def dropped_copy(pair: Pair) -> tuple[tuple[str, str], str]:
    """((split, source) of the eval-side copy, the reason it is left out)."""
    return pair.second, (f'near-duplicate of {pair.first[0]} image {pair.first[1]} '
                         f'(distance {pair.distance}{", mirrored" if pair.mirrored else ""})')


def drop_from_part(part, dropped: dict):
    """The part result (write_shards.ShardResult) with the records `dropped` names
    ((split, source) -> reason) left out: their part file is rewritten without them."""
    drops = [i for i, h in enumerate(part.hashes) if (part.split, h[0]) in dropped]
    if not drops or not part.temp_path:
        return part
    kept_path = part.temp_path.replace('.tfrecord', '-kept.tfrecord')
    result = dataclasses.replace(part, temp_path=kept_path, records=0, bytes=0, label_counts={},
                                 passed_through=0,
                                 dropped=list(part.dropped), hashes=[])
    drop_set = set(drops)
    with fileio.open_read(part.temp_path) as stream, fileio.writing(kept_path) as out:
        for index, record in enumerate(records.read_records(stream)):
            entry = part.hashes[index]
            if index in drop_set:
                result.dropped.append((entry[0], dropped[(part.split, entry[0])]))
                continue
            framed = records.frame_record(record)
            out.write(framed)
            result.records += 1
            result.bytes += len(framed)
            result.label_counts[entry[4]] = result.label_counts.get(entry[4], 0) + 1
            result.passed_through += entry[5]
            result.hashes.append(entry)
    return result

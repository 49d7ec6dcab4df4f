"""Near-duplicate leakage across splits as a Beam stage: pairing.py's multi-index hashing with
a GroupByKey per bucket, so memory per worker stays bounded at any scale.

With --leakage=drop the eval-side copy of each pair (the later split of train, validation, test)
is left out of its shard when the shard's parts are joined (`drop_from_part`).
"""
import dataclasses
from typing import Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipeline.formats import fileio, records
from transforms.pairing import (Entry, MAX_BUCKET, Pair, band_keys, best, bounded, candidates,
                                crowded)
from transforms.phash import FLAT

NAMESPACE = 'image_tfrecords'
ACTIONS = ('report', 'drop', 'fail')


class PairBucket(beam.DoFn):
    """((band, value), [(mirrored, entry)]) -> candidate pairs within RADIUS; a crowded bucket
    goes to the 'crowded' output as (band, value, entries, a few sources) instead."""

    def setup(self) -> None:
        self._crowded = Metrics.counter(NAMESPACE, 'leakage_crowded_buckets')

    def process(self, element: tuple) -> Iterator:
        key, members = element
        kept, count = bounded(members)
        if count > MAX_BUCKET:
            self._crowded.inc()
            yield beam.pvalue.TaggedOutput('crowded', crowded(key, kept, count))
            return
        yield from candidates(kept)


def _entries(result) -> Iterator[Entry]:
    for source, sha256, phash, mirrored, _, _ in result.hashes:
        yield result.split, source, sha256, phash, mirrored


class FindLeakage(beam.PTransform):
    """Part results (with their records' hashes) -> a dict of PCollections: 'pairs' (Pair),
    'flat' ((split, flat images)) and 'crowded' ((band, value, entries, sources))."""

    def expand(self, parts: beam.PCollection):
        entries = parts | 'Hash Entries' >> beam.FlatMap(_entries)
        flat = (entries
                | 'Flat Images' >> beam.Filter(lambda e: e[3] == FLAT)
                | 'Split Of Flat' >> beam.Map(lambda e: (e[0], 1))
                | 'Count Flat' >> beam.CombinePerKey(sum))
        buckets = (entries
                   | 'Drop Flat' >> beam.Filter(lambda e: e[3] != FLAT)
                   | 'Key By Band' >> beam.FlatMap(band_keys)
                   | 'Group By Band' >> beam.GroupByKey()
                   | 'Pair Within Buckets' >> beam.ParDo(PairBucket()).with_outputs(
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

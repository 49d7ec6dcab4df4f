"""Exact copies within a split: records whose image another record of the same split holds too,
byte for byte (their image/key/sha256 are equal), under other names. A data-quality finding,
not an error: the run counts them per split (summary.json's `exact_copies`) and names a few at
its end, and verify finds the same.

Each converted part files its records' digests (pairing.sha_digest: 64 bits of the SHA-256) with
their ids into the bundle's sorted runs, a section per split (`file_copies`). CountCopies reads
each split's digests back in RANGES key ranges, in digest order, and counts in each group of
equal digests all but the first record (by id); it names the first EXAMPLES copies in digest
order with the record each copies (sources found by id: part_records.py).
"""
from typing import Iterator

import apache_beam as beam
import numpy as np

from pipeline.base.splits import SPLITS
from pipeline.io import sorted_runs
from pipeline.io.sorted_runs import RunWriter
from pipeline.quality.pairing import Table
from transforms.gathered import Gathered
from transforms.part_records import PartRecords
from transforms.spread import Spread

COPY = np.dtype([('sha', '<u8'), ('id', '<u8')])
RANGES = 16
EXAMPLES = 3
SECTION = 'copies'


def file_copies(writer: RunWriter, table: Table) -> None:
    """Files a part's records (all of one split) by their digests."""
    if not len(table.rows):
        return
    rows = np.zeros(len(table.rows), dtype=COPY)
    rows['sha'], rows['id'] = table.rows['sha'].view(np.uint64), table.rows['id']
    writer.add_rows((SECTION, SPLITS[int(table.rows['split'][0])]), rows['sha'], rows)


def _tasks(runs: list) -> Iterator[tuple[str, int]]:
    """(split, range) of each range of digests to read."""
    splits = sorted({section[1] for run in runs for section in run.sections
                     if isinstance(section, tuple) and section[0] == SECTION})
    for split in splits:
        for index in range(RANGES):
            yield split, index


def _count(task: tuple[str, int], runs: list,
           left_out: list | None = None) -> tuple[str, tuple[int, list]]:
    """(split, (copies in the range, its first EXAMPLES copies as (digest, copy id, id of the
    record it copies))), without the records `left_out` (their ids: --leakage=drop)."""
    split, index = task
    step = (1 << 64) // RANGES
    lo, hi = index * step, (index + 1) * step if index < RANGES - 1 else 1 << 64
    rows = sorted_runs.read_rows(runs, (SECTION, split), lo, hi, COPY)
    if left_out:
        rows = rows[~np.isin(rows['id'], np.array(left_out, dtype=np.int64).view(np.uint64))]
    rows = rows[np.lexsort((rows['id'], rows['sha']))]
    repeats = np.flatnonzero(rows['sha'][1:] == rows['sha'][:-1]) + 1
    firsts = np.searchsorted(rows['sha'], rows['sha'][repeats], side='left')
    examples = [(int(rows['sha'][i]), int(rows['id'][i]), int(rows['id'][f]))
                for i, f in zip(repeats[:EXAMPLES].tolist(), firsts[:EXAMPLES].tolist())]
    return split, (len(repeats), examples)


def _merge(counted: list[tuple[int, list]]) -> tuple[int, list]:
    return (sum(n for n, _ in counted),
            sorted(example for _, examples in counted for example in examples)[:EXAMPLES])


def _named(split_counted: tuple[str, tuple[int, list]], temp_dir: str,
           chunk_fps: dict, key: bytes) -> tuple[str, dict]:
    split, (count, examples) = split_counted
    sources = PartRecords(temp_dir, chunk_fps, key)
    named = [sources.sources(np.array([copy, first], dtype=np.uint64))
             for _, copy, first in examples]
    return split, {'count': count, 'examples': named}


class CountCopies(beam.PTransform):
    """The runs the parts' records were filed into (leakage.Filed's runs) -> (split, {'count':
    exact copies, 'examples': [[copy's source, source of the record it copies], ...]}) for each
    split with records.
    `chunk_fps`: the chunks' fingerprints as a dict side input (they name the part files whose
    sidecars keep the records' sources); `left_out`: ids of records left out of the shards
    (--leakage=drop), not counted; `key`: the run's resume key, which seals the sidecars."""

    def __init__(self, temp_dir: str, chunk_fps: beam.pvalue.AsDict, key: bytes,
                 left_out: beam.PCollection | None = None):
        super().__init__()
        self._temp_dir, self._chunk_fps, self._left_out = temp_dir, chunk_fps, left_out
        self._key = key

    def expand(self, runs: beam.PCollection) -> beam.PCollection:
        return (runs
                | 'Copy Tasks' >> Gathered(_tasks, each=True)
                | 'Spread Copy Tasks' >> Spread()
                | 'Count In Range' >> beam.Map(
                    _count, beam.pvalue.AsList(runs),
                    *([beam.pvalue.AsList(self._left_out)] if self._left_out is not None else []))
                | 'Per Split' >> beam.CombinePerKey(_merge)
                | 'Name Examples' >> beam.Map(_named, self._temp_dir, self._chunk_fps, self._key))

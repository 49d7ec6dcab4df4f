"""Exact copies within a split: records whose image another record of the same split holds too,
byte for byte (their image/key/sha256 are equal), under other names. A data-quality finding,
not an error: the run counts them per split (summary.json's `exact_copies`) and names a few at
its end, and verify finds the same.

Each converted part files its records' digests (pairing.sha_digest: 64 bits of the SHA-256) with
their ids into the bundle's sorted runs, a section per split (`file_copies`). The quality check
(check_quality.py) reads each split's digests back in RANGES key ranges, in digest order, and
counts in each group of equal digests all but the first record (by id); the commit names the
first EXAMPLES copies in digest order with the record each copies (sources found by id:
part_records.py).
"""
import dataclasses
from typing import Iterable, Iterator

import numpy as np

from pipeline.base.splits import SPLITS
from pipeline.io import sorted_runs
from pipeline.io.sorted_runs import RunWriter
from pipeline.quality.pairing import Table
from transforms.part_records import PartRecords

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


@dataclasses.dataclass(frozen=True)
class CopyRange:
    """A task of the count: one of a split's RANGES ranges of digests."""
    split: str
    index: int


def copy_ranges(plan) -> Iterator[CopyRange]:
    """Every range of every split of the plan (planning.Plan): a split without records has
    none filed, and counts none."""
    for split in sorted(plan.shard_plans):
        for index in range(RANGES):
            yield CopyRange(split, index)


def count_range(task: CopyRange, runs: list,
                left_out: np.ndarray | None = None) -> tuple[str, tuple[int, list]]:
    """(split, (copies in the range, its first EXAMPLES copies as (digest, copy id, id of the
    record it copies))), without the records `left_out` (their ids: --leakage=drop)."""
    step = (1 << 64) // RANGES
    lo = task.index * step
    hi = (task.index + 1) * step if task.index < RANGES - 1 else 1 << 64
    rows = sorted_runs.read_rows(runs, (SECTION, task.split), lo, hi, COPY)
    if left_out is not None and len(left_out):
        rows = rows[~np.isin(rows['id'], left_out)]
    rows = rows[np.lexsort((rows['id'], rows['sha']))]
    repeats = np.flatnonzero(rows['sha'][1:] == rows['sha'][:-1]) + 1
    firsts = np.searchsorted(rows['sha'], rows['sha'][repeats], side='left')
    examples = [(int(rows['sha'][i]), int(rows['id'][i]), int(rows['id'][f]))
                for i, f in zip(repeats[:EXAMPLES].tolist(), firsts[:EXAMPLES].tolist())]
    return task.split, (len(repeats), examples)


def found_copies(counted: Iterable[tuple[str, tuple[int, list]]], temp_dir: str,
                 chunk_fps: dict, key: bytes) -> dict[str, dict]:
    """The ranges' counts (count_range) -> {split: {'count': exact copies, 'examples': [[copy's
    source, source of the record it copies], ...]}}: the first EXAMPLES copies in digest order,
    their sources found by id in their parts' sidecars (`chunk_fps`: the chunks' fingerprints,
    which name the part files; `key`: the run's resume key, which seals the sidecars)."""
    by_split: dict[str, list] = {}
    for split, found in counted:
        by_split.setdefault(split, []).append(found)
    sources = PartRecords(temp_dir, chunk_fps, key)
    copies = {}
    for split, found in sorted(by_split.items()):
        examples = sorted(example for _, examples in found for example in examples)[:EXAMPLES]
        copies[split] = {'count': sum(n for n, _ in found), 'examples': [
            sources.sources(np.array([copy, first], dtype=np.uint64))
            for _, copy, first in examples]}
    return copies

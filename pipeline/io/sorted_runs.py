"""Sorted runs: records spilled to files, sorted by an integer key within named sections, and
read back one key range at a time.

This is how per-input data crosses between stages without passing through the runner (whose
local form, Beam's FnApiRunner, holds everything it passes in the launcher's memory): a stage
writes its records into runs in the run's temporary folder, holding at most a budget of them at
once, hands on only the runs' descriptions (a Run: its file and a sparse index), and a later
stage reads the records of one key range from every run, merged in key order.

A run's file is its records one after another, each (key: 8 bytes, length: 4 bytes, big-endian;
the payload), sorted by (section, key); a section's records are contiguous. Its description
gives, per section, the byte range, the count and the key and offset of every INDEX_EVERY-th
record, so a key range is one ranged read per run. A file is written whole under a new name
(runs are never appended to): one that a failed bundle wrote is just never named.

A run's file is anyone's who can write the folder, so its bytes are trusted only through its
description, which travels through the runner: it holds a digest of every block of
INDEX_EVERY records (an HMAC-SHA256 cut to 8 bytes, under a key drawn for the run and never
written to the folder), and a reader checks every block it reads before it decodes a record
of it (a key range is read in whole blocks). A block whose bytes are not those written ends
the run (`changed`), nothing of it used.
"""
import dataclasses
import heapq
import hmac
import secrets
import struct
import uuid
from typing import Hashable, Iterable, Iterator

import numpy as np

from pipeline.errors import DatasetError
from pipeline.io import fileio

INDEX_EVERY = 64
BUDGET_BYTES = 64 << 20   # What a writer holds before it writes a run.
_HEAD = struct.Struct('>QI')
_LAST_KEY = (1 << 64) - 1
DIGEST_BYTES = 8


def record_dtype(payload: np.dtype) -> np.dtype:
    """Records with a fixed-size payload as a numpy row (what `write_rows` and `read_rows` use)."""
    return np.dtype([('key', '>u8'), ('length', '>u4'), ('payload', payload)])


@dataclasses.dataclass(frozen=True)
class Section:
    """Where one section's records lie in a run's file."""
    start: int
    end: int
    count: int
    keys: np.ndarray      # Key of every INDEX_EVERY-th record (uint64), ascending.
    offsets: np.ndarray   # Its offset in the file.
    digests: bytes        # DIGEST_BYTES per block: records offsets[i] up to the next one.

    def block_end(self, block: int) -> int:
        return int(self.offsets[block + 1]) if block + 1 < len(self.offsets) else self.end


@dataclasses.dataclass(frozen=True)
class Run:
    path: str
    sections: dict
    key: bytes            # Of its blocks' digests (`_digest`).

    @property
    def count(self) -> int:
        return sum(section.count for section in self.sections.values())


class RunWriter:
    """Records written into runs in `folder` whenever `budget` bytes are held: of any payload
    (`add`), or of fixed-size payloads given as numpy rows (`add_rows`); a section holds one
    kind or the other."""

    def __init__(self, folder: str, budget: int = BUDGET_BYTES):
        self._folder, self._budget = folder, budget
        self._held: dict[Hashable, list[tuple[int, bytes]]] = {}
        self._rows: dict[Hashable, list[np.ndarray]] = {}
        self._bytes = 0
        self.runs: list[Run] = []

    def add(self, section: Hashable, key: int, payload: bytes) -> None:
        self._held.setdefault(section, []).append((key, payload))
        self._bytes += len(payload) + _HEAD.size
        if self._bytes >= self._budget:
            self.flush()

    def add_rows(self, section: Hashable, keys: np.ndarray, rows: np.ndarray) -> None:
        """Records of fixed-size payloads: `rows` (a numpy array), keyed by `keys`."""
        payloads = np.ascontiguousarray(rows).view(np.dtype((np.void, rows.dtype.itemsize)))
        records = np.zeros(len(rows), dtype=record_dtype(payloads.dtype))
        records['key'], records['length'], records['payload'] = keys, rows.dtype.itemsize, payloads
        self._rows.setdefault(section, []).append(records)
        self._bytes += records.nbytes
        if self._bytes >= self._budget:
            self.flush()

    def flush(self) -> None:
        """Writes what is held as a run (nothing when nothing is)."""
        if not (self._held or self._rows):
            return
        path = fileio.join(self._folder, f'{uuid.uuid4().hex}.run')
        sections, offset, key = {}, 0, secrets.token_bytes(16)
        with fileio.writing(path) as out:
            for section in sorted({*self._held, *self._rows}, key=repr):
                data, keys, offsets = (_sorted_rows(self._rows[section]) if section in self._rows
                                       else _sorted_records(self._held[section]))
                starts = offsets[::INDEX_EVERY]
                view = memoryview(data)
                digests = b''.join(_digest(key, view[a:b]) for a, b in
                                   zip(starts.tolist(), [*starts[1:].tolist(), len(data)]))
                sections[section] = Section(offset, offset + len(data), len(keys),
                                            keys[::INDEX_EVERY].copy(), offset + starts,
                                            digests)
                out.write(data)
                offset += len(data)
        self.runs.append(Run(path, sections, key))
        self._held, self._rows, self._bytes = {}, {}, 0

    def close(self) -> list[Run]:
        """Writes what is still held; returns every run written."""
        self.flush()
        return self.runs


def _sorted_records(held: list[tuple[int, bytes]]) -> tuple[bytes, np.ndarray, np.ndarray]:
    """(file bytes, keys, offsets) of records sorted by key (stable)."""
    ordered = sorted(held, key=lambda item: item[0])
    sizes = np.array([_HEAD.size + len(payload) for _, payload in ordered], dtype=np.int64)
    data = b''.join(_HEAD.pack(key, len(payload)) + payload for key, payload in ordered)
    return (data, np.array([key for key, _ in ordered], dtype=np.uint64),
            np.cumsum(sizes) - sizes)


def _sorted_rows(blocks: list[np.ndarray]) -> tuple[bytes, np.ndarray, np.ndarray]:
    """(file bytes, keys, offsets) of fixed-size records sorted by key (stable)."""
    records = np.empty(sum(map(len, blocks)), dtype=blocks[0].dtype)   # Big-endian, as written.
    np.concatenate(blocks, out=records)
    records = records[np.argsort(records['key'], kind='stable')]
    return (records.tobytes(), records['key'].astype(np.uint64),
            np.arange(len(records), dtype=np.int64) * records.dtype.itemsize)


def _digest(key: bytes, block) -> bytes:
    """A block's digest: the first DIGEST_BYTES of its HMAC-SHA256 (SHA-256 runs in hardware
    on most CPUs, ahead of a keyed BLAKE2b)."""
    return hmac.digest(key, block, 'sha256')[:DIGEST_BYTES]


def _blocks(section: Section, lo: int, hi: int) -> tuple[int, int]:
    """The blocks [first, last) of a section that hold every record with lo <= key < hi."""
    first = max(int(np.searchsorted(section.keys, np.uint64(lo), side='left')) - 1, 0)
    last = (len(section.keys) if hi > _LAST_KEY
            else int(np.searchsorted(section.keys, np.uint64(hi), side='left')))
    return first, last


def _ranges(runs: Iterable[Run], section: Hashable, lo: int, hi: int
            ) -> list[tuple[str, bytes]]:
    """(path, bytes) of each run that may hold records of `section` with lo <= key < hi, read
    at once (one ranged read per run) and checked against its description (`_read`)."""
    wanted = [(run, run.sections[section], *_blocks(run.sections[section], lo, hi))
              for run in runs if section in run.sections]
    return fileio.at_once(lambda where: (where[0].path, _read(*where)),
                          [w for w in wanted if w[3] > w[2]])


def _read(run: Run, section: Section, first: int, last: int) -> bytes:
    """The bytes of a section's blocks [first, last), each the block written (else `changed`)."""
    start, end = int(section.offsets[first]), section.block_end(last - 1)
    data = fileio.read_range(run.path, start, end - start)
    if len(data) != end - start:
        raise changed(run.path, 'it is shorter than it was written')
    view = memoryview(data)
    for block in range(first, last):
        at = int(section.offsets[block]) - start
        written = section.digests[block * DIGEST_BYTES:(block + 1) * DIGEST_BYTES]
        if _digest(run.key, view[at:section.block_end(block) - start]) != written:
            raise changed(run.path, 'its bytes are not those written')
    return data


def changed(path: str, why: str) -> DatasetError:
    """The error of a run whose bytes are not those this run wrote (`why`)."""
    return DatasetError(f'{path}, a file this run wrote, was changed under it ({why}); nothing '
                        'of it was used. Keep others from writing the output folder while a run '
                        'is on, and rerun')


def read_range(runs: Iterable[Run], section: Hashable, lo: int, hi: int
               ) -> Iterator[tuple[int, bytes, str]]:
    """(key, payload, the run's path) of every record of `section` with lo <= key < hi, of all
    `runs`, in key order (records of one run with equal keys in their order): the bytes
    written, each block checked (`_read`); what they mean is the reader's to check."""
    return heapq.merge(*(_records(path, data, lo, hi)
                         for path, data in _ranges(runs, section, lo, hi)),
                       key=lambda record: record[0])


def _records(path: str, data: bytes, lo: int, hi: int) -> Iterator[tuple[int, bytes, str]]:
    at = 0
    while at < len(data):
        if at + _HEAD.size > len(data):
            raise changed(path, 'a record runs past its end')
        key, length = _HEAD.unpack_from(data, at)
        at += _HEAD.size
        if key >= hi:
            return
        if at + length > len(data):
            raise changed(path, 'a record runs past its end')
        if key >= lo:
            yield key, data[at:at + length], path
        at += length


def _rows(path: str, data: bytes, dtype: np.dtype, size: int) -> np.ndarray:
    """The records of fixed-size payloads in `data`, each of the size written (else `changed`)."""
    if len(data) % dtype.itemsize:
        raise changed(path, 'its records are not of the size written')
    rows = np.frombuffer(data, dtype=dtype)
    if (rows['length'] != size).any():
        raise changed(path, 'its records are not of the size written')
    return rows


def read_rows(runs: Iterable[Run], section: Hashable, lo: int, hi: int,
              payload: np.dtype) -> np.ndarray:
    """The payloads (`payload` rows) of every record of `section` with lo <= key < hi, of all
    `runs` written with RunWriter.add_rows, in key order."""
    dtype = record_dtype(np.dtype((np.void, payload.itemsize)))
    parts = [_rows(path, data, dtype, payload.itemsize)
             for path, data in _ranges(runs, section, lo, hi)]
    if not parts:
        return np.zeros(0, dtype=payload)
    records = np.concatenate(parts)
    keys = records['key'].astype(np.uint64)
    records = records[(keys >= np.uint64(lo)) & ((keys < np.uint64(hi)) if hi <= _LAST_KEY
                                                 else True)]
    records = records[np.argsort(records['key'], kind='stable')]
    return np.ascontiguousarray(records['payload']).view(payload)

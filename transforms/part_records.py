"""A converted record's facts (its image/source, hashes, label id, whether passed through), found
by its id (pairing.record_ids: split, shard, chunk and place in its part file): the sidecar of
its chunk's part keeps them for every record (encode_chunks.py; resume.py). What finds
near-duplicates and copies carries ids alone, and asks here about the records it reports."""
import numpy as np

from pipeline.base.splits import SPLITS
from pipeline.output import layout
from pipeline.quality.pairing import ROW, Table, record_places, sha_digest
from transforms import resume
from transforms.shard_results import ShardResult


class PartRecords:
    """Records of converted parts by id, reading each part's sidecar once. `chunk_fps`: (split,
    chunk) -> the chunk's fingerprint, which names its part files; `key`: the run's resume key,
    which seals the sidecars."""

    def __init__(self, temp_dir: str, chunk_fps: dict, key: bytes):
        self._temp_dir, self._chunk_fps, self._key = temp_dir, chunk_fps, key
        self._parts: dict[tuple, list] = {}

    def sources(self, ids: np.ndarray) -> list[str]:
        """The image/source of each record."""
        return [entry[0] for entry in self._entries(ids)]

    def table(self, ids: np.ndarray) -> Table:
        """The records as a pairing Table, with their sources."""
        ids = np.asarray(ids, dtype=np.uint64)
        found = self._entries(ids)
        rows = np.zeros(len(ids), dtype=ROW)
        places = record_places(ids)
        for name in ('split', 'shard', 'chunk', 'index'):
            rows[name] = places[name]
        rows['id'] = ids
        rows['phash'] = [entry[2] for entry in found]
        rows['mirror'] = [entry[3] for entry in found]
        rows['sha'] = [sha_digest(entry[1]) for entry in found]
        rows['label'] = [entry[4] for entry in found]
        rows['passed'] = [entry[5] for entry in found]
        return Table(rows, [entry[0] for entry in found], np.zeros(len(ids), dtype=bool))

    def _entries(self, ids: np.ndarray) -> list[tuple]:
        """The sidecar's entry of each record: (source, sha256, hash, mirror hash, label id,
        passed through)."""
        places = record_places(np.asarray(ids, dtype=np.uint64))
        return [self._part(SPLITS[split], shard, chunk)[index] for split, shard, chunk, index in
                zip(*(places[name].tolist() for name in ('split', 'shard', 'chunk', 'index')))]

    def _part(self, split: str, shard: int, chunk: int) -> list:
        key = split, shard, chunk
        if key not in self._parts:
            path = layout.part_path(self._temp_dir, split, shard, chunk,
                                    self._chunk_fps[(split, chunk)])
            result = resume.load_sidecar(path, ShardResult, self._key, False, split=split,
                                         shard=shard, chunk=chunk)
            if result is None:
                raise resume.changed_sidecar(path)
            self._parts[key] = result.hashes
        return self._parts[key]

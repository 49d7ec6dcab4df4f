"""A record's source (its image/source), found by its id (pairing.record_ids: split, shard,
chunk and place in the part file): the sidecar of its chunk's part keeps every record's source
(write_shards.ShardResult.hashes; resume.py). What finds near-duplicates and copies carries ids
alone, and asks here for the sources of the few records it reports."""
import numpy as np

from pipeline.base.splits import SPLITS
from pipeline.output import output_folder
from pipeline.quality.pairing import record_places
from transforms import resume
from transforms.shard_results import ShardResult


class RecordSources:
    """Sources of records by id, reading each part's sidecar once. `chunk_fps`: (split, chunk)
    -> the chunk's fingerprint, which names its part files."""

    def __init__(self, temp_dir: str, chunk_fps: dict):
        self._temp_dir, self._chunk_fps = temp_dir, chunk_fps
        self._parts: dict[tuple, list] = {}

    def of(self, ids: np.ndarray) -> list[str]:
        places = record_places(np.asarray(ids, dtype=np.uint64))
        return [self._part(SPLITS[split], shard, chunk)[index][0] for split, shard, chunk, index in
                zip(*(places[name].tolist() for name in ('split', 'shard', 'chunk', 'index')))]

    def _part(self, split: str, shard: int, chunk: int) -> list:
        key = split, shard, chunk
        if key not in self._parts:
            path = output_folder.part_path(self._temp_dir, split, shard, chunk,
                                           self._chunk_fps[(split, chunk)])
            result = resume.load_sidecar(path, ShardResult, split=split, shard=shard, chunk=chunk)
            if result is None:
                raise RuntimeError(f'{path}.json, which the run wrote, is gone or changed')
            self._parts[key] = result.hashes
        return self._parts[key]

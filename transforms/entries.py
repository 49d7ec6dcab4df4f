"""The error and damaged-JPEG entries of a run, kept on disk, never all in memory.

Each part (a chunk's records in a shard) writes its entries, sorted, beside its data file in
the run's temporary folder: `PART.errors.jsonl` of (source, reason) and `PART.damaged.jsonl` of
(source, reason, action), one JSON array a line. A shard's join merges its parts' entries into
`SHARD.errors.jsonl` and `SHARD.damaged.jsonl`; the commit merges the shards' files of a split,
line by line, into errors-SPLIT.jsonl and damaged-SPLIT.jsonl. Results carry only the counts,
and a part's or shard's sidecar the SHA-256 of each of its entry files, which a rerun checks
before it reuses them (`match`).
"""
import contextlib
import hashlib
import heapq
import json
from typing import Iterable, Iterator

from pipeline.io import fileio
from pipeline.errors import DatasetError

KINDS = ('errors', 'damaged')
FAN_IN = 128   # Files merged at once; more are merged in rounds through the temporary folder.


def entry_path(data_path: str, kind: str) -> str:
    """The entries of `kind` ('errors' or 'damaged') of the part or shard file `data_path`."""
    return f'{data_path}.{kind}.jsonl'


def write(data_path: str, kind: str, entries: Iterable[tuple]) -> str:
    """Writes the entries of a part, sorted, created new beside `data_path`; returns the
    file's SHA-256."""
    return _write_lines(entry_path(data_path, kind), (_line(e) for e in sorted(entries)))


def match(data_path: str, digests: dict) -> str | None:
    """None when both entry files of `data_path` are there, may be taken as this run's own
    (fileio.is_untrusted) and hold the bytes of the SHA-256 `digests` gives each kind; else the
    first that does not."""
    for kind in KINDS:
        path = entry_path(data_path, kind)
        try:
            if fileio.is_untrusted(path) or digests.get(kind) != file_digest(path):
                return path
        except FileNotFoundError:
            return path
    return None


def file_digest(path: str) -> str:
    """The SHA-256 of a file, read a block at a time."""
    digest = hashlib.sha256()
    with fileio.open_read(path) as stream:
        while block := stream.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def join(holding: dict[str, list[str]], shard: str) -> dict[str, str]:
    """Merges the entries of the part files that hold entries of each kind (`holding`: kind ->
    part files; a part with none is not read) into the shard file `shard`'s; returns each
    kind's file's SHA-256."""
    return {kind: _write_lines(entry_path(shard, kind), (_line(e) for e in merged(
        [entry_path(p, kind) for p in holding.get(kind, ())], shard))) for kind in KINDS}


def merged(paths: list[str], scratch: str) -> Iterator[tuple]:
    """The entries of the sorted entry files `paths`, in order, read a line at a time; past
    FAN_IN files, groups are first merged into files named after `scratch`."""
    rounds = 0
    while len(paths) > FAN_IN:
        rounds += 1
        groups = [paths[i:i + FAN_IN] for i in range(0, len(paths), FAN_IN)]
        paths = [f'{scratch}.merge-{rounds}-{i}.jsonl' for i in range(len(groups))]
        for group, path in zip(groups, paths):
            _write_lines(path, (_line(e) for e in _merge(group)))
    return _merge(paths)


def write_report(path: str, entries: Iterable[tuple], line) -> tuple[int, str]:
    """Writes a report file of `line(entry)` for each entry; returns (entries, SHA-256)."""
    digest, count = hashlib.sha256(), 0
    with fileio.writing(path) as out:
        for entry in entries:
            data = line(entry)
            digest.update(data)
            out.write(data)
            count += 1
    return count, digest.hexdigest()


def check_count(path: str, found: int, expected: int) -> None:
    """Fails, committing nothing, when a report holds other than the entries the results
    counted (an entry file changed under the run)."""
    if found != expected:
        raise DatasetError(f'{path} would hold {found} entries, not the {expected} the shards '
                           'counted; nothing was committed. Rerun with --clean_temp to convert '
                           'afresh')


def _line(entry: tuple) -> bytes:
    return json.dumps(list(entry)).encode() + b'\n'


def _write_lines(path: str, lines: Iterable[bytes]) -> str:
    digest = hashlib.sha256()
    with fileio.writing(path) as out:
        for data in lines:
            digest.update(data)
            out.write(data)
    return digest.hexdigest()


def _merge(paths: list[str]) -> Iterator[tuple]:
    with contextlib.ExitStack() as files:
        streams = [files.enter_context(fileio.open_read(p)) for p in paths]
        yield from heapq.merge(*((tuple(json.loads(line)) for line in s) for s in streams))

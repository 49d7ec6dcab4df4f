"""Cloud Storage reads started ahead of their use, handed out in the order asked."""
import collections
import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterable, Iterator

from pipeline.io.fileio import is_gcs, read_input
from pipeline.io.gcs import reserve_connections


class ReadAhead:
    """Reads Cloud Storage objects ahead of their use on a pool of threads, for callers that
    spend the wait on a round trip (~30-50 ms from a worker) converting what was read before.

    `read_in_order` hands out the reads in the order asked, whatever order they finish in, so
    what a caller makes from them does not depend on timing. At most `reads` are in flight,
    and no new read starts while those read or being read but not yet taken add up to
    `max_bytes` or more (an object of unknown size counts as max_bytes / reads), so memory stays
    flat. A read fails as `read_input` fails (no input is read past `max_input` bytes, after its
    retries), when its result is taken.
    Local files are read when taken: from disk or the page cache that costs less than handing
    the read to a thread.
    """

    def __init__(self, reads: int, max_bytes: int, max_input: int):
        self._reads, self._max_bytes, self._max_input = reads, max_bytes, max_input
        self._pool = ThreadPoolExecutor(reads, thread_name_prefix='read-ahead')
        reserve_connections(reads)

    def read_in_order(self, files: Iterable[tuple[Any, int | None]]
                      ) -> Iterator['Future[bytes] | _ReadWhenTaken | None']:
        """For each (path or None, size or None), in order: None for no path, else an object
        whose result() is the file's bytes. Instead of a path, an object with a `file` (the path
        it reads from) and a `read(limit)` (an archive member, say) is read by calling that."""
        pending: collections.deque = collections.deque()   # (read, bytes counted)
        held = 0
        try:
            for path, size in files:
                remote = path is not None and is_gcs(getattr(path, 'file', path))
                cost = 0
                if remote:
                    cost = size if size is not None else self._max_bytes // self._reads
                while pending and (len(pending) >= self._reads or held + cost > self._max_bytes):
                    read, taken = pending.popleft()
                    held -= taken
                    yield read
                read = (self._pool.submit(_read, path, self._max_input) if remote else
                        None if path is None else _ReadWhenTaken(path, self._max_input))
                pending.append((read, cost))
                held += cost
            while pending:
                yield pending.popleft()[0]
        finally:
            for read, _ in pending:
                if isinstance(read, Future):
                    read.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        reserve_connections(-self._reads)


def _read(location, limit: int) -> bytes:
    return read_input(location, limit) if isinstance(location, str) else location.read(limit)


@dataclasses.dataclass(frozen=True)
class _ReadWhenTaken:
    path: Any
    limit: int

    def result(self) -> bytes:
        return _read(self.path, self.limit)

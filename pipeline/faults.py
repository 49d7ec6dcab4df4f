"""Crash points for tests of what a kill leaves behind.

Setting IMAGE_TFRECORDS_KILL_AT=<point> makes the process kill itself with SIGKILL when it
reaches that point, so tests exercise the production code path up to an exact instant. Points:
`commit:journal` (journal written), `commit:replace:N` and `commit:install:N` (after the N-th
batch of moves of the old and the new dataset), `commit:marked` (temporary folder marked
committed), `commit:unjournaled` (journal deleted), `cleanup:contents` (a temporary folder
emptied but for its marker), `cleanup:marker` (its marker deleted, the empty folder left),
`chunk:N` (after this process converted its N-th chunk), `group:N` (after this process wrote
the blob of its N-th group of inputs read together), `shard:N` (after this process wrote
its N-th shard), `links:N` (after this process linked its N-th shuffle group of the leakage
check). Unset, it costs one dictionary lookup.
"""
import collections
import os
import signal

ENV = 'IMAGE_TFRECORDS_KILL_AT'
_reached = collections.Counter()


def crash_point(name: str, counted: bool = False) -> None:
    """Kills this process if ENV names this point (`name:N` for the N-th time when `counted`)."""
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    if counted:
        _reached[name] += 1
        name = f'{name}:{_reached[name]}'
    if wanted == name:
        os.kill(os.getpid(), signal.SIGKILL)

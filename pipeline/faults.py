"""Crash points for tests of what a kill leaves behind.

Setting IMAGE_TFRECORDS_KILL_AT=<point> makes the process kill itself with SIGKILL when it
reaches that point, so tests exercise the production code path up to an exact instant. Points:
`commit:journal` (journal written), `commit:replace:N` and `commit:install:N` (after the N-th
batch of moves of the old and the new dataset), `commit:marked` (temporary folder marked
committed), `commit:unjournaled` (journal deleted), `cleanup:contents` (a temporary folder
emptied but for its marker), `cleanup:marker` (its marker deleted, the empty folder left),
`listed:N` (after this process wrote the runs of its N-th bundle of listed inputs),
`chunk:N` (after this process converted its N-th chunk), `filed:N` (after this process wrote
the runs of its N-th bundle of converted records' hashes), `group:N` (after this process wrote
the blob of its N-th group of inputs read together), `shard:N` (after this process wrote
its N-th shard), `links:N` (after this process linked its N-th shuffle group of the leakage
check). IMAGE_TFRECORDS_STOP_AT=<point> stops the process there instead (SIGSTOP), for a test
to change what it left in the folder and continue it (SIGCONT). Unset, they cost two
dictionary lookups.
"""
import collections
import os
import signal

ENV = 'IMAGE_TFRECORDS_KILL_AT'
STOP_ENV = 'IMAGE_TFRECORDS_STOP_AT'
_reached = collections.Counter()


def crash_point(name: str, counted: bool = False) -> None:
    """Kills this process if ENV names this point (`name:N` for the N-th time when `counted`),
    or stops it if STOP_ENV does."""
    wanted, stop = os.environ.get(ENV), os.environ.get(STOP_ENV)
    if not (wanted or stop):
        return
    if counted:
        _reached[name] += 1
        name = f'{name}:{_reached[name]}'
    if wanted == name:
        os.kill(os.getpid(), signal.SIGKILL)
    if stop == name:
        os.kill(os.getpid(), signal.SIGSTOP)

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
check). IMAGE_TFRECORDS_PAUSE_AT=<point> instead stops the process there with SIGSTOP, for
tests of what a signal does at that instant. Unset, they cost two dictionary lookups.
"""
import collections
import os
import signal

ENV = 'IMAGE_TFRECORDS_KILL_AT'
PAUSE_ENV = 'IMAGE_TFRECORDS_PAUSE_AT'
_reached = collections.Counter()


def crash_point(name: str, counted: bool = False) -> None:
    """Kills this process if ENV names this point (`name:N` for the N-th time when `counted`),
    or stops it if PAUSE_ENV does."""
    wanted, paused = os.environ.get(ENV), os.environ.get(PAUSE_ENV)
    if not (wanted or paused):
        return
    if counted:
        _reached[name] += 1
        name = f'{name}:{_reached[name]}'
    if wanted == name:
        os.kill(os.getpid(), signal.SIGKILL)
    if paused == name:
        os.kill(os.getpid(), signal.SIGSTOP)

"""Processes racing for output locks (tests/test_hostile_folders.py). Each contender is a fresh
Python process ('spawn') that imports this small module, not the test's, so it starts in a
fraction of a second; a barrier releases them together at each folder."""
import multiprocessing
import os

from pipeline.errors import DatasetError
from pipeline.output import output_lock


def race(folders: list[str], contenders: int, run_id: str, break_lock: bool = False,
         emulator: str | None = None) -> dict[str, list[str]]:
    """{folder: each contender's outcome, 'won' or its refusal}: `contenders` processes take
    (with `break_lock`, break) the lock of each folder in turn, released together at each.
    `emulator`: the Cloud Storage emulator's address, for gs:// folders."""
    context = multiprocessing.get_context('spawn')
    barrier, results = context.Barrier(contenders), context.Queue()
    processes = [context.Process(target=_contend, args=(folders, run_id, break_lock, emulator,
                                                        barrier, results))
                 for _ in range(contenders)]
    for process in processes:
        process.start()
    outcomes = {}
    for _ in range(len(folders) * contenders):
        folder, outcome = results.get(timeout=300)
        outcomes.setdefault(folder, []).append(outcome)
    for process in processes:
        process.join(timeout=60)
    return outcomes


def _contend(folders: list[str], run_id: str, break_lock: bool, emulator: str | None, barrier,
             results) -> None:
    """One contender: at each barrier release, tries to take the lock of the next folder; it
    ends once every contender tried the last one."""
    if emulator:
        os.environ['STORAGE_EMULATOR_HOST'] = emulator
    for folder in folders:
        barrier.wait()
        try:
            output_lock.acquire(folder, run_id, 'DirectRunner', waits=True, break_lock=break_lock)
            results.put((folder, 'won'))
        except DatasetError as exc:
            results.put((folder, str(exc)))
    barrier.wait()   # None exits (so leaves a lock a slower one would take over) before all tried.

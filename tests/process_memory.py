"""The peak resident memory of every process of a command line: its process tree's VmHWM
(each process's own high-water mark, so a peak between two samples is not missed) sampled every
SAMPLE_SECONDS while it runs. (wait4's ru_maxrss is no help: it counts what the process forked
from held, the test runner's memory.)"""
import dataclasses
import os
import subprocess
import sys
import tempfile
import time

SAMPLE_SECONDS = 0.1
GIB = 1 << 30


@dataclasses.dataclass
class Measured:
    returncode: int
    stdout: str
    stderr: str
    peaks: dict          # pid -> the largest VmHWM sampled, in bytes.

    @property
    def largest(self) -> int:
        """The largest peak of any process of the command."""
        return max(self.peaks.values(), default=0)


def run_sampled(*argv, timeout: float = 300) -> Measured:
    """`python -m pipeline.run ARGV` run to its end, the memory of all its processes sampled."""
    with tempfile.TemporaryFile('w+') as out, tempfile.TemporaryFile('w+') as err:
        process = subprocess.Popen([sys.executable, '-m', 'pipeline.run', *argv], stdout=out,
                                   stderr=err, text=True, start_new_session=True)
        peaks, deadline = {}, time.monotonic() + timeout
        while True:
            for pid in _tree(process.pid):
                peaks[pid] = max(peaks.get(pid, 0), _peak(pid))
            done, status = os.waitpid(process.pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.killpg(process.pid, 9)
                raise TimeoutError(f'{argv} ran past {timeout} s')
            time.sleep(SAMPLE_SECONDS)
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Measured(process.returncode, out.read(), err.read(), peaks)


def _tree(pid: int) -> list[int]:
    found = [pid]
    try:
        for task in os.listdir(f'/proc/{pid}/task'):
            with open(f'/proc/{pid}/task/{task}/children') as stream:
                found += [child for text in stream.read().split() for child in _tree(int(text))]
    except OSError:   # Ended meanwhile.
        pass
    return found


def _peak(pid: int) -> int:
    try:
        with open(f'/proc/{pid}/status') as stream:
            for line in stream:
                if line.startswith('VmHWM:'):
                    return int(line.split()[1]) << 10
    except OSError:
        pass
    return 0

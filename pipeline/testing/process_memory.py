"""The memory of a command's process tree while it runs, sampled from /proc (Linux): the peak
resident size of the command itself (the launcher) and of each process below it (the local
workers), each from its own high-water mark (VmHWM: a peak between two samples is not missed),
and the peak of all of them together, counted proportionally (PSS: a page that forked processes
share is counted once, split between them). wait4's ru_maxrss is no help: it counts what a
process forked from held, a test runner's memory say."""
import dataclasses
import subprocess
import sys
import threading
import time

from pipeline.worker_watch import children

GIB = 1 << 30


@dataclasses.dataclass
class Sampled:
    """A command run to its end, and its peak bytes: of the launcher, of each other process (by
    pid), and of all together."""
    returncode: int
    stdout: str
    stderr: str
    launcher: int = 0
    others: dict = dataclasses.field(default_factory=dict)
    together: int = 0
    stderr_lines: list = dataclasses.field(default_factory=list)   # (seconds from start, line)

    @property
    def largest_other(self) -> int:
        return max(self.others.values(), default=0)

    @property
    def largest(self) -> int:
        return max(self.launcher, self.largest_other)

    @property
    def peaks(self) -> dict:
        """Every process's peak, the launcher's first."""
        return {'launcher': self.launcher, **self.others}


def run_sampled(*argv: str, timeout: float = 300, **popen) -> Sampled:
    """`python -m pipeline.run ARGV` run to its end, its process tree sampled."""
    return sample_command([sys.executable, '-m', 'pipeline.run', *argv], timeout=timeout, **popen)


def sample_command(command: list[str], every: float = 0.1, timeout: float = 3600,
                   **popen) -> Sampled:
    """Runs `command` to its end (stdout and stderr kept as text, each stderr line with the time
    it came), sampling its process tree every `every` seconds."""
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, **popen)
    sampled, done = Sampled(0, '', ''), threading.Event()

    def sample() -> None:
        while not done.wait(every):
            _sample(process.pid, sampled)

    def read_stdout() -> None:
        sampled.stdout = process.stdout.read()

    def read_stderr() -> None:
        for line in process.stderr:
            sampled.stderr_lines.append((time.monotonic() - started, line))

    threads = [threading.Thread(target=t, daemon=True) for t in (sample, read_stdout, read_stderr)]
    for thread in threads:
        thread.start()
    try:
        process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        done.set()
        for thread in threads:
            thread.join()
    sampled.stderr = ''.join(line for _, line in sampled.stderr_lines)
    sampled.returncode = process.returncode
    return sampled


def _sample(root: int, sampled: Sampled) -> None:
    together = 0
    for pid in [root, *_descendants(root)]:
        peak, pss = _resident(pid)
        together += pss
        if pid == root:
            sampled.launcher = max(sampled.launcher, peak)
        elif peak:
            sampled.others[pid] = max(sampled.others.get(pid, 0), peak)
    sampled.together = max(sampled.together, together)


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        below = children(todo.pop())
        found += below
        todo += below
    return found


def _resident(pid: int) -> tuple[int, int]:
    """(peak resident bytes so far, PSS now) of a live process; (0, 0) once it is gone."""
    try:
        with open(f'/proc/{pid}/status') as stream:
            status = dict(line.split(':', 1) for line in stream if ':' in line)
        with open(f'/proc/{pid}/smaps_rollup') as stream:
            rollup = dict(line.split(':', 1) for line in stream.read().splitlines()[1:]
                          if ':' in line)
    except OSError:
        return 0, 0
    kib = lambda fields, name: int(fields.get(name, '0 kB').split()[0]) * 1024   # noqa: E731
    return kib(status, 'VmHWM'), kib(rollup, 'Pss')

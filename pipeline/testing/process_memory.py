"""The memory of a command's process tree while it runs, sampled from /proc (Linux): the peak
resident size of the command itself (the launcher) and of each process below it (the local
workers), and the peak of all of them together, counted proportionally (PSS: a page that forked
processes share is counted once, split between them)."""
import dataclasses
import os
import subprocess
import threading


@dataclasses.dataclass
class TreeMemory:
    """Peak bytes: of the launcher, of each other process (by pid), and of all together."""
    launcher: int = 0
    others: dict = dataclasses.field(default_factory=dict)
    together: int = 0

    @property
    def largest_other(self) -> int:
        return max(self.others.values(), default=0)


def run_sampled(command: list[str], every: float = 0.1, timeout: float = 3600,
                **popen) -> tuple[subprocess.CompletedProcess, TreeMemory]:
    """Runs `command` to its end (stdout and stderr kept as text), sampling its process tree
    every `every` seconds."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, **popen)
    memory, done = TreeMemory(), threading.Event()

    def sample() -> None:
        while not done.wait(every):
            _sample(process.pid, memory)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        done.set()
        sampler.join()
        if process.poll() is None:
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), memory


def _sample(root: int, memory: TreeMemory) -> None:
    together = 0
    for pid in [root, *_descendants(root)]:
        rss, pss = _resident(pid)
        together += pss
        if pid == root:
            memory.launcher = max(memory.launcher, rss)
        elif rss:
            memory.others[pid] = max(memory.others.get(pid, 0), rss)
    memory.together = max(memory.together, together)


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in _listdir(f'/proc/{parent}/task'):
            try:
                with open(f'/proc/{parent}/task/{task}/children') as stream:
                    children = [int(p) for p in stream.read().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _resident(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes of a live process; (0, 0) once it is gone."""
    try:
        with open(f'/proc/{pid}/smaps_rollup') as stream:
            fields = dict(line.split(':', 1) for line in stream.read().splitlines()[1:]
                          if ':' in line)
    except OSError:
        return 0, 0
    kib = lambda name: int(fields.get(name, '0 kB').split()[0]) * 1024   # noqa: E731
    return kib('Rss'), kib('Pss')

"""The shell and Python code blocks of README.md and docs/, with the `<!-- not run: REASON -->`
marker that may stand on the line before a block, and how a test runs a shell block."""
import dataclasses
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LANGUAGES = ('bash', 'sh', 'shell', 'python')
# Installing this package and its extras: the test environment has done it.
INSTALL = re.compile(r"python3 -m venv \.venv && \.venv/bin/pip install -q -e '[^']*' && |"
                     r"^pip install -e '[^']*'.*\n", re.M)
_FENCE = re.compile(r'^```(\w*)\n(.*?)^```', re.S | re.M)
_NOT_RUN = re.compile(r'<!-- not run: (.+?) -->\n$')


@dataclasses.dataclass(frozen=True)
class Block:
    path: str          # relative to the repository
    line: int          # of the opening fence
    language: str
    code: str
    not_run: str | None   # the marker's reason, if the block is marked not runnable here

    @property
    def name(self) -> str:
        return f'{self.path}:{self.line}'


def pages() -> list[str]:
    """README.md and every Markdown page under docs/, relative to the repository."""
    found = glob.glob(os.path.join(REPO, 'docs', '**', '*.md'), recursive=True)
    return ['README.md', *sorted(os.path.relpath(path, REPO) for path in found)]


def blocks(path: str) -> list[Block]:
    """The blocks of one page in the LANGUAGES, in order."""
    with open(os.path.join(REPO, path)) as stream:
        text = stream.read()
    found = []
    for match in _FENCE.finditer(text):
        if match[1] in LANGUAGES:
            marker = _NOT_RUN.search(text[:match.start()][-300:])
            found.append(Block(path, text.count('\n', 0, match.start()) + 1, match[1], match[2],
                               marker[1] if marker else None))
    return found


def all_blocks() -> list[Block]:
    return [block for path in pages() for block in blocks(path)]


def find(path: str, text: str) -> Block:
    """The one block of a page that contains `text`."""
    [block] = [block for block in blocks(path) if text in block.code]
    return block


def converter_flags(code: str) -> list[str] | None:
    """The flags of a shell block that is one `python -m pipeline.run FLAGS` command and nothing
    else (no other command, pipe, redirection or variable); None for any other block."""
    line = code.replace('\\\n', ' ').strip()
    if '\n' in line or any(c in line for c in '&|;<>$`'):
        return None
    words = shlex.split(line, comments=True)
    return words[3:] if words[:3] == ['python', '-m', 'pipeline.run'] else None


def run_shell(code: str, cwd, timeout: float = 600) -> subprocess.CompletedProcess:
    """Runs a shell block with bash (-e, pipefail) in `cwd`, its install steps left out, with
    `python` and `.venv/bin/python` standing for this interpreter."""
    with tempfile.TemporaryDirectory() as bin_dir:
        with open(os.path.join(bin_dir, 'python'), 'w') as stream:
            stream.write(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
        os.chmod(os.path.join(bin_dir, 'python'), 0o755)
        script = INSTALL.sub('', code).replace('.venv/bin/python', 'python')
        return subprocess.run(['bash', '-euo', 'pipefail', '-c', script], cwd=cwd, capture_output=True,
                              text=True, timeout=timeout,
                              env={**os.environ, 'PATH': f'{bin_dir}:{os.environ["PATH"]}'})

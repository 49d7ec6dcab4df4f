"""The shell and Python code blocks of README.md and docs/, with the `<!-- not run: REASON -->`
marker that may stand on the line before a block, and how a test runs a shell block; and the
`text` blocks that show what a code block prints, and how a test compares them with it.

An output block is a `text` block right after a code block: nothing between the two fences but
at most one line of prose ending with a colon ("prints, with no credentials:"). It shows the code
block's standard output, line for line, compared with what the block prints where the test runs
it, after two explicit rules (`compare`): the test's folders print as the names the docs use
(`/data` for the folder of generated inputs, PATH_SHOWN for this repository), and a size in
KB, MB or GB may differ from the one shown by up to SIZE_TOLERANCE (the staged package grows
with the code); every other character, every other number included, must be the same. A `text`
block that is not such an output, or shows one that cannot be compared, carries
`<!-- not compared: REASON -->` on the line before it."""
import dataclasses
import difflib
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
_FENCE = re.compile(r'^```(\w*)\n(.*?)^```\n?', re.S | re.M)
_NOT_RUN = re.compile(r'<!-- not run: (.+?) -->\n$')
_NOT_COMPARED = re.compile(r'<!-- not compared: (.+?) -->\n$')
_LEAD = re.compile(r'\n*(?:[^\n`]*:\n\n)?')   # What may stand between a block and its output.
PATH_SHOWN = '/path/to/image-tfrecords'   # This repository's folder, in an output block.
SIZE_TOLERANCE = 0.25
_SIZE = re.compile(r'\b(\d+(?:\.\d+)?) ([KMG]B)\b')


@dataclasses.dataclass(frozen=True)
class Output:
    """A `text` block: what the code block before it prints, or (marked) something else."""
    path: str
    line: int              # of the opening fence
    text: str
    not_compared: str | None   # the marker's reason, if it is marked
    of_line: int | None        # the line of the code block whose output it is, if it is one


@dataclasses.dataclass(frozen=True)
class Block:
    path: str          # relative to the repository
    line: int          # of the opening fence
    language: str
    code: str
    not_run: str | None   # the marker's reason, if the block is marked not runnable here
    output: Output | None = None   # the output block right after it, unless marked not compared

    @property
    def name(self) -> str:
        return f'{self.path}:{self.line}'


def pages() -> list[str]:
    """README.md and every Markdown page under docs/, relative to the repository."""
    found = glob.glob(os.path.join(REPO, 'docs', '**', '*.md'), recursive=True)
    return ['README.md', *sorted(os.path.relpath(path, REPO) for path in found)]


def _parse(path: str) -> tuple[list[Block], list[Output]]:
    with open(os.path.join(REPO, path)) as stream:
        text = stream.read()
    code, outputs = [], []
    previous = None   # The last fence: (language, its match).
    for match in _FENCE.finditer(text):
        before = text[:match.start()][-300:]
        line = text.count('\n', 0, match.start()) + 1
        if match[1] in LANGUAGES:
            marker = _NOT_RUN.search(before)
            code.append(Block(path, line, match[1], match[2], marker[1] if marker else None))
        elif match[1] == 'text':
            marker = _NOT_COMPARED.search(before)
            after_code = (previous is not None and previous[0] in LANGUAGES and
                          _LEAD.fullmatch(text, previous[1].end(), match.start()) is not None)
            output = Output(path, line, match[2], marker[1] if marker else None,
                            code[-1].line if after_code else None)
            outputs.append(output)
            if after_code and output.not_compared is None:
                code[-1] = dataclasses.replace(code[-1], output=output)
        previous = (match[1], match)
    return code, outputs


def blocks(path: str) -> list[Block]:
    """The blocks of one page in the LANGUAGES, in order, each with its output block."""
    return _parse(path)[0]


def outputs(path: str) -> list[Output]:
    """The `text` blocks of one page, in order."""
    return _parse(path)[1]


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


def environment(base: dict | None = None) -> dict:
    """The environment a block's process runs in: `base` (this process's), with this
    repository first on PYTHONPATH, so a block imports this checkout's code from any folder."""
    base = dict(os.environ if base is None else base)
    base['PYTHONPATH'] = os.pathsep.join(filter(None, [REPO, base.get('PYTHONPATH')]))
    return base


def run_shell(code: str, cwd, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Runs a shell block with bash (-e, pipefail) in `cwd`, its install steps left out, with
    `python` and `.venv/bin/python` standing for this interpreter, in `environment(env)`."""
    with tempfile.TemporaryDirectory() as bin_dir:
        with open(os.path.join(bin_dir, 'python'), 'w') as stream:
            stream.write(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
        os.chmod(os.path.join(bin_dir, 'python'), 0o755)
        script = INSTALL.sub('', code).replace('.venv/bin/python', 'python')
        return subprocess.run(['bash', '-euo', 'pipefail', '-c', script], cwd=cwd, capture_output=True,
                              text=True, timeout=timeout,
                              env={**environment(env), 'PATH': f'{bin_dir}:{os.environ["PATH"]}'})


def compare(shown: str, printed: str, folders: dict[str, str]) -> str | None:
    """None when `printed` (a block's standard output) is what the output block `shown` shows,
    else a diff saying where they differ. `folders`: {folder the test used: the name the docs
    show for it}, this repository's as PATH_SHOWN besides; then a size in KB, MB or GB may be
    off by SIZE_TOLERANCE of the one shown."""
    folders = {REPO: PATH_SHOWN, **folders}
    for folder, name in sorted(folders.items(), key=lambda item: -len(item[0])):
        printed = printed.replace(folder, name)
    expected, got = shown.rstrip('\n').split('\n'), printed.rstrip('\n').split('\n')
    # A printed line the rules accept is taken as shown, so the diff has only what differs.
    got = [a if _same_line(a, b) else b for a, b in zip(expected, got)] + got[len(expected):]
    if got == expected:
        return None
    return '\n'.join(difflib.unified_diff(expected, got, 'shown', 'printed', lineterm=''))


def _same_line(shown: str, printed: str) -> bool:
    if _SIZE.sub('SIZE', shown).rstrip() != _SIZE.sub('SIZE', printed).rstrip():
        return False
    return all(a[1] == b[1] and abs(float(b[0]) - float(a[0])) <= SIZE_TOLERANCE * float(a[0])
               for a, b in zip(_SIZE.findall(shown), _SIZE.findall(printed)))

"""The README's loader examples, run exactly as printed, each in a fresh interpreter where the
libraries of the other extras cannot be imported, on the output of the README's first command
(the sample dataset: images of four sizes), converted in both formats."""
import re
import subprocess
import sys

import pytest

from tests.helpers import IN_PROCESS, run_cli

README = __file__.rsplit('/tests/', 1)[0] + '/README.md'
SECTIONS = ('## Verify, inspect and load', '## ArrayRecord for JAX and Grain')
EXTRAS = {'tensorflow': 'tensorflow', 'torch': 'torch', 'grain': 'grain'}   # extra: module
OTHERS = ['jax', *EXTRAS.values()]
RUN = '''import atexit, re, sys
for name in {blocked!r}:
    sys.modules[name] = None   # Not installed by this example's extra.
atexit.register(lambda: print('peak RSS KB', re.search(r'VmHWM:\\s*(\\d+)',
                              open('/proc/self/status').read())[1], file=sys.stderr))
exec(compile({code!r}, 'README.md', 'exec'), {{'__name__': '__main__'}})
'''


def loader_examples() -> list[str]:
    text = open(README).read()
    found = []
    for title in SECTIONS:
        section = text[text.index(title):]
        section = section[:section.index('\n## ', len(title))]
        found += re.findall(r'^```python\n(.*?)^```', section, re.S | re.M)
    return found


def _extra(code: str) -> str:
    return re.search(r"pip install -e '\.\[(\w+)\]'", code)[1]


@pytest.fixture(scope='module')
def sample(tmp_path_factory):
    folder = tmp_path_factory.mktemp('readme')
    result = run_cli('--output_format=tfrecord,array_record', *IN_PROCESS, cwd=folder)
    assert result.returncode == 0, result.stderr
    return folder


def test_the_readme_shows_a_loader_for_each_reader():
    assert sorted(_extra(code) for code in loader_examples()) == [
        'grain', 'tensorflow', 'tensorflow', 'torch']


@pytest.mark.parametrize('code', loader_examples(), ids=lambda code: _extra(code))
def test_a_readme_loader_runs_as_printed_and_gives_fixed_size_batches(sample, code):
    extra = _extra(code)
    blocked = [m for m in OTHERS if m != EXTRAS[extra]]
    result = subprocess.run([sys.executable, '-c', RUN.format(blocked=blocked, code=code)],
                            cwd=sample, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    shape = '[32, 3, 224, 224]' if extra == 'torch' else '(32, 224, 224, 3)'
    assert shape in result.stdout
    if extra == 'grain':   # 100 batches of a dataset that repeats forever, in bounded memory.
        peak_kb = int(re.search(r'peak RSS KB (\d+)', result.stderr)[1])
        assert peak_kb < 1_000_000

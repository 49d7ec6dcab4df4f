"""Every shell and Python block of README.md and docs/ runs as printed, or is marked
`<!-- not run: REASON -->` on the line before it. Blocks run in a fresh folder each, a block that
is one `python -m pipeline.run` command in this process (helpers.cli), any other in a process of
its own, with `/data/` standing for a folder of small generated inputs (flowers/ in the
folder layout, flowers.zip, train.csv, validation.csv, classes.txt) and `sample_tfrecords` (or
OUTPUT_DIR) for the sample dataset converted in both formats, its TFRecord shards indexed for
DALI; a loader block runs where the libraries of the other extras cannot be imported (the DALI
loader where nvidia.dali can be imported), a Dataflow dry run where there are no Google Cloud
credentials. A block's output block (tests/doc_blocks.py) is compared with what it prints."""
import ast
import contextlib
import csv
import glob
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

from pipeline.sample_data import write_sample_dataset
from tests import doc_blocks
from tests.helpers import Answer, cli

EXTRAS = {'tensorflow': 'tensorflow', 'torch': 'torch', 'grain': 'grain'}   # extra: module
OTHERS = ['jax', *EXTRAS.values()]
RUN_PYTHON = '''import atexit, re, sys
for name in {blocked!r}:
    sys.modules[name] = None   # Not installed by this example's extra.
atexit.register(lambda: print('peak RSS KB', re.search(r'VmHWM:\\s*(\\d+)',
                              open('/proc/self/status').read())[1], file=sys.stderr))
exec(compile({code!r}, {name!r}, 'exec'), {{'__name__': '__main__'}})
'''


def _runnable() -> list[doc_blocks.Block]:
    """The unmarked blocks, a block printed on several pages once."""
    unique = {}
    for block in doc_blocks.all_blocks():
        if block.not_run is None:
            unique.setdefault((block.language, block.code), block)
    return list(unique.values())


RUNNABLE = _runnable()


def _extra(code: str) -> str | None:
    found = re.search(r"pip install -e '\.\[(\w+)\]'", code)
    return found and found[1]


def _unlisted(code: str) -> str | None:
    """The module a block imports that no extra of setup.py installs: NVIDIA DALI."""
    return 'nvidia.dali' if re.search(r'^(from|import) nvidia\.dali\b', code, re.M) else None


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:   # Its parent package is missing.
        return False


@contextlib.contextmanager
def _without_credentials():
    """This process's environment as on a workstation that has not signed in to Google Cloud:
    no key file, project or storage emulator, and a metadata server that never answers."""
    env = {k: v for k, v in os.environ.items()
           if 'EMULATOR' not in k and k not in ('GOOGLE_APPLICATION_CREDENTIALS',
                                                 'GOOGLE_CLOUD_PROJECT')}
    with socket.socket() as silent:
        silent.bind(('127.0.0.1', 0))
        silent.listen()
        host = f'127.0.0.1:{silent.getsockname()[1]}'
        yield dict(env, GCE_METADATA_HOST=host, GCE_METADATA_IP=host)


@pytest.fixture(scope='module')
def inputs(tmp_path_factory) -> dict:
    """{'data': folder of generated inputs, 'sample': the sample dataset in both formats, its
    TFRecord shards indexed for DALI}."""
    root = tmp_path_factory.mktemp('docs')
    data = root / 'data'
    flowers = write_sample_dataset(str(data / 'flowers'), num_classes=3, per_class=(2, 3))
    shutil.make_archive(str(data / 'flowers'), 'zip', flowers)
    for split, name in (('train', 'train.csv'), ('validation', 'validation.csv')):
        with open(data / name, 'w', newline='') as stream:
            rows = csv.writer(stream)
            rows.writerow(['uri', 'label'])
            for label in sorted(os.listdir(os.path.join(flowers, split))):
                for image in sorted(os.listdir(os.path.join(flowers, split, label))):
                    rows.writerow([f'flowers/{split}/{label}/{image}', label])
    (data / 'classes.txt').write_text(''.join(f'class-{i}\n' for i in range(3)))
    result = cli('--output_format=tfrecord,array_record', '--dali_index', cwd=root)
    assert result.returncode == 0, result.stderr
    return {'data': data, 'sample': root / 'sample_tfrecords'}


def run_block(block: doc_blocks.Block, inputs: dict, work) -> Answer | subprocess.CompletedProcess:
    """Runs the block in `work`, with /data/ and the sample dataset substituted."""
    data = work / 'data'
    data.mkdir()
    for name in os.listdir(inputs['data']):
        os.symlink(inputs['data'] / name, data / name)
    code = block.code.replace('/data/', f'{data}/').replace("'/data'", repr(str(data)))
    if 'sample_tfrecords' in code or 'OUTPUT_DIR' in code:
        os.symlink(inputs['sample'], work / 'sample_tfrecords')
        code = code.replace('OUTPUT_DIR', 'sample_tfrecords')
    if 'dataflow_templates/' in code:   # Run from the repository's root.
        os.symlink(os.path.join(doc_blocks.REPO, 'dataflow_templates'), work / 'dataflow_templates')
    if block.language != 'python':
        flags = doc_blocks.converter_flags(code)
        if flags and any(flag.startswith('--dry_run') for flag in flags):   # Offline, as shown.
            with _without_credentials() as env:   # Google's libraries read it at import.
                return doc_blocks.run_shell(code, work, env=env)
        return doc_blocks.run_shell(code, work) if flags is None else cli(*flags, cwd=work)
    extra = _extra(code)
    blocked = [module for module in OTHERS if extra and module != EXTRAS[extra]]
    return subprocess.run([sys.executable, '-c', RUN_PYTHON.format(blocked=blocked, code=code, name=block.name)],
                          cwd=work, capture_output=True, text=True, timeout=600,
                          env=doc_blocks.environment())


def _param(block: doc_blocks.Block):
    """The block as a test case: skipped, saying why, where a module it needs is missing."""
    unlisted, marks = _unlisted(block.code), []
    if unlisted and not _importable(unlisted):
        marks = [pytest.mark.skip(reason=f'{block.name} imports {unlisted}, which no extra '
                                  'installs and which cannot be imported here (NVIDIA DALI: pip '
                                  'install nvidia-dali-cuda120)')]
    return pytest.param(block, id=block.name, marks=marks)


@pytest.mark.slow
@pytest.mark.parametrize('block', [_param(block) for block in RUNNABLE])
def test_a_documented_block_runs_as_printed(block, inputs, tmp_path):
    unlisted = _unlisted(block.code)
    result = run_block(block, inputs, tmp_path)
    assert result.returncode == 0, f'{block.name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}'
    if block.output:
        difference = doc_blocks.compare(block.output.text, result.stdout,
                                        {str(tmp_path / 'data'): '/data'})
        if difference:
            pytest.fail(f'{block.name} printed other than its output block at '
                        f'{block.output.path}:{block.output.line} shows:\n{difference}')
    extra = _extra(block.code)
    if block.language == 'python' and (extra or unlisted):   # A loader: fixed-size batches.
        shapes = {'torch': '[32, 3, 224, 224]', 'nvidia.dali': '(32, 3, 224, 224)'}
        shape = shapes.get(extra or unlisted, '(32, 224, 224, 3)')
        assert shape in result.stdout
    if extra == 'grain':   # 100 batches of a dataset that repeats forever, in bounded memory.
        assert int(re.search(r'peak RSS KB (\d+)', result.stderr)[1]) < 1_000_000
    if doc_blocks.INSTALL.search(block.code) and block.code.rstrip().endswith('pipeline.run'):   # The sample.
        assert os.path.isfile(tmp_path / 'sample_tfrecords' / 'dataset_info.json')
        assert 'tfds.builder_from_directory' in result.stdout   # How to load it.


def test_the_readme_holds_the_two_commands():
    readme = {block.code.strip(): block for block in doc_blocks.blocks('README.md')}
    sample = ("python3 -m venv .venv && .venv/bin/pip install -q -e '.[tensorflow,report]' && "
              ".venv/bin/python -m pipeline.run")
    with open(os.path.join(doc_blocks.REPO, '.ci', 'run')) as stream:
        tests = stream.read().strip().splitlines()[-1]
    assert readme[sample].not_run is None and tests in readme
    assert os.path.getsize(os.path.join(doc_blocks.REPO, 'README.md')) <= 15_000


def test_every_not_run_marker_stands_before_a_block():
    for path in doc_blocks.pages():
        with open(os.path.join(doc_blocks.REPO, path)) as stream:
            text = stream.read()
        markers = len(re.findall(r'^<!-- not run: ', text, re.M))
        assert markers == sum(block.not_run is not None for block in doc_blocks.blocks(path)), path
        markers = len(re.findall(r'^<!-- not compared: ', text, re.M))
        assert markers == sum(output.not_compared is not None
                              for output in doc_blocks.outputs(path)), path


def test_every_output_block_is_compared_with_what_its_block_prints():
    """A `text` block is the output of the runnable block right before it, or is marked."""
    for path in doc_blocks.pages():
        runnable = {block.line for block in doc_blocks.blocks(path) if block.not_run is None}
        for output in doc_blocks.outputs(path):
            assert output.not_compared or output.of_line in runnable, (
                f'{path}:{output.line}: a text block that is not the output of a block the test '
                'runs (nothing but one line ending with a colon between them); mark it '
                '<!-- not compared: REASON -->')


def test_an_output_block_fails_on_a_number_that_differs():
    [block] = [block for block in doc_blocks.blocks('docs/cloud.md') if block.output]
    shown = block.output.text
    steps = re.search(r'Job graph: (\d+) steps', shown)[1]
    package = int(re.search(r'workflow\.tar\.gz \((\d+) KB\)', shown)[1])
    printed = shown.replace(doc_blocks.PATH_SHOWN, '/home/someone/clone')
    assert doc_blocks.compare(shown, printed, {'/home/someone/clone': doc_blocks.PATH_SHOWN}) is None
    one_more = shown.replace(f'{steps} steps', f'{int(steps) + 1} steps')
    changed = doc_blocks.compare(shown, one_more, {}).splitlines()[2:]   # After the diff's header.
    assert [line[:12] for line in changed if line[:1] in '+-'] == ['-Job graph: ', '+Job graph: ']
    for size, same in ((package * 1.2, True), (package * 1.3, False), (package * 0.7, False)):
        resized = shown.replace(f'({package} KB)', f'({size:.0f} KB)')
        assert (doc_blocks.compare(shown, resized, {}) is None) == same, size
    assert doc_blocks.compare(shown, shown.replace('\n', '\n\n', 1), {}) is not None


def test_the_docs_show_a_loader_for_each_reader():
    loaders = [_extra(block.code) or _unlisted(block.code)
               for block in doc_blocks.blocks('docs/loading.md')
               if block.language == 'python' and block.not_run is None]
    assert sorted(loaders) == ['grain', 'nvidia.dali', 'tensorflow', 'tensorflow', 'torch']


@pytest.mark.slow
def test_the_docs_count_the_samples_records_as_it_has_them(inputs):
    with open(inputs['sample'] / 'summary.json') as stream:
        train = json.load(stream)['splits']['train']['records']
    with open(os.path.join(doc_blocks.REPO, 'docs', 'performance.md')) as stream:
        shown = int(re.search(r'on the sample \((\d+) training images\)', stream.read())[1])
    assert shown == train, f'docs/performance.md: the sample has {train} training images, not {shown}'


def _anchors(path: str) -> set[str]:
    """GitHub's anchors of a Markdown page's headings."""
    with open(path) as stream:
        text = re.sub(r'^```.*?^```', '', stream.read(), flags=re.S | re.M)
    return {re.sub(r'[^\w\- ]', '', title.strip().lower()).replace(' ', '-')
            for title in re.findall(r'^#+ (.*)$', text, re.M)}


def test_every_link_between_the_pages_leads_somewhere():
    results = glob.glob(os.path.join(doc_blocks.REPO, 'benchmarks', 'results', '*.md'))
    for page in [*doc_blocks.pages(), 'CHANGELOG.md', *results]:
        path = os.path.join(doc_blocks.REPO, page)
        with open(path) as stream:
            links = re.findall(r'\]\(([^)\s]+)\)', stream.read())
        for link in links:
            if re.match(r'\w+://', link):
                continue
            target, _, anchor = link.partition('#')
            target = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
            assert os.path.exists(target), f'{page}: {link}'
            if anchor:
                assert anchor in _anchors(target), f'{page}: {link}'


def test_the_benchmarks_import_nothing_from_the_tests():
    """docs/design/layout.md: what tests and benchmarks share is in pipeline/testing/."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = []
    for path in sorted(glob.glob(os.path.join(root, 'benchmarks', '**', '*.py'), recursive=True)):
        with open(path) as stream:
            tree = ast.parse(stream.read())
        for node in ast.walk(tree):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ''] if isinstance(node, ast.ImportFrom) else [])
            found += [f'{os.path.relpath(path, root)}: {name}' for name in names
                      if name == 'tests' or name.startswith('tests.')]
    assert found == []

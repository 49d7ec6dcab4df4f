"""The Pythons setup.py declares (PYTHONS), proved where the suite cannot afford it:

    python -m benchmarks.python_versions [--python 3.13 ...]

For each Python asked for (default: the newest of PYTHONS), found on this machine by find_python,
it makes a virtual environment, installs this checkout into it from the package registry (a
minute or more: hence outside the suite), runs the first command a user runs there (the
generated sample, no flags), converts one generated sample folder, and compares every output
byte with this interpreter's conversion of the same folder. One line a Python; exits 1 if
any fails or cannot be found. tests/test_python_range.py checks the cheap half in the suite:
the declared range, the Flex image's Python, and pip refusing the Python below the range.
"""
import argparse
import ast
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from pipeline.testing.datasets import output_files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def declared(name: str) -> str | tuple[str, ...]:
    """A constant of setup.py (PYTHONS, FLEX_PYTHON, ...), read without running setup.py."""
    value = re.search(rf'^{name} = (.+)$', open(os.path.join(REPO, 'setup.py')).read(), re.M)[1]
    return ast.literal_eval(value)


def find_python(version: str) -> str | None:
    """The newest interpreter of `version` (e.g. '3.13') on this machine: pyenv's versions
    (Debian's apt has 3.11 only on bookworm), else pythonX.Y on PATH; None if there is none."""
    root = os.environ.get('PYENV_ROOT', os.path.expanduser('~/.pyenv'))
    found = sorted(glob.glob(os.path.join(root, 'versions', f'{version}.*', 'bin', f'python{version}')),
                   key=lambda path: [int(part) for part in re.findall(r'\d+', path.split('versions')[-1])[:3]])
    if found:
        return found[-1]
    on_path = shutil.which(f'python{version}')
    if on_path and subprocess.run([on_path, '-c', ''], capture_output=True).returncode == 0:
        return on_path   # A pyenv shim of a version pyenv lacks fails here.
    return None


def _convert(python: str, folder: str, env: dict, *flags: str) -> subprocess.CompletedProcess:
    """`python -m pipeline.run FLAGS` in `folder` (no flags: the generated sample into
    folder/sample_tfrecords)."""
    return subprocess.run([python, '-m', 'pipeline.run', *flags], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=900)


def prove(version: str, scratch: str, inputs: str, reference: dict[str, bytes]) -> str:
    """Installs this checkout with Python `version`, runs the sample and converts `inputs`; a
    line saying how it went (starting 'ok' or 'FAILED')."""
    python = find_python(version)
    if python is None:
        return f'FAILED {version}: no python{version} on this machine'
    venv = os.path.join(scratch, f'venv-{version}')
    subprocess.run([python, '-m', 'venv', venv], check=True)
    started = time.monotonic()
    install = subprocess.run([os.path.join(venv, 'bin', 'pip'), 'install', '-q', REPO],
                             capture_output=True, text=True, timeout=1800)
    installed = time.monotonic() - started
    if install.returncode:
        return f'FAILED {version}: pip install: {install.stderr.strip().splitlines()[-1]}'
    folder = os.path.join(scratch, f'run-{version}')
    os.makedirs(folder)
    # The installed package, not this checkout: a run from another folder, no PYTHONPATH.
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    python = os.path.join(venv, 'bin', 'python')
    sample = _convert(python, folder, env)
    if sample.returncode or 'Wrote dataset to sample_tfrecords' not in sample.stdout:
        return f'FAILED {version}: the sample: {sample.stderr.strip()[-500:]}'
    result = _convert(python, folder, env, f'--input_dir={inputs}', '--output_dir=out')
    if result.returncode:
        return f'FAILED {version}: conversion: {result.stderr.strip()[-500:]}'
    written = output_files(os.path.join(folder, 'out'))
    if written != reference:
        differ = sorted(k for k in set(written) | set(reference) if written.get(k) != reference.get(k))
        return f'FAILED {version}: output differs from Python {sys.version.split()[0]}: {differ}'
    return (f'ok {version}: installed in {installed:.0f} s, the sample converted, and a '
            f'conversion\'s {len(written)} files equal to Python {sys.version.split()[0]}\'s')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--python', action='append', help='X.Y (repeat; default: the newest of '
                        "setup.py's PYTHONS)")
    args = parser.parse_args(argv)
    from pipeline.sample_data import write_sample_dataset
    with tempfile.TemporaryDirectory() as scratch:
        inputs = os.path.join(scratch, 'inputs')
        write_sample_dataset(inputs)
        result = _convert(sys.executable, scratch, dict(os.environ, PYTHONPATH=REPO),
                          f'--input_dir={inputs}', '--output_dir=reference')
        if result.returncode:
            print(f'FAILED: the reference conversion: {result.stderr.strip()[-500:]}')
            return 1
        reference = output_files(os.path.join(scratch, 'reference'))
        lines = [prove(version, scratch, inputs, reference)
                 for version in args.python or [declared('PYTHONS')[-1]]]
    print('\n'.join(lines))
    return 0 if all(line.startswith('ok') for line in lines) else 1


if __name__ == '__main__':
    sys.exit(main())

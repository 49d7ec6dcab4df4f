"""Fuzzes what verify reads beside the shards: `python -m benchmarks.fuzz_verify_metadata
[--seconds 300] [--seed 0]`.

A small dataset (copies within a split, a near-duplicate across splits, a damaged JPEG skipped,
DALI indexes) is converted once; then, until the time is up, its summary.json and leakage.jsonl
are mutated (a value anywhere in them replaced by one of another type, size or depth, a key
dropped or added, a line duplicated, dropped, cut or replaced by other JSON or bytes) and
verify's main runs on it in this process. Each run must end as verify promises: exit 0 or 1
(never an exception), every line of stderr one problem that names a file of the dataset (or the
one line counting those not shown), printable and at most LINE_LIMIT characters, and this
process's peak memory within MEMORY_LIMIT of its peak before the runs. The suite runs it for a
few seconds (tests/test_verify_consistency.py).
"""
import argparse
import json
import os
import random
import re
import resource
import shutil
import sys
import tempfile
import time

from PIL import Image

from pipeline.testing import imagemaker
from pipeline.testing.datasets import convert, run_verify, write_tree

LINE_LIMIT = 1000
MEMORY_LIMIT = 300 << 20
# Where a problem line starts: a file of the dataset, a shard, or the count of those not shown.
_NAMED = re.compile(r'(summary\.json|leakage\.jsonl|dataset_info\.json|features\.json|'
                    r'labels\.txt|image\.class\.label\.labels\.txt|(errors|damaged)-\w+\.jsonl|'
                    r'dataset-\w+\.tfrecord-\d+-of-\d+(\.idx)?|(train|validation|test)( shard |: )|'
                    r'\.\.\. and \d+ more problem)')


def _photo(seed: int, quality: int = 90) -> bytes:
    return imagemaker.encode(Image.fromarray(imagemaker.photo(48 + seed % 5, 36, seed=seed)),
                             'JPEG', quality=quality)


def make_dataset(folder: str) -> str:
    """Converts the fuzzer's dataset under `folder`; returns its output folder."""
    files = {f'train/c{i % 2}/{i}.jpg': _photo(i) for i in range(10)}
    files.update({'train/c0/copy.jpg': files['train/c0/0.jpg'],
                  'test/c0/near.jpg': _photo(4, quality=40), 'test/c1/t.jpg': _photo(20)})
    whole = _photo(50)
    files['train/c0/broken.jpg'] = whole[:len(whole) // 2] + bytes(len(whole) - len(whole) // 2)
    out = os.path.join(folder, 'ds')
    convert(f'--input_dir={write_tree(os.path.join(folder, "in"), files)}',
            f'--output_dir={out}', '--num_shards=2', '--dali_index', '--max_error_ratio=0.5')
    return out


def _values(rng: random.Random, document) -> list:
    """Replacement values: of every JSON type, large and deep ones, and parts of the document."""
    depth = rng.choice([2, 50, 300])
    deep = []
    for _ in range(depth):
        deep = [deep]
    return [None, True, False, 0, -1, 1, 2**63, 10**400 // 10**380, 1.5, float('inf'), '', 'x',
            'x' * rng.choice([10, 10_000]), '0123456789abcdef', 'drop', 'off', 'fail', 'keep',
            'reencode', [], {}, [1, 'a', None], deep,
            {'band': 'x'}, [{'band': 0, 'value': 1, 'images': 2}], _part(rng, document)]


def _copied(document):
    return json.loads(json.dumps(document))


def _part(rng: random.Random, document):
    """A random value found in `document`."""
    while isinstance(document, (dict, list)) and document and rng.random() < 0.7:
        document = rng.choice(list(document.values()) if isinstance(document, dict) else document)
    return _copied(document)


def _mutate_json(rng: random.Random, document):
    """`document` with one value replaced, one key dropped or one key added, somewhere."""
    document = _copied(document)
    parent = document
    while True:
        if not isinstance(parent, (dict, list)) or not parent:
            return rng.choice(_values(rng, document))
        keys = list(parent) if isinstance(parent, dict) else list(range(len(parent)))
        key = rng.choice(keys)
        child = parent[key]
        if isinstance(child, (dict, list)) and child and rng.random() < 0.6:
            parent = child
            continue
        action = rng.random()
        if action < 0.15 and isinstance(parent, dict):
            del parent[key]
        elif action < 0.25 and isinstance(parent, dict):
            parent[rng.choice(['extra', 'clusters', 'exact_copies', 'dali_index'])] = rng.choice(
                _values(rng, document))
        else:
            parent[key] = rng.choice(_values(rng, document))
        return document


def _mutate_lines(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    lines = list(lines)
    action = rng.random()
    if not lines or action < 0.15:
        return lines + [rng.choice([b'{}\n', b'[]\n', b'x\n', b'\xff\xfe\n', b'{"members": {}}\n',
                                    lines[0] if lines else b'\n'])]
    at = rng.randrange(len(lines))
    if action < 0.3:
        return lines[:at] + lines[at + 1:]
    if action < 0.4:
        return lines + [lines[at]]
    if action < 0.5:
        return lines[:at] + [lines[at][:rng.randrange(len(lines[at]))]] + lines[at + 1:]
    try:
        mutated = json.dumps(_mutate_json(rng, json.loads(lines[at]))).encode() + b'\n'
    except ValueError:   # A line cut by an earlier mutation.
        mutated = rng.randbytes(rng.randrange(1, 100)) + b'\n'
    return lines[:at] + [mutated] + lines[at + 1:]


def _check(code: int, err: str) -> None:
    """verify's promise on a mutated dataset."""
    assert code in (0, 1), (code, err[:2000])
    for line in err.splitlines():
        assert _NAMED.match(line) and len(line) <= LINE_LIMIT and line.isprintable(), line[:300]


def fuzz(dataset: str, seconds: float, seed: int = 0) -> int:
    """Runs verify on mutations of `dataset`'s summary.json and leakage.jsonl (in a copy) for
    `seconds`; asserts each run's promise; returns how many runs there were."""
    rng = random.Random(seed)
    work = tempfile.mkdtemp(prefix='fuzz-verify-')
    try:
        shutil.rmtree(work)
        shutil.copytree(dataset, work)
        with open(os.path.join(dataset, 'summary.json')) as stream:
            summary = json.load(stream)
        with open(os.path.join(dataset, 'leakage.jsonl'), 'rb') as stream:
            leakage = stream.readlines()
        baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        runs, ends = 0, time.monotonic() + seconds
        while time.monotonic() < ends:
            mutated, lines = summary, leakage
            for _ in range(rng.randint(1, 3)):
                if rng.random() < 0.6:
                    mutated = _mutate_json(rng, mutated)
                else:
                    lines = _mutate_lines(rng, lines)
            with open(os.path.join(work, 'summary.json'), 'w') as stream:
                json.dump(mutated, stream)
            with open(os.path.join(work, 'leakage.jsonl'), 'wb') as stream:
                stream.writelines(lines)
            result = run_verify(work)
            _check(result.returncode, result.stderr)
            runs += 1
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        assert peak - baseline < MEMORY_LIMIT, (baseline, peak)
        return runs
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--seconds', type=float, default=300)
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        runs = fuzz(make_dataset(folder), args.seconds, args.seed)
    print(f'{runs} runs of verify on mutated metadata, each as promised')
    return 0


if __name__ == '__main__':
    sys.exit(main())

"""The error and damaged-JPEG entries of a split go through files (transforms/entries.py), never
all at once through memory, and the reports are the same bytes whatever the workers or a kill."""
import hashlib
import json
import glob
import os
import signal
import subprocess
import sys
import tracemalloc

import pytest

from pipeline.testing import imagemaker
from tests.helpers import IN_PROCESS, cli, killed_at, output_files, write_tree
from transforms import entries

KINDS = ('good', 'bad', 'trunc', 'gone', 'dup', 'nolabel', 'fields', 'zeroed')


def _hostile(root) -> str:
    """Two CSV splits of 16 inputs: photos, a text, truncated JPEGs, missing files, an input
    listed twice, no label, a line of three fields, JPEGs whose second half is zeros."""
    files = {}
    for split in ('train', 'test'):
        lines = ['uri,label']
        for i in range(16):
            kind, name = KINDS[i % 8], f'{split}_{KINDS[i % 8]}{i}.jpg'
            jpeg = imagemaker.jpeg(48, 32, seed=i + 100 * len(split))
            big = imagemaker.jpeg(192, 144, seed=i)
            files[name] = {'bad': b'not an image', 'trunc': jpeg[:len(jpeg) // 2],
                           'zeroed': big[:len(big) // 2] + bytes(len(big) - len(big) // 2),
                           }.get(kind, jpeg)
            if kind == 'gone':
                del files[name]
            lines.append({'nolabel': f'{name},', 'fields': f'{name},c{i % 3},x'}.get(
                kind, f'{name},c{i % 3}'))
            if kind == 'dup':
                lines.append(lines[-1])
        files[f'{split}.csv'] = ('\n'.join(lines) + '\n').encode()
    return write_tree(root, files)


def _flags(root: str, out: str, *flags: str) -> list[str]:
    """Without the check for copies across splits (--leakage=off): what is tested is the error
    and damaged-JPEG reports, and the check's Beam stages take half of a small conversion's time."""
    return [f'--csv_train={root}/train.csv', f'--csv_test={root}/test.csv', f'--output_dir={out}',
            '--num_shards=3', '--skip_duplicates', '--max_error_ratio=1',
            '--direct_running_mode=in_memory', '--leakage=off', *flags]


def _convert(root: str, out: str, *flags: str):
    return cli(*_flags(root, out, *flags))


def _killed_at(point: str, root: str, out: str, *flags: str) -> None:
    """The conversion in a process of its own, killed at `point`."""
    assert killed_at(point, *_flags(root, out, *flags)).returncode == -signal.SIGKILL


CSV_FIELDS = ('3 fields, expected 2 (uri,label); name further columns in the header line to '
              'make them features')
ZEROED = ('damaged JPEG: Premature end of JPEG file (strict libjpeg-turbo; --damaged_images=keep '
          'or reencode converts such files)')


def _expected_errors(root: str) -> list[tuple]:
    """errors-train.jsonl of _hostile(root), as the commit wrote it when it held the entries in
    memory: sorted by (source, reason)."""
    return [
        (f'{root}/train.csv:18', f'{root}/train.csv line 18: {CSV_FIELDS}'),
        (f'{root}/train.csv:9', f'{root}/train.csv line 9: {CSV_FIELDS}'),
        (f'{root}/train_bad1.jpg', 'not an image Pillow can read (cannot identify image file)'),
        (f'{root}/train_bad9.jpg', 'not an image Pillow can read (cannot identify image file)'),
        (f'{root}/train_dup12.jpg', 'duplicate: listed more than once'),
        (f'{root}/train_dup4.jpg', 'duplicate: listed more than once'),
        (f'{root}/train_gone11.jpg', 'cannot read file: No such file or directory'),
        (f'{root}/train_gone3.jpg', 'cannot read file: No such file or directory'),
        (f'{root}/train_nolabel13.jpg', f'{root}/train.csv line 17: no label'),
        (f'{root}/train_nolabel5.jpg', f'{root}/train.csv line 8: no label'),
        (f'{root}/train_trunc10.jpg', 'cannot decode image: Truncated File Read'),
        (f'{root}/train_trunc2.jpg', 'cannot decode image: Truncated File Read'),
        (f'{root}/train_zeroed15.jpg', ZEROED),
        (f'{root}/train_zeroed7.jpg', ZEROED),
    ]


def _report(path: str) -> list[tuple]:
    return [tuple(v for k, v in json.loads(line).items() if k != 'split') for line in open(path)]


@pytest.mark.slow
def test_reports_hold_every_entry_sorted_the_same_for_any_workers_and_after_a_kill(tmp_path):
    root = _hostile(tmp_path / 'in')
    one, two, resumed = (str(tmp_path / name) for name in ('one', 'two', 'resumed'))
    assert _convert(root, one, *IN_PROCESS).returncode == 0
    assert _report(f'{one}/errors-train.jsonl') == _expected_errors(root)
    assert _report(f'{one}/damaged-train.jsonl') == [
        (f'{root}/train_zeroed15.jpg', ZEROED, 'skip'), (f'{root}/train_zeroed7.jpg', ZEROED, 'skip')]
    assert open(f'{one}/errors-train.jsonl').readline() == json.dumps(
        {'split': 'train', 'source': f'{root}/train.csv:18',
         'reason': f'{root}/train.csv line 18: {CSV_FIELDS}'}) + '\n'
    summary = json.load(open(f'{one}/summary.json'))
    assert [summary['splits'][s]['skipped'] for s in ('train', 'test')] == [14, 14]
    assert [summary['splits'][s]['damaged'] for s in ('train', 'test')] == [2, 2]
    for name, digest in summary['digests'].items():
        assert hashlib.sha256(open(f'{one}/{name}', 'rb').read()).hexdigest() == digest, name
    assert _convert(root, two, '--direct_running_mode=in_memory', '--direct_num_workers=2').returncode == 0
    _killed_at('chunk:2', root, resumed, *IN_PROCESS)
    assert _convert(root, resumed, *IN_PROCESS).returncode == 0
    expected = output_files(one)
    assert output_files(two) == expected and output_files(resumed) == expected


@pytest.mark.slow
def test_a_hard_linked_entry_part_is_remade_and_the_file_outside_untouched(tmp_path):
    root = _hostile(tmp_path / 'in')
    clean, out = str(tmp_path / 'clean'), str(tmp_path / 'out')
    assert _convert(root, clean, *IN_PROCESS).returncode == 0
    _killed_at('chunk:1', root, out, *IN_PROCESS)
    part = sorted(glob.glob(f'{out}/.tmp-*/parts/*.tfrecord.errors.jsonl'))[0]
    outside = tmp_path / 'outside.txt'
    outside.write_bytes(b'["/not/an/input.jpg", "planted"]\n')
    os.unlink(part)
    os.link(outside, part)
    before = outside.read_bytes()
    assert _convert(root, out, *IN_PROCESS).returncode == 0
    assert outside.read_bytes() == before
    assert output_files(out) == output_files(clean)


def test_the_commit_merges_entry_files_a_line_at_a_time(tmp_path, monkeypatch):
    """6,000 entries in 5 part files, merged through rounds of 2 files at once into a report:
    the merge holds a few entries, not the 1.2 MB they take in memory."""
    monkeypatch.setattr(entries, 'FAN_IN', 2)
    parts = [str(tmp_path / f'part{p}') for p in range(5)]
    for p, part in enumerate(parts):
        entries.write(part, 'errors', ((f'/data/img{i:07d}.jpg', f'reason {p}')
                                       for i in range(p, 6_000, 5)))
    tracemalloc.start()
    merged = entries.merged([entries.entry_path(p, 'errors') for p in parts], str(tmp_path / 'm'))
    count, digest = entries.write_report(str(tmp_path / 'report'), merged,
                                         lambda e: f'{e[0]} {e[1]}\n'.encode())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert count == 6_000 and peak < 256 << 10
    lines = open(tmp_path / 'report', 'rb').read()
    assert hashlib.sha256(lines).hexdigest() == digest
    assert lines.splitlines()[:2] == [b'/data/img0000000.jpg reason 0',
                                      b'/data/img0000001.jpg reason 1']
    assert lines.splitlines() == sorted(lines.splitlines())


@pytest.mark.slow
def test_the_reports_of_many_shards_are_merged_under_a_low_open_file_limit(tmp_path):
    """Each report merges up to entries.FAN_IN of its shards' entry files at once: the commit
    merges one such report at a time, so a run under 256 open files (macOS's default) commits."""
    files = {}
    for split in ('train', 'validation', 'test'):
        for i in range(256):   # A damaged JPEG (skipped) and a text in each shard.
            jpeg = imagemaker.jpeg(192, 144, seed=i)
            files[f'{split}/c{i % 2}/{i}.jpg'] = jpeg[:len(jpeg) // 2] + bytes(len(jpeg) // 2)
            files[f'{split}/c{i % 2}/{i}.txt.jpg'] = b'not an image'
            files[f'{split}/c{i % 2}/{i}.ok.jpg'] = imagemaker.jpeg(48, 32, seed=i)
    root = write_tree(tmp_path / 'in', files)
    command = (f'ulimit -n 256 && exec "{sys.executable}" -m pipeline.run --input_dir={root} '
               f'--output_dir={tmp_path}/out --num_shards=128 --max_error_ratio=0.99 '
               '--leakage=off')
    result = subprocess.run(['sh', '-c', command], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    for split in ('train', 'validation', 'test'):
        report = output_files(f'{tmp_path}/out')
        assert len(report[f'errors-{split}.jsonl'].splitlines()) == 512
        assert len(report[f'damaged-{split}.jsonl'].splitlines()) == 256

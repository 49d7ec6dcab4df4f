"""WebDataset shards as input (`--webdataset SPLIT=PATTERN`): shards written by webdataset's own
writer, converted through the command line, read back."""
import gzip
import io
import json
import os
import signal
import sys
import tarfile

import numpy as np
import pytest
from braceexpand import braceexpand

from pipeline.inputs import brace_patterns, webdataset_shards
from pipeline.inputs.archives import Archive
from pipeline.inputs.folder_layout import NOT_UTF8
from pipeline.output import records
from pipeline.testing import imagemaker
from pipeline.testing.gcs_servers import BUCKET, download, upload
from tests.helpers import (
    IN_PROCESS, cli, killed_at, output_files, plain_records, plain_split, run_measured)
from tests.test_gcs import through_proxy
from tests.test_parquet_hardening import _records

# Conversions run without the check for copies across splits (--leakage=off), but those of the
# brace-pattern test (pixels and labels end to end) and the measured one: what is tested is
# reading shards, and the check's Beam stages take half of a small conversion's time.
NO_LEAKAGE_CHECK = '--leakage=off'

PATTERNS = ['train-{000000..000012}.tar', '{07..10}', '{-05..3}', '{0..3}', '{4..1}', '{2..-1}',
            '{a..g..2}', '{e..a..2}', '{Z..a}', 'a{1..3}b{x,y}', 'python{2.{5..7},3.{2,3}}',
            'index.html{,.backup}', r'{1\{2,3}', 'x{}y', '{x}', '{{x,y}}', '{a,{b,c}d}',
            'gs://b/p/{00..10..5}-{a,b}.tar.gz', '{1..10..0}', 'plain.tar',
            # An escaped backslash inside braces escapes the character after them.
            r'-1A\{/{9\\}', r'{a,b\\}c', r'x\\{1,2}\\']


@pytest.mark.parametrize('pattern', PATTERNS)
def test_brace_patterns_expand_as_braceexpand_does(pattern):
    assert brace_patterns.expand(pattern) == list(braceexpand(pattern))


@pytest.mark.parametrize('given,error', [
    (['train=a{1..2.tar'], "--webdataset train=a{1..2.tar: unbalanced braces in 'a{1..2.tar'"),
    (['a-{0..1}.tar'], '--webdataset a-{0..1}.tar: expected SPLIT=PATTERN, e.g. '
                       'train=/data/train-{000000..000146}.tar'),
    (['val=a.tar'], "--webdataset val=a.tar: 'val' is no split; splits are train, validation, "
                    'test'),
    (['train=a-{0,1}.zip'], '--webdataset train=a-{0,1}.zip: a-0.zip is not a .tar, .tar.gz or '
                            '.tgz file; a WebDataset shard is a tar'),
    (['train=a-{0..2}.tar', 'test=a-2.tar'], '--webdataset test=a-2.tar: shard a-2.tar is given '
                                             'again (first by --webdataset train=a-{0..2}.tar); '
                                             'give each shard once'),
])
def test_shard_lists_refuse_what_names_no_shard_once(given, error):
    with pytest.raises(Exception) as info:
        webdataset_shards.shard_lists(given)
    assert str(info.value) == error


def test_a_pattern_that_stands_for_millions_of_shards_is_refused_in_one_line(tmp_path):
    result = cli('--webdataset=train=/data/train-{0..99999999}.tar', f'--output_dir={tmp_path}/out')
    assert result.returncode != 0
    assert ("error: --webdataset train=/data/train-{0..99999999}.tar: '/data/train-{0..99999999}.tar' "
            'stands for 100,000,000 names, more than the 1,000,000 one pattern may; check its '
            'ranges') in result.stderr
    assert not os.path.exists(tmp_path / 'out')


@pytest.mark.slow
def test_labels_that_claim_too_much_are_reported_samples_with_a_bounded_excerpt(tmp_path):
    """A class id of 5,000 digits (past int()'s limit), one of 4,299 (an id far past any class;
    it once failed the run, printing every digit), JSON nested 30,000 deep (past the decoder's
    recursion): each a reported sample, never the run's end."""
    jpeg = imagemaker.jpeg(32, 24, seed=1)
    shard = _tar(tmp_path / 'huge-000000.tar', [
        ('a.jpg', jpeg), ('a.cls', b'0'), ('b.jpg', jpeg), ('b.cls', b'7' * 5000),
        ('c.jpg', jpeg), ('c.cls', b'7' * 4299), ('d.jpg', jpeg), ('d.cls', b'1000000'),
        ('e.jpg', jpeg), ('e.json', b'{"label": ' + b'[' * 30000 + b']' * 30000 + b'}')])
    result = cli(f'--webdataset=train={shard}', f'--output_dir={tmp_path}/out',
                 '--max_error_ratio=1', NO_LEAKAGE_CHECK)
    assert result.returncode == 0, result.stderr
    assert [r[records.FILENAME] for r in _records(f'{tmp_path}/out')] == [[b'a.jpg']]
    with open(f'{tmp_path}/out/errors-train.jsonl') as stream:
        reasons = {e['source']: e['reason'] for e in map(json.loads, stream)}
    sevens = repr('7' * 40)
    assert reasons == {
        f'{shard}/b': f'{shard}: sample b has a label that does not parse: b.cls holds class id '
                      f'{sevens}... (5,000 characters), not below 1,000,000, the bound on class ids',
        f'{shard}/c': f'{shard}: sample c has a label that does not parse: c.cls holds class id '
                      f'{sevens}... (4,299 characters), not below 1,000,000, the bound on class ids',
        f'{shard}/d': f"{shard}: sample d has a label that does not parse: d.cls holds class id "
                      "'1000000', not below 1,000,000, the bound on class ids",
        f'{shard}/e': f'{shard}: sample e has a label that does not parse: e.json is JSON nested '
                      'more than 64 deep'}


def test_shard_lists_keep_the_order_given():
    assert webdataset_shards.shard_lists(['train=a-{08..10}.tar', 'train=b.tar.gz']) == {
        'train': [('a-08.tar', 'train=a-{08..10}.tar'), ('a-09.tar', 'train=a-{08..10}.tar'),
                  ('a-10.tar', 'train=a-{08..10}.tar'), ('b.tar.gz', 'train=b.tar.gz')]}


def _tar(path, members: list[tuple[str, bytes]]) -> str:
    """A tar of (name, bytes) in this order, as a writer other than webdataset's may leave it."""
    with tarfile.open(path, 'w') as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def test_members_make_the_samples_webdataset_makes(tmp_path):
    """Keys, extensions and what is a sample, against webdataset's own grouping of one tar; a
    .cls label before a .json one."""
    import webdataset   # Imports torch: only where a test uses it.
    jpeg = imagemaker.jpeg(8, 8)
    path = _tar(tmp_path / 'odd.tar', [
        ('a/n01.jpg', jpeg), ('a/n01.json', b'{"label": "cat"}'), ('a/n01.CLS', b'1'),
        ('a/n01.seg.png', b'x'),
        ('b.x.y/n02.JPEG', jpeg), ('b.x.y/n02.txt', b'cat'), ('README', b'no key'),
        ('.hidden.jpg', jpeg), ('__meta__', b'{}'), ('n03.webp', b'w'), ('n03.json', b'{}')])
    theirs = [(s['__key__'], sorted(k for k in s if not k.startswith('__')))
              for s in webdataset.WebDataset(path, shardshuffle=False)]
    shard = webdataset_shards.Shard('train', Archive.of_file(path, os.path.getsize(path), 0.0))
    refs = list(shard.examples())
    samples = [r for r in refs if not r.ignored]
    assert [r.key for r in samples] == [f'{path}/{key}' for key, _ in theirs] == [
        f'{path}/a/n01', f'{path}/b.x.y/n02', f'{path}/n03']
    assert [r.label for r in samples] == [1, 'cat', None]
    assert samples[2].problem == (f"{path}: sample n03 has a label that does not parse: n03.json "
                                  "has no field 'label'; --label_field names the field that holds "
                                  'the label')
    assert sorted(r.filename for r in refs if r.ignored) == ['.hidden.jpg', 'README', '__meta__']


def _samples(count: int, classes: int, start: int = 0) -> list[dict]:
    """Samples kNNN: a JPEG (every third a PNG) and a .cls id."""
    made = []
    for i in range(start, start + count):
        image = ('png', imagemaker.png(40, 30, seed=i)) if i % 3 == 2 else (
            'jpg', imagemaker.jpeg(40, 30, seed=i))
        made.append({'__key__': f'k{i:03d}', image[0]: image[1], 'cls': i % classes})
    return made


def _write_shards(pattern: str, samples: list[dict], per_shard: int) -> None:
    import webdataset   # Imports torch: only where a test uses it.
    with webdataset.ShardWriter(pattern, maxcount=per_shard, verbose=0) as writer:
        for sample in samples:
            writer.write(sample)


@pytest.mark.slow
def test_shards_from_brace_patterns_convert_with_pixels_and_labels(tmp_path):
    samples = _samples(9, 3)
    _write_shards(str(tmp_path / 'train-%06d.tar'), samples, 3)
    (tmp_path / 'classes.txt').write_text('cat\ndog\nfox\n')
    beyond = _tar(tmp_path / 'beyond.tar', [('k900.jpg', imagemaker.jpeg(40, 30)),
                                             ('k900.cls', b'3')])
    out = str(tmp_path / 'out')
    flags = [f'--webdataset=train={tmp_path}/train-{{000000..000001}}.tar',
             f'--webdataset=train={tmp_path}/train-000002.tar', f'--webdataset=train={beyond}',
             f'--labels_file={tmp_path}/classes.txt', '--max_error_ratio=0.1']
    result = cli(*flags, f'--output_dir={out}')
    assert result.returncode == 0, result.stderr
    rows = {r[records.FILENAME]: r for r in plain_split(out, 'train')}
    assert len(rows) == 9
    with open(f'{out}/errors-train.jsonl') as stream:
        assert [json.loads(line) for line in stream] == [{
            'split': 'train', 'source': f'{beyond}/k900',
            'reason': f'{beyond}: sample k900 has a label that does not parse: k900.cls holds '
                      f'class id 3, but --labels_file names 3 classes (ids 0-2)'}]
    for i, sample in enumerate(samples):
        kind = 'png' if 'png' in sample else 'jpg'
        row = rows[f'k{i:03d}.{kind}']
        assert (row[records.LABEL], row[records.TEXT]) == (i % 3, ['cat', 'dog', 'fox'][i % 3])
        assert row[records.SOURCE] == f'{tmp_path}/train-{i // 3:06d}.tar/k{i:03d}.{kind}'
        if kind == 'jpg':
            assert row[records.ENCODED] == sample['jpg']   # An RGB JPEG is stored as it is.
        else:
            difference = np.abs(imagemaker.decode(row[records.ENCODED]).astype(int)
                                - imagemaker.decode(sample['png']))
            assert difference.mean() < 8   # Re-encoded: JPEG at q95, 4:2:0.
    summary = json.loads(open(f'{out}/summary.json').read())
    assert summary['splits']['train']['records'] == 9

    missing = cli(f'--webdataset=train={tmp_path}/train-{{000001..000003}}.tar',
                  f'--output_dir={tmp_path}/none')
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1] == (
        f'error: --webdataset train={tmp_path}/train-{{000001..000003}}.tar: shard '
        f'{tmp_path}/train-000003.tar does not exist; fix the pattern or its range')


@pytest.mark.slow
def test_txt_and_json_labels_and_every_bad_sample_is_reported(tmp_path):
    import webdataset   # Imports torch: only where a test uses it.
    jpeg, png = imagemaker.jpeg(40, 30, seed=1), imagemaker.png(40, 30, seed=2)
    with webdataset.TarWriter(str(tmp_path / 'val.tar')) as writer:
        for sample in [
                {'__key__': 'a', 'jpg': jpeg, 'txt': 'dog'},
                {'__key__': 'b', 'jpg': jpeg, 'json': {'name': 'cat'}},
                {'__key__': 'c', 'jpg': jpeg, 'json': {'name': 'cat'}, 'txt': 'dog'},
                {'__key__': 'd', 'jpg': jpeg},
                {'__key__': 'e', 'txt': 'dog'},
                {'__key__': 'f', 'jpg': jpeg, 'png': png, 'txt': 'dog'},
                {'__key__': 'g', 'jpg': jpeg, 'json': b'{oops'},
                {'__key__': 'h', 'png': png, 'txt': 'two\nlines'}]:
            writer.write(sample)
    apart = _tar(tmp_path / 'apart.tar', [('x.jpg', jpeg), ('y.png', png), ('y.txt', b'cat'),
                                           ('x.txt', b'dog'), ('NOTES', b'no key'),
                                           ('caf\udce9.jpg', jpeg), ('caf\udce9.txt', b'cat')])
    out = str(tmp_path / 'out')
    result = cli(f'--webdataset=validation={tmp_path}/val.tar',
                 f'--webdataset=validation={apart}', '--label_field=name',
                 '--max_error_ratio=1', f'--output_dir={out}', NO_LEAKAGE_CHECK)
    assert result.returncode == 0, result.stderr
    rows = sorted((r[records.FILENAME], r[records.LABEL], r[records.TEXT])
                  for r in plain_split(out, 'validation'))
    assert rows == [('a.jpg', 1, 'dog'), ('b.jpg', 0, 'cat'), ('c.jpg', 0, 'cat'),
                    ('y.png', 0, 'cat')]
    with open(f'{out}/errors-validation.jsonl') as stream:
        errors = sorted((e['source'], e['reason']) for e in map(json.loads, stream))
    val = f'{tmp_path}/val.tar'
    with tarfile.open(apart) as tar:
        again = tar.getmember('x.txt').offset_data
    assert errors == sorted([
        (f'{apart}/x', f'{apart}: sample x has no label: give it a .cls (class id), .json '
                       "(field 'name') or .txt (class name) member"),
        (f'{apart}/x//@{again}', f"{apart}: sample x has members apart from its others (x.txt "
                                 "follows another sample's; webdataset reads them as two "
                                 'samples): write the members of a sample one after another'),
        (f'{apart}/caf\\xe9', NOT_UTF8),
        (f'{val}/d', f"{val}: sample d has no label: give it a .cls (class id), .json (field "
                     "'name') or .txt (class name) member"),
        (f'{val}/e', f'{val}: sample e has no image: give it a .jpg, .jpeg, .png or .webp member'),
        (f'{val}/f', f'{val}: sample f has 2 images (f.jpg, f.png): keep one'),
        (f'{val}/g', f'{val}: sample g has a label that does not parse: g.json is not JSON: '
                     'Expecting property name enclosed in double quotes: line 1 column 2 (char 1)'),
        (f'{val}/h', f'{val}: sample h has a label that does not parse: h.txt holds a line '
                     'break or control character; a class name is one line'),
    ])
    summary = json.loads(open(f'{out}/summary.json').read())['splits']['validation']
    assert (summary['records'], summary['skipped'], summary['ignored']) == (4, 8, 1)


@pytest.mark.slow
def test_a_gzip_shard_gives_the_records_of_its_tar(tmp_path):
    _write_shards(str(tmp_path / 'train-%06d.tar'), _samples(6, 2), 6)
    with open(tmp_path / 'train-000000.tar', 'rb') as plain:
        (tmp_path / 'gz').mkdir()
        (tmp_path / 'gz' / 'train-000000.tar.gz').write_bytes(gzip.compress(plain.read()))
    found = {}
    for name, shard in [('tar', tmp_path / 'train-000000.tar'),
                        ('gz', tmp_path / 'gz' / 'train-000000.tar.gz')]:
        result = cli(f'--webdataset=train={shard}', f'--output_dir={tmp_path}/{name}',
                     NO_LEAKAGE_CHECK)
        assert result.returncode == 0, result.stderr
        found[name] = sorted((r[records.FILENAME], r[records.LABEL], r[records.ENCODED],
                              r[records.SOURCE]) for r in plain_split(f'{tmp_path}/{name}', 'train'))
    assert len(found['tar']) == 6
    assert [row[:3] for row in found['gz']] == [row[:3] for row in found['tar']]
    assert found['gz'][0][3] == f'{tmp_path}/gz/train-000000.tar.gz/k000.jpg'


@pytest.mark.slow
def test_a_cut_off_shard_fails_its_split_unless_any_loss_is_accepted(tmp_path):
    _write_shards(str(tmp_path / 'train-%06d.tar'), _samples(6, 2), 6)
    whole = (tmp_path / 'train-000000.tar').read_bytes()
    with tarfile.open(tmp_path / 'train-000000.tar') as tar:
        cut = tar.getmember('k003.jpg').offset_data + 10
    shard = tmp_path / 'cut' / 'train-000000.tar'
    shard.parent.mkdir()
    shard.write_bytes(whole[:cut])
    flags = [f'--webdataset=train={shard}', NO_LEAKAGE_CHECK]
    failed = cli(*flags, f'--output_dir={tmp_path}/failed')
    assert failed.returncode == 2
    assert (f"error: 1 archive(s) of split 'train' end in damage, e.g. {shard}: how many members "
            'lay behind the damage cannot be known') in failed.stderr
    accepted = cli(*flags, '--max_error_ratio=1', f'--output_dir={tmp_path}/accepted')
    assert accepted.returncode == 0, accepted.stderr
    assert sorted(r[records.FILENAME] for r in plain_split(f'{tmp_path}/accepted', 'train')) == [
        'k000.jpg', 'k001.jpg', 'k002.png']
    with open(f'{tmp_path}/accepted/errors-train.jsonl') as stream:
        assert [(e['source'], e['reason']) for e in map(json.loads, stream)] == [
            (f'{shard}/k003', f'{shard}: sample k003 cannot be read: truncated archive: {shard} '
                              'ends inside k003.jpg')]


@pytest.mark.slow
def test_an_outsized_label_member_is_reported_never_read(tmp_path):
    """A sample's .json of 1.5 GB (a sparse file: no disk, no time to write): listing hops over
    it and the sample is reported, in a fraction of the memory reading it would take."""
    jpeg = imagemaker.jpeg(40, 30)
    path = tmp_path / 'train-000000.tar'
    with open(path, 'wb') as stream:
        for name, data in [('a.jpg', jpeg), ('a.cls', b'0'), ('b.jpg', jpeg), ('b.json', 3 << 29),
                           ('c.jpg', jpeg), ('c.cls', b'1')]:
            info = tarfile.TarInfo(name)
            info.size = data if isinstance(data, int) else len(data)
            stream.write(info.tobuf(tarfile.USTAR_FORMAT))
            if isinstance(data, int):
                stream.seek(-(-data // 512) * 512, os.SEEK_CUR)
            else:
                stream.write(data + bytes(-len(data) % 512))
        stream.write(bytes(1024))
    out = str(tmp_path / 'out')
    result, peak = run_measured(sys.executable, '-m', 'pipeline.run', f'--webdataset=train={path}',
                                '--max_error_ratio=1', f'--output_dir={out}', *IN_PROCESS)
    assert result.returncode == 0, result.stderr
    assert peak < 1 << 30
    assert sorted(r[records.FILENAME] for r in plain_split(out, 'train')) == ['a.jpg', 'c.jpg']
    with open(f'{out}/errors-train.jsonl') as stream:
        assert [json.loads(line)['reason'] for line in stream] == [
            f'{path}: sample b has a label member of {3 << 29} bytes (b.json); one of at most '
            '65536 bytes is read']


def test_gcs_shards_convert_to_gcs(gcs, tmp_path):
    _write_shards(str(tmp_path / 'train-%06d.tar'), _samples(8, 2), 4)
    source = upload({name: (tmp_path / name).read_bytes()
                     for name in ('train-000000.tar', 'train-000001.tar')}, 'wds')
    # Through a proxy that counts requests, first (no shard of these is indexed in this process
    # yet): one read indexes each shard (under 1 MB, so one window), its labels with it; then
    # one ranged read per image, and one more per image of the sample converted to size the
    # shards (all 8 here: up to 300 in a run).
    with through_proxy(gcs) as proxy:
        counted = cli(f'--webdataset=train={source}/train-{{000000..000001}}.tar',
                      f'--output_dir={tmp_path}/local', NO_LEAKAGE_CHECK)
    assert counted.returncode == 0, counted.stderr
    assert proxy.operations['read'] == 2 + 8 + 8
    result = cli(f'--webdataset=train={source}/train-{{000000..000001}}.tar',
                 f'--output_dir=gs://{BUCKET}/out', '--num_shards=2', NO_LEAKAGE_CHECK)
    assert result.returncode == 0, result.stderr
    remote = download('out')
    paths = []
    for name in sorted(n for n in remote if '-train.tfrecord-' in n):
        (tmp_path / name).write_bytes(remote[name])
        paths.append(str(tmp_path / name))
    rows = sorted((r[records.SOURCE], r[records.LABEL]) for r in plain_records(paths))
    assert rows == [(f'{source}/train-{i // 4:06d}.tar/k{i:03d}.{"png" if i % 3 == 2 else "jpg"}',
                     i % 2) for i in range(8)]
    assert plain_split(f'{tmp_path}/local', 'train') == plain_records(paths)

    missing = cli(f'--webdataset=train={source}/train-{{000000..000002}}.tar',
                  f'--output_dir=gs://{BUCKET}/none')
    assert missing.returncode == 2
    assert f'shard {source}/train-000002.tar does not exist' in missing.stderr


@pytest.mark.slow
def test_kill_while_converting_then_rerun_resumes_byte_identical(tmp_path):
    _write_shards(str(tmp_path / 'train-%06d.tar'), _samples(420, 5), 105)
    flags = [f'--webdataset=train={tmp_path}/train-{{000000..000003}}.tar', '--num_shards=3',
             NO_LEAKAGE_CHECK]
    out = str(tmp_path / 'out')
    killed = killed_at('chunk:2', *flags, f'--output_dir={out}')
    assert killed.returncode == -signal.SIGKILL
    rerun = cli(*flags, f'--output_dir={out}')
    assert rerun.returncode == 0, rerun.stderr
    assert 'an earlier attempt finished 2 chunks and 0 shards' in rerun.stderr
    assert 'reused 2 of ' in rerun.stdout
    reference = str(tmp_path / 'reference')
    assert cli(*flags, f'--output_dir={reference}').returncode == 0
    assert output_files(out) == output_files(reference)
    assert len(plain_split(out, 'train')) == 420

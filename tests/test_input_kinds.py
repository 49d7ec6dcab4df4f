"""An input kind added from outside the product: one module and one `register` call.

The module below is written by the test: a list file of `split label path` lines behind its own
flag. The command line runs with it imported, so the list is converted, resumed after a kill
and verified without any product module knowing the kind; its flag shows in --help and its
name in the line that asks for one input.
"""
import json
import signal
import subprocess

import pytest

from pipeline.testing import imagemaker
from tests.helpers import IN_PROCESS, output_files, run_with_module, write_tree

pytestmark = pytest.mark.slow

# The three conversions (killed, resumed, whole) run without the check for copies across splits
# (--leakage=off): what is tested is the input kind's seam, and the check's Beam stages take half
# of a small conversion's time (a kill after a shard with the check on is in
# tests/test_hostile_folders.py).
NO_LEAKAGE_CHECK = '--leakage=off'

KIND_MODULE = '''
"""`--image_list FILE`: lines of `split label path`, one partition per split."""
import dataclasses

from pipeline.inputs import registry
from pipeline.inputs.kinds import InputKind, Partition, Source, path_ref
from pipeline.io import fileio


@dataclasses.dataclass(frozen=True)
class ListedSplit(Partition):
    split: str
    path: str

    def examples(self):
        for line in fileio.read_bytes(self.path).decode().splitlines():
            split, label, image = line.split(' ', 2)
            if split == self.split:
                yield path_ref(split, image, label, None, ())


class ImageList(InputKind):
    usage = given_as = '--image_list'
    template = {'image_list': ('Image list (split label path)', 'GCS_READ_FILE', [])}

    def add_flags(self, flag):
        flag('image_list', metavar='FILE', help='Lines of split label path.')

    def given(self, opts, config):
        return bool(opts.image_list)

    def paths(self, opts):
        return [opts.image_list]

    def source(self, opts, labels, config, alone):
        lines = fileio.read_bytes(opts.image_list).decode().splitlines()
        splits = tuple(s for s in ('train', 'validation', 'test')
                       if any(line.startswith(s + ' ') for line in lines))
        return Source([ListedSplit(s, opts.image_list) for s in splits], splits, labels,
                      identity=f'image list {opts.image_list}')


registry.register(ImageList())
'''


def _run(tmp_path, module: str, *argv, kill_at: str | None = None) -> subprocess.CompletedProcess:
    return run_with_module(tmp_path, 'image_list_kind', KIND_MODULE, module, *argv,
                           kill_at=kill_at)


def test_an_input_kind_registered_outside_the_product_converts_resumes_and_verifies(tmp_path):
    images = write_tree(tmp_path / 'images', {f'{i}.jpg': imagemaker.jpeg(24, 16, seed=i)
                                              for i in range(300)})
    listed = tmp_path / 'list.txt'
    listed.write_text(''.join(f'{"train" if i % 5 else "test"} c{i % 3} {images}/{i}.jpg\n'
                              for i in range(300)))
    flags = [f'--image_list={listed}', '--num_shards=3', *IN_PROCESS, NO_LEAKAGE_CHECK]
    out, reference = tmp_path / 'out', tmp_path / 'reference'
    killed = _run(tmp_path, 'pipeline.run', *flags, f'--output_dir={out}', kill_at='shard:2')
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    rerun = _run(tmp_path, 'pipeline.run', *flags, f'--output_dir={out}')
    assert rerun.returncode == 0, rerun.stderr
    assert 'an earlier attempt finished' in rerun.stderr and '2 shards' in rerun.stderr
    whole = _run(tmp_path, 'pipeline.run', *flags, f'--output_dir={reference}')
    assert whole.returncode == 0, whole.stderr
    assert output_files(out) == output_files(reference)
    assert sorted(p for p in output_files(out) if p.startswith('dataset-')) == [
        *(f'dataset-test.tfrecord-0000{i}-of-00003' for i in range(3)),
        *(f'dataset-train.tfrecord-0000{i}-of-00003' for i in range(3))]

    verified = _run(tmp_path, 'pipeline.tools.verify', str(out))
    assert verified.returncode == 0, verified.stderr
    assert '240 records' in verified.stdout and '60 records' in verified.stdout


def test_an_input_kind_registered_outside_the_product_has_its_flag_and_is_one_input(tmp_path):
    helped = _run(tmp_path, 'pipeline.run', '--help')
    assert '--image_list FILE' in helped.stdout and 'Lines of split label path.' in helped.stdout
    both = _run(tmp_path, 'pipeline.run', f'--image_list={tmp_path}/list.txt',
                f'--input_dir={tmp_path}', f'--output_dir={tmp_path}/out')
    assert both.returncode == 2, both.stderr
    assert ('give one input: --input_dir (with --csv_<split> for splits it does not hold), '
            '--csv_<split>, --config, --webdataset SPLIT=PATTERN or --image_list (got '
            '--input_dir, --image_list)'
            in both.stderr)


def test_an_input_kind_registered_outside_the_product_is_in_the_flex_templates_parameters(tmp_path):
    generated = _run(tmp_path, 'pipeline.tools.template_metadata')
    assert generated.returncode == 0, generated.stderr
    parameters = {p['name']: p for p in json.loads(generated.stdout)['parameters']}
    assert parameters['image_list']['label'] == 'Image list (split label path)'
    assert parameters['image_list']['paramType'] == 'GCS_READ_FILE'
    assert parameters['input_dir']['paramType'] == 'GCS_READ_FOLDER'

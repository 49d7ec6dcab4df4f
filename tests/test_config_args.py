"""--config_arg KEY=VALUE reaches the --config class's __init__; a keyword the class passes on
unused is refused in one line instead of converting a default dataset."""
import json
import sys

import pytest

from pipeline.testing import imagemaker
from tests.helpers import cli, write_tree

CONFIG = '''
import os
from pipeline.config import ImageClassificationConfig


class FolderConfig(ImageClassificationConfig):
    def __init__(self, image_dir='{default}', **kwargs):
        super().__init__(**kwargs)
        self.image_dir = image_dir

    @property
    def num_labels(self):
        return 2

    @property
    def supported_modes(self):
        return ['train']

    def example_generator(self, mode):
        for name in sorted(os.listdir(self.image_dir)):
            yield {{'image_path': os.path.join(self.image_dir, name), 'label': len(name) % 2}}
'''


@pytest.fixture
def config_module(tmp_path, monkeypatch):
    """A module folder_config.FolderConfig on the module path, converting 3 images by default
    and the 5 of tmp_path/five with image_dir=...; forgotten after the test."""
    write_tree(tmp_path / 'three', {f'{i}.jpg': imagemaker.jpeg(20, 20, seed=i) for i in range(3)})
    write_tree(tmp_path / 'five', {f'{i}.jpg': imagemaker.jpeg(20, 20, seed=i) for i in range(5)})
    (tmp_path / 'mods').mkdir()
    (tmp_path / 'mods' / 'folder_config.py').write_text(CONFIG.format(default=tmp_path / 'three'))
    monkeypatch.syspath_prepend(tmp_path / 'mods')
    yield
    sys.modules.pop('folder_config', None)


def test_a_keyword_the_class_does_not_take_is_refused(tmp_path, config_module):
    result = cli('--config=folder_config:FolderConfig', '--config_arg=imagedir=/elsewhere',
                 f'--output_dir={tmp_path}/out')
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --config_arg imagedir: folder_config:FolderConfig does not take a 'imagedir' "
        "argument (its __init__ passes it on unused); use one of the keywords its __init__ names")
    assert not (tmp_path / 'out' / 'summary.json').exists()


@pytest.mark.slow
def test_a_keyword_the_class_takes_reaches_it(tmp_path, config_module):
    result = cli('--config=folder_config:FolderConfig', f'--config_arg=image_dir={tmp_path}/five',
                 f'--output_dir={tmp_path}/out')
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / 'out' / 'summary.json').read_text())
    assert summary['splits']['train']['records'] == 5


LABELED = '''
from pipeline.config import ImageClassificationConfig


class Labeled(ImageClassificationConfig):
    num_labels, supported_modes = 2, ['train']

    def example_generator(self, mode):
        yield {{'image_path': {image!r}, 'label': {label}}}
'''


@pytest.mark.parametrize('label, shown', [
    ('10 ** 5000', "Labeled.example_generator('train') yielded label (an integer of about 5,001 "
                   'digits); an integer label is a class id 0..999,999'),
    ('-10 ** 30', "Labeled.example_generator('train') yielded label -(an integer of about 31 "
                  'digits); an integer label is a class id 0..999,999'),
    ('-1', "Labeled.example_generator('train') yielded label -1; an integer label is a class id "
           '0..999,999'),
    ("['x'] * 10 ** 6", "Labeled.example_generator('train') yielded label " + "['x', "
                        + "'x', " * 14 + "...]; labels must be str or int"),
])
def test_a_label_out_of_bounds_is_one_line_that_shows_it_short(tmp_path, monkeypatch, label, shown):
    """Python refuses to print an integer of over 4,300 digits: the line says its size; a long
    value is cut."""
    image = write_tree(tmp_path / 'in', {'a.jpg': imagemaker.jpeg(20, 20, seed=1)}) + '/a.jpg'
    (tmp_path / 'mods').mkdir()
    (tmp_path / 'mods' / 'labeled.py').write_text(LABELED.format(image=image, label=label))
    monkeypatch.syspath_prepend(tmp_path / 'mods')
    try:
        result = cli('--config=labeled:Labeled', f'--output_dir={tmp_path}/out')
    finally:
        sys.modules.pop('labeled', None)
    assert result.returncode == 2
    line = result.stderr.strip().splitlines()[-1]
    assert line == f'error: {shown}'

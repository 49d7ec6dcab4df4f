"""The ImageNet recipe of docs/imagenet.md, run as the page prints it, on archives shaped like the
official ones."""
import io
import tarfile

import numpy as np
import pytest
from PIL import Image

from pipeline.testing import archivemaker, imagemaker
from tests import doc_blocks

PAGE = 'docs/imagenet.md'

SYNSETS = [(1, 'n02119789', 0), (2, 'n01440764', 0), (3, 'n01443537', 0), (1001, 'n00001740', 3)]
VALIDATION_IDS = [2, 1, 3, 3, 2, 1, 2]
CMYK = imagemaker.encode(Image.fromarray(imagemaker.gradient(60, 40, 3)).convert('CMYK'), 'JPEG')


def _devkit() -> bytes:
    from scipy.io import savemat
    synsets = np.zeros(len(SYNSETS), dtype=[('ILSVRC2012_ID', 'O'), ('WNID', 'O'),
                                            ('words', 'O'), ('num_children', 'O')])
    for index, (number, wnid, children) in enumerate(SYNSETS):
        synsets[index] = (number, wnid, f'words of {wnid}', children)
    meta = io.BytesIO()
    savemat(meta, {'synsets': synsets})
    truth = ''.join(f'{i}\n' for i in VALIDATION_IDS).encode()
    return archivemaker.tar({'ILSVRC2012_devkit_t12/data/meta.mat': meta.getvalue(),
                             'ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt':
                             truth}, 'gz')


def _train() -> dict:
    """{synset.tar: tar of its images}, with ImageNet's odd files: a PNG and a CMYK JPEG named .JPEG."""
    classes = {wnid: {f'{wnid}_{i}.JPEG': imagemaker.jpeg(40, 30, seed=n * 10 + i) for i in range(4)}
               for n, wnid, children in SYNSETS if not children}
    classes['n01440764']['n01440764_png.JPEG'] = imagemaker.png(30, 20, seed=5)
    classes['n01443537']['n01443537_cmyk.JPEG'] = CMYK
    return {f'{wnid}.tar': archivemaker.tar(files) for wnid, files in classes.items()}


@pytest.mark.slow
def test_imagenet_from_its_official_archives(tmp_path):
    import tensorflow_datasets as tfds
    validation = {f'ILSVRC2012_val_{i:08d}.JPEG': imagemaker.jpeg(30, 30, seed=100 + i)
                  for i in range(1, len(VALIDATION_IDS) + 1)}
    (tmp_path / 'ILSVRC2012_img_train.tar').write_bytes(archivemaker.tar(_train()))
    (tmp_path / 'ILSVRC2012_img_val.tar').write_bytes(archivemaker.tar(validation))
    (tmp_path / 'ILSVRC2012_devkit_t12.tar.gz').write_bytes(_devkit())
    # The recipe as the page prints it: the train tar as split `train`, the validation labels as
    # a CSV through the validation tar, a plan, then one conversion.
    recipe = doc_blocks.find(PAGE, '> imagenet/validation.csv')
    result = doc_blocks.run_shell(recipe.code, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    csv = (tmp_path / 'imagenet' / 'validation.csv').read_text()
    assert csv.splitlines()[:3] == ['uri,label', 'ILSVRC2012_img_val.tar/ILSVRC2012_val_00000001.JPEG,n01440764',
                                    'ILSVRC2012_img_val.tar/ILSVRC2012_val_00000002.JPEG,n02119789']
    assert 'train' in result.stdout and 'validation' in result.stdout
    # The validation tar beside the train tar is not a split folder: its images are the CSV's.
    assert ('left out ILSVRC2012_img_val/: not a split folder (train, validation or val, test); '
            'its images are converted where a --csv_<split> names them') in result.stderr
    assert 'rename a folder' not in result.stderr

    builder = tfds.builder_from_directory(str(tmp_path / 'imagenet_tfrecords'))
    label = builder.info.features['image/class/label']
    assert label.names == ['n01440764', 'n01443537', 'n02119789']
    assert (builder.info.splits['train'].num_examples, builder.info.splits['validation'].num_examples) == (14, 7)
    labels = {}
    for split in ('train', 'validation'):
        for example in tfds.as_numpy(builder.as_dataset(split=split)):
            labels[example['image/filename'].decode()] = label.int2str(example['image/class/label'])
            assert example['image/encoded'].shape[-1] == 3   # Decoded RGB, the odd files too.
    wnid = dict((number, w) for number, w, _ in SYNSETS)
    assert {n: labels[n] for n in validation} == {
        f'ILSVRC2012_val_{i:08d}.JPEG': wnid[k] for i, k in enumerate(VALIDATION_IDS, 1)}
    assert labels['n01440764_png.JPEG'] == 'n01440764' and labels['n01443537_cmyk.JPEG'] == 'n01443537'


def test_the_pages_account_of_the_devkit_gives_the_csv_rows(tmp_path, monkeypatch):
    with tarfile.open(fileobj=io.BytesIO(_devkit())) as devkit:
        devkit.extractall(tmp_path)   # Made by the test itself.
    account = doc_blocks.find(PAGE, "loadmat('data/meta.mat'")
    names = {}
    monkeypatch.chdir(tmp_path / 'ILSVRC2012_devkit_t12')
    exec(account.code, names)
    wnid = {number: w for number, w, children in SYNSETS if not children}
    assert names['rows'] == [f'ILSVRC2012_img_val.tar/ILSVRC2012_val_{i:08d}.JPEG,{wnid[k]}'
                             for i, k in enumerate(VALIDATION_IDS, 1)]

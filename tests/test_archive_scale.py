"""Archives as ImageNet is packed: a zip of Kaggle's layout with more than 200,000 entries, its
flat validation folder labelled by a CSV, and the memory each member of a tar or a zip costs
(benchmarks/imagenet_local.py measures both at ImageNet's size)."""
import json

import pytest

from pipeline.output import records
from pipeline.testing import archivemaker, imagemaker
from pipeline.testing.process_memory import run_sampled
from pipeline.tools import imagenet_labels
from tests.helpers import cli, read_split

KAGGLE = 'ILSVRC/Data/CLS-LOC'
TRAIN = {f'{KAGGLE}/train/{c}/{c}_{i}.JPEG': imagemaker.jpeg(24, 16, seed=10 * n + i)
         for n, c in enumerate(('n01', 'n02')) for i in range(3)}
VALIDATION = {f'{KAGGLE}/val/ILSVRC2012_val_{i:08d}.JPEG': imagemaker.jpeg(24, 16, seed=90 + i)
              for i in (1, 2)}
ANNOTATIONS = 200_001   # Entries beside the images (Kaggle's bounding boxes), all read.


@pytest.fixture(scope='module')
def kaggle_zip(tmp_path_factory):
    """imagenet.zip in Kaggle's layout: train/<class>/, a flat val/, LOC_val_solution.csv and
    200,001 annotation entries (the zip was refused past 200,000 entries)."""
    path = tmp_path_factory.mktemp('kaggle') / 'imagenet.zip'
    items = [(f'ILSVRC/Annotations/CLS-LOC/train/n03/n03_{i}.xml', b'') for i in range(ANNOTATIONS)]
    items += [*TRAIN.items(), *VALIDATION.items(),
              ('LOC_val_solution.csv', b'ImageId,PredictionString\n')]
    archivemaker.write_stored_zip(path, items)
    return path


@pytest.mark.slow
def test_a_zip_of_kaggles_layout_with_more_than_200_000_entries_converts(kaggle_zip, tmp_path):
    result = cli(f'--input_dir={kaggle_zip}/{KAGGLE}', f'--output_dir={tmp_path}/out',
                 '--max_error_ratio=1')
    assert result.returncode == 0, result.stderr
    train = {r[records.FILENAME]: r[records.TEXT] for r in read_split(f'{tmp_path}/out', 'train')}
    assert train == {f'{c}_{i}.JPEG': c for c in ('n01', 'n02') for i in range(3)}
    # The flat validation folder cannot be moved into class folders: the error says how to
    # label it instead.
    errors = [json.loads(line) for line in open(f'{tmp_path}/out/errors-validation.jsonl')]
    assert {e['source']: e['reason'] for e in errors} == {
        f'{kaggle_zip}/{KAGGLE}/val/{name}': (
            f'not in a class folder, inside an archive: label the images of '
            f'{kaggle_zip}/{KAGGLE}/val with a CSV of uri,label naming each by its path through '
            'the archive, given as --csv_validation (pipeline.tools.imagenet_labels writes '
            "ImageNet's from the devkit or Kaggle's LOC_val_solution.csv)")
        for name in (n.rsplit('/', 1)[1] for n in VALIDATION)}


@pytest.mark.slow
def test_kaggles_flat_validation_folder_is_read_by_a_csv_through_the_zip(kaggle_zip, tmp_path,
                                                                          capsys, caplog):
    # Kaggle's LOC_val_solution.csv, through the tool, to a CSV of uri,label through the zip.
    solution = tmp_path / 'LOC_val_solution.csv'
    solution.write_text('ImageId,PredictionString\n'
                        'ILSVRC2012_val_00000001,n01 1 2 30 40 n01 5 6 7 8\n'
                        'ILSVRC2012_val_00000002,n02 3 4 50 60\n')
    assert imagenet_labels.main([str(solution), f'--archive={kaggle_zip}/{KAGGLE}/val']) == 0
    csv = tmp_path / 'validation.csv'
    csv.write_text(capsys.readouterr().out)
    result = cli(f'--input_dir={kaggle_zip}/{KAGGLE}', f'--csv_validation={csv}',
                 f'--output_dir={tmp_path}/out')
    assert result.returncode == 0, result.stderr
    validation = {r[records.FILENAME]: r[records.TEXT]
                  for r in read_split(f'{tmp_path}/out', 'validation')}
    assert validation == {'ILSVRC2012_val_00000001.JPEG': 'n01',
                          'ILSVRC2012_val_00000002.JPEG': 'n02'}
    assert len(read_split(f'{tmp_path}/out', 'train')) == 6
    assert (f'{kaggle_zip}/{KAGGLE}: not converted: val/, split validation, is given by '
            f'--csv_validation') in caplog.text


SIZES = (1_000, 11_000)
MOST_BYTES_PER_MEMBER = 800   # Measured under load: ~380; before, ~1,200 (tar) and more (zip).


def _packed(folder, kind: str, members: int) -> str:
    """A flat tar or a Kaggle-layout zip of 4 images and `members` hidden files (ignored, but
    indexed, listed and counted as any member is) in 100 class folders."""
    images = {f'train/n{c:02d}/{c}.JPEG': imagemaker.jpeg(24, 16, seed=c) for c in range(4)}
    hidden = {f'train/n{i % 100:02d}/.{i}': b'' for i in range(members)}
    if kind == 'tar':
        path = folder / f'{members}.tar'
        path.write_bytes(archivemaker.tar({**images, **hidden}))
        return str(path)
    path = folder / f'{members}.zip'
    archivemaker.write_stored_zip(path, ((f'{KAGGLE}/{k}', v)
                                         for k, v in {**images, **hidden}.items()))
    return f'{path}/{KAGGLE}'


@pytest.mark.slow
@pytest.mark.parametrize('kind', ['tar', 'zip'])
def test_the_launcher_grows_by_less_than_a_kilobyte_a_member(kind, tmp_path):
    peaks = {}
    for n in SIZES:
        result = run_sampled(f'--input_dir={_packed(tmp_path, kind, n)}',
                             f'--output_dir={tmp_path}/out-{n}', timeout=600)
        assert result.returncode == 0, result.stderr
        summary = json.load(open(f'{tmp_path}/out-{n}/summary.json'))['splits']['train']
        assert (summary['records'], summary['ignored']) == (4, n)
        peaks[n] = result.launcher
    assert (peaks[SIZES[1]] - peaks[SIZES[0]]) / (SIZES[1] - SIZES[0]) < MOST_BYTES_PER_MEMBER, \
        peaks


def test_a_dataset_saved_by_hugging_face_datasets_is_named_with_how_to_convert_it(tmp_path):
    root = tmp_path / 'saved'
    for split in ('train', 'test'):
        (root / split).mkdir(parents=True)
        for name in ('data-00000-of-00001.arrow', 'dataset_info.json', 'state.json'):
            (root / split / name).write_bytes(b'{}')
    (root / 'dataset_dict.json').write_text('{"splits": ["train", "test"]}')
    result = cli(f'--input_dir={root}', f'--output_dir={tmp_path}/out')
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f'error: {root} looks like a Hugging Face dataset saved with save_to_disk (Arrow files), '
        'which is not read; write it as parquet files and give their folder: python -c "import '
        "datasets; [d.to_parquet(f'OUT/data/{s}-00000-of-00001.parquet') for s, d in "
        f"datasets.load_from_disk('{root}').items()]\" then --input_dir=OUT"]

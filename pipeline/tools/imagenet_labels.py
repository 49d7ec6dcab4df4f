"""The validation labels of ImageNet (ILSVRC2012) as a CSV of paths through the validation tar:

    python -m pipeline.tools.imagenet_labels ILSVRC2012_devkit_t12.tar.gz > validation.csv

The devkit lists the class of each validation image by number (data/ILSVRC2012_validation_
ground_truth.txt: line i holds the ILSVRC2012_ID of ILSVRC2012_val_0000000i.JPEG) and maps the
numbers to synsets (data/meta.mat, a MATLAB file, read with scipy). The CSV names each image
inside the validation archive (`ILSVRC2012_img_val.tar/ILSVRC2012_val_00000001.JPEG,n01751748`),
relative to the CSV's folder, with the synset as label: the same names as the class folders of
ILSVRC2012_img_train.tar, so both splits share one label map.

Kaggle's copy (imagenet-object-localization-challenge.zip) labels its flat
ILSVRC/Data/CLS-LOC/val/ by LOC_val_solution.csv (`ImageId,PredictionString`, the synset
first); given that file, the CSV names each image through the zip:

    unzip -p imagenet-object-localization-challenge.zip LOC_val_solution.csv > solution.csv
    python -m pipeline.tools.imagenet_labels solution.csv > validation.csv
"""
import argparse
import io
import sys
import tarfile

from pipeline.io import fileio
from pipeline.errors import DatasetError

GROUND_TRUTH = 'data/ILSVRC2012_validation_ground_truth.txt'
META = 'data/meta.mat'


def devkit_files(devkit: str) -> tuple[bytes, bytes]:
    """(ground truth list, meta.mat) from the devkit archive, local or gs://."""
    found = {}
    with tarfile.open(fileobj=io.BytesIO(fileio.read_bytes(devkit))) as archive:
        for info in archive:
            for wanted in (GROUND_TRUTH, META):
                if info.isfile() and info.name.endswith(wanted):
                    found[wanted] = archive.extractfile(info).read()
    missing = [name for name in (GROUND_TRUTH, META) if name not in found]
    if missing:
        raise DatasetError(f'{devkit} holds no {" or ".join(missing)}; give the ILSVRC2012 '
                           'devkit (ILSVRC2012_devkit_t12.tar.gz)')
    return found[GROUND_TRUTH], found[META]


def synsets_by_id(meta: bytes) -> dict[int, str]:
    """ILSVRC2012_ID -> WNID of the 1,000 classes (the leaves of meta.mat's synset tree)."""
    from scipy.io import loadmat
    synsets = loadmat(io.BytesIO(meta), squeeze_me=True)['synsets']
    return {int(s['ILSVRC2012_ID']): str(s['WNID']) for s in synsets if int(s['num_children']) == 0}


def validation_rows(ground_truth: bytes, synsets: dict[int, str], archive: str) -> list[str]:
    """`ARCHIVE/ILSVRC2012_val_NNNNNNNN.JPEG,WNID` for each line of the ground truth list."""
    ids = [int(line) for line in ground_truth.decode().split()]
    return [f'{archive}/ILSVRC2012_val_{number:08d}.JPEG,{synsets[i]}'
            for number, i in enumerate(ids, 1)]


KAGGLE_VAL = 'imagenet-object-localization-challenge.zip/ILSVRC/Data/CLS-LOC/val'
MAX_SOLUTION = 64 << 20   # Bytes of LOC_val_solution.csv read (it is ~3 MB).


def kaggle_rows(solution: bytes, folder: str) -> list[str]:
    """`FOLDER/ImageId.JPEG,WNID` for each row of Kaggle's LOC_val_solution.csv."""
    lines = solution.decode('utf-8-sig').splitlines()
    if not lines or lines[0].strip() != 'ImageId,PredictionString':
        raise DatasetError('the CSV does not start with ImageId,PredictionString; give Kaggle\'s '
                           'LOC_val_solution.csv')
    rows = []
    for number, line in enumerate(lines[1:], 2):
        image, _, boxes = line.partition(',')
        synset = boxes.split(maxsplit=1)[:1]
        if not image or not synset or '/' in image:
            raise DatasetError(f'line {number} of the CSV is not ImageId,PredictionString')
        rows.append(f'{folder}/{image}.JPEG,{synset[0]}')
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('devkit', help='ILSVRC2012_devkit_t12.tar.gz (local or gs://), or '
                        "Kaggle's LOC_val_solution.csv")
    parser.add_argument('--archive', help='the validation tar, relative to the folder the CSV '
                        'will be in (default ILSVRC2012_img_val.tar); for Kaggle\'s CSV, the '
                        f'val folder through the zip (default {KAGGLE_VAL})')
    args = parser.parse_args(argv)
    try:
        if args.devkit.lower().endswith('.csv'):
            rows = kaggle_rows(fileio.read_input(args.devkit, MAX_SOLUTION),
                               args.archive or KAGGLE_VAL)
        else:
            ground_truth, meta = devkit_files(args.devkit)
            rows = validation_rows(ground_truth, synsets_by_id(meta),
                                   args.archive or 'ILSVRC2012_img_val.tar')
    except fileio.TooLarge:
        print(f'error: {args.devkit} is larger than {MAX_SOLUTION >> 20} MiB; give Kaggle\'s '
              'LOC_val_solution.csv', file=sys.stderr)
        return 1
    except DatasetError as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 1
    sys.stdout.write('uri,label\n' + ''.join(f'{row}\n' for row in rows))
    return 0


if __name__ == '__main__':
    sys.exit(main())

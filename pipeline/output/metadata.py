"""Shard file names (any format) and the files beside the shards: TFDS metadata, label names
and the run summary.

`dataset_info.json` and `features.json` follow the TFDS format, so
`tfds.builder_from_directory(output_dir)` loads the dataset with decoded images and class names;
they are written as plain JSON so workers need no TFDS import. TFDS sees the record keys as they
are (`image/encoded`, `image/class/label`, ...), each a top-level feature, and those two as the
supervised keys, so `as_supervised=True` gives (image, label) pairs.
"""
import hashlib
import json
from typing import Mapping, Sequence

from pipeline.io import fileio
from pipeline.output import records, shard_formats
from pipeline.output.shard_formats import ShardFormat

DATASET_INFO = 'dataset_info.json'
FEATURES = 'features.json'
LABELS = 'labels.txt'
CLASS_NAMES = 'image.class.label.labels.txt'   # Where TFDS looks for the ClassLabel names.
OLD_CLASS_NAMES = 'image-class-label.labels.txt'   # The same, from versions with nested features.
SUMMARY = 'summary.json'
SUMMARY_DIGEST = 'summary_digest'   # summary.json's key for its own SHA-256 (summary_digest).
LEAKAGE = 'leakage.jsonl'   # Clusters of near-duplicates across splits (transforms/leakage.py).
SHARD_TEMPLATE = '{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}'
MAX_SHARDS = 1_000_000   # Per split (transforms/sharding.py).
MODULE = 'image_tfrecords'   # dataset_info.json's moduleName: this tool wrote the dataset.
DATASET_NAME = r'[a-z][a-z0-9_]*'   # The pattern of a dataset's name, the shards' prefix.

_TFDS = 'tensorflow_datasets.core.features.'

def shard_name(dataset: str, split: str, index: int, total: int, shard_format: ShardFormat) -> str:
    return f'{dataset}-{split}.{shard_format.suffix}-{index:05d}-of-{total:05d}'


def error_report_name(split: str) -> str:
    return f'errors-{split}.jsonl'


def damaged_report_name(split: str) -> str:
    return f'damaged-{split}.jsonl'


def _text() -> dict:
    return {'pythonClassName': _TFDS + 'text_feature.Text', 'text': {}}


def _tensor(dtype: str) -> dict:
    return {'pythonClassName': _TFDS + 'tensor_feature.Tensor',
            'tensor': {'dtype': dtype, 'encoding': 'none', 'shape': {}}}


def _scalar(kind: str) -> dict:
    return {'text': _text, 'bytes': lambda: _tensor('string'), 'int': lambda: _tensor('int64'),
            'float': lambda: _tensor('float32')}[kind]()


def _feature(name: str, kind: str, num_classes: int) -> dict:
    if name == records.ENCODED:
        return {'pythonClassName': _TFDS + 'image_feature.Image',
                'image': {'dtype': 'uint8', 'encodingFormat': 'jpeg',
                          'shape': {'dimensions': ['-1', '-1', '3']}}}
    if name == records.LABEL:
        return {'pythonClassName': _TFDS + 'class_label_feature.ClassLabel',
                'classLabel': {'numClasses': str(num_classes)}}
    return _scalar(kind)


def features_json(num_classes: int, extras: Mapping[str, Mapping], hashed: bool = True) -> dict:
    """TFDS features.json: one top-level feature per record key (`hashed`: records carry
    perceptual hashes)."""
    features = {name: _feature(name, kind, num_classes)
                for name, kind in records.image_features(hashed).items()}
    for name, info in extras.items():
        scalar = _scalar(info['kind'])
        features[name] = ({'pythonClassName': _TFDS + 'sequence_feature.Sequence',
                           'sequence': {'feature': scalar, 'length': '-1'}}
                          if info['is_list'] else scalar)
    return {'pythonClassName': _TFDS + 'features_dict.FeaturesDict',
            'featuresDict': {'features': dict(sorted(features.items()))}}


def dataset_info_json(dataset: str, version: str, description: str,
                      file_formats: Sequence[ShardFormat], splits: Mapping[str, Mapping]) -> dict:
    """TFDS dataset_info.json; `splits` maps name -> {'shard_lengths': [...], 'num_bytes': n}
    (the bytes of the first of `file_formats`, which TFDS reads by default; the others are
    declared as alternative formats, each with the same shards and records)."""
    info = {
        'name': dataset,
        'version': version,
        'description': description,
        'fileFormat': file_formats[0].tfds_name,
        'moduleName': MODULE,
        'supervisedKeys': {'tuple': {'items': [{'featureKey': records.ENCODED},
                                               {'featureKey': records.LABEL}]}},
        'splits': [{'name': name, 'filepathTemplate': SHARD_TEMPLATE,
                    'numBytes': str(info['num_bytes']),
                    'shardLengths': [str(n) for n in info['shard_lengths']]}
                   for name, info in splits.items()],
    }
    if len(file_formats) > 1:
        info['alternativeFileFormats'] = [f.tfds_name for f in file_formats[1:]]
    return info


def load_json(output_dir: str, name: str) -> dict:
    return json.loads(fileio.read_bytes(fileio.join(output_dir, name)))


def carries_hashes(output_dir: str) -> bool:
    """Whether the records of the dataset in `output_dir` carry perceptual hashes, as its
    features.json says (not those of a --leakage=off run)."""
    return records.PHASH in load_json(output_dir, FEATURES)['featuresDict']['features']


def shard_paths(output_dir: str, info: dict, split: str,
                file_format: ShardFormat | None = None) -> list[str]:
    """The shard files `dataset_info.json` says a split has, in order, in `file_format`
    (default: the dataset's first format)."""
    entry = next(s for s in info['splits'] if s['name'] == split)
    total = len(entry['shardLengths'])
    file_format = file_format or shard_formats.declared(info)[0]
    return [fileio.join(output_dir, shard_name(info['name'], split, i, total, file_format))
            for i in range(total)]


def digests(files: Mapping[str, bytes]) -> dict[str, str]:
    """SHA-256s of files by name, for summary.json's `digests` (which also holds those of
    leakage.jsonl and of each shard file of a format that rewrites the records)."""
    return {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())}


def summary_digest(summary: Mapping) -> str:
    """summary.json's own digest (its SUMMARY_DIGEST): the SHA-256 of its text as dumps writes
    it, without that key."""
    return hashlib.sha256(dumps({k: v for k, v in summary.items()
                                 if k != SUMMARY_DIGEST})).hexdigest()


def dumps(document) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True) + '\n').encode()

"""Reading an ArrayRecord dataset with Grain: random access, a seeded global shuffle, host sharding.

    from pipeline.readers.grain_data import dataset
    ds = dataset('gs://my-bucket/imagenet', 'train', seed=0, num_epochs=None,
                 shard_index=jax.process_index(), shard_count=jax.process_count())
    batches = ds.map(to_fixed_size).to_iter_dataset(
        grain.ReadOptions(num_threads=16, prefetch_buffer_size=256)).batch(256)

(Batch after `to_iter_dataset`: the prefetch buffer counts elements. Images keep their own
sizes, so make them one size before batching; docs/loading.md has a complete example.)

Each element is {'image': HxWx3 uint8, 'label': int}. The shard list comes from
dataset_info.json (written with --output_format=array_record, alone or with tfrecord). Local
folders and gs:// prefixes are read alike: array_record (0.8.6 and later) reads Cloud Storage
objects itself, through the Cloud Storage C++ client and Application Default Credentials, one
ranged read per record, so nothing is copied to local disk first.
"""
import grain
import numpy as np
import simplejpeg

from pipeline.output import metadata, records, shard_formats
from pipeline.errors import DatasetError


def data_source(output_dir: str, split: str) -> grain.sources.ArrayRecordDataSource:
    """Random access to the serialized records of a split: `source[i]`, `len(source)`."""
    info = metadata.load_json(output_dir, metadata.DATASET_INFO)
    formats = shard_formats.declared(info)
    if shard_formats.ARRAY_RECORD not in formats:
        raise DatasetError(f'{output_dir} has no ArrayRecord shards (formats: '
                           f'{", ".join(f.name for f in formats)}); convert with '
                           '--output_format=array_record or --output_format=tfrecord,array_record')
    return grain.sources.ArrayRecordDataSource(
        metadata.shard_paths(output_dir, info, split, shard_formats.ARRAY_RECORD))


def parse(serialized: bytes) -> dict:
    """A record -> {'image': decoded HxWx3 uint8 array, 'label': int}."""
    example = records.decode_example(serialized)
    image = simplejpeg.decode_jpeg(example[records.ENCODED][0], colorspace='RGB')
    return {'image': image, 'label': np.int64(example[records.LABEL][0])}


def dataset(output_dir: str, split: str, seed: int | None = None, shard_index: int = 0,
            shard_count: int = 1, num_epochs: int | None = 1) -> grain.MapDataset:
    """The split as a Grain MapDataset of parsed, decoded examples.

    Host `shard_index` of `shard_count` gets records shard_index, shard_index + shard_count, ...
    (disjoint, together all). With a `seed`, they are shuffled globally (across every file),
    differently in every epoch; without one, they come in shard order. `num_epochs=None`
    repeats forever.
    """
    if not 0 <= shard_index < shard_count:
        raise ValueError(f'shard_index {shard_index} is not in 0..{shard_count - 1}')
    ds = grain.MapDataset.source(data_source(output_dir, split))[shard_index::shard_count]
    if seed is not None:
        ds = ds.shuffle(seed=seed)
    if num_epochs != 1:
        ds = ds.repeat(num_epochs)
    return ds.map(parse)

"""Reading a written dataset back as a `tf.data.Dataset` of (image, label).

    from pipeline.readers.tf_data import dataset
    ds = dataset('gs://my-bucket/tfrecords/imagenet', 'train', shuffle_files=True, shuffle_buffer=10_000)

The shard list comes from dataset_info.json and the parse spec from pipeline/output/records.py, the
same definitions the writer uses. (For TFDS: `tfds.builder_from_directory(output_dir)`.)
"""
import tensorflow as tf

from pipeline.output import metadata, records, shard_formats
from pipeline.errors import DatasetError


def dataset(output_dir: str, split: str, shuffle_files: bool = False, shuffle_buffer: int = 0,
            seed: int | None = None, cycle_length: int = 16) -> tf.data.Dataset:
    """(uint8 image HxWx3, int64 label) pairs of a split, read with file-level interleave.

    Without shuffling, records come in shard order and the result is deterministic.
    """
    info = metadata.load_json(output_dir, metadata.DATASET_INFO)
    if shard_formats.TFRECORD not in shard_formats.declared(info):
        raise DatasetError(f'{output_dir} has ArrayRecord shards only; read them with '
                           'pipeline.readers.grain_data, or convert with '
                           '--output_format=tfrecord,array_record for tf.data as well')
    files = metadata.shard_paths(output_dir, info, split, shard_formats.TFRECORD)
    spec = records.parse_spec(hashed=metadata.carries_hashes(output_dir))
    shuffled = shuffle_files or shuffle_buffer > 0
    ds = tf.data.Dataset.from_tensor_slices(files)
    if shuffle_files:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=min(cycle_length, len(files)),
                       num_parallel_calls=tf.data.AUTOTUNE, deterministic=not shuffled)
    if shuffle_buffer:
        ds = ds.shuffle(shuffle_buffer, seed=seed)

    def parse(serialized):
        example = tf.io.parse_single_example(serialized, spec)
        return tf.io.decode_jpeg(example[records.ENCODED], channels=3), example[records.LABEL]

    return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=not shuffled)

"""Example encoding and TFRecord framing, checked against TensorFlow's own parser and reader."""
import io

import numpy as np
import pytest

from pipeline.output import records


def test_encoded_example_parses_in_tensorflow_with_every_value_kind():
    import tensorflow as tf
    features = {'image/encoded': b'\x00\xffbytes', 'image/class/text': 'ünïcode',
                'image/height': 70000, 'neg': -5, 'score': 0.25, 'tags': ['a', 'b'],
                'ids': [1, 2**40], 'weights': [0.5, 1.5], 'np_int': np.int64(7)}
    spec = {'image/encoded': tf.io.FixedLenFeature([], tf.string),
            'image/class/text': tf.io.FixedLenFeature([], tf.string),
            'image/height': tf.io.FixedLenFeature([], tf.int64),
            'neg': tf.io.FixedLenFeature([], tf.int64),
            'score': tf.io.FixedLenFeature([], tf.float32),
            'tags': tf.io.FixedLenFeature([2], tf.string),
            'ids': tf.io.FixedLenFeature([2], tf.int64),
            'weights': tf.io.FixedLenFeature([2], tf.float32),
            'np_int': tf.io.FixedLenFeature([], tf.int64)}
    parsed = tf.io.parse_single_example(records.encode_example(features), spec)
    assert parsed['image/encoded'].numpy() == b'\x00\xffbytes'
    assert parsed['image/class/text'].numpy().decode() == 'ünïcode'
    assert parsed['image/height'].numpy() == 70000 and parsed['neg'].numpy() == -5
    assert parsed['score'].numpy() == 0.25 and parsed['np_int'].numpy() == 7
    assert list(parsed['tags'].numpy()) == [b'a', b'b']
    assert list(parsed['ids'].numpy()) == [1, 2**40]
    assert list(parsed['weights'].numpy()) == [0.5, 1.5]


def test_encoding_is_independent_of_dict_order():
    import tensorflow as tf
    a = records.encode_example({'x': 1, 'y': 'b', 'z': [1.0]})
    b = records.encode_example({'z': [1.0], 'y': 'b', 'x': 1})
    assert a == b
    assert tf.train.Example.FromString(a).features.feature['y'].bytes_list.value == [b'b']


def test_framing_reads_back_in_tensorflow_and_here(tmp_path):
    import tensorflow as tf
    payloads = [b'', b'one', bytes(range(256)) * 100]
    path = tmp_path / 'x.tfrecord'
    path.write_bytes(b''.join(records.frame_record(p) for p in payloads))
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(path))] == payloads
    with open(path, 'rb') as stream:
        assert list(records.read_records(stream)) == payloads


def test_reader_detects_flipped_byte_and_truncation():
    data = bytearray(records.frame_record(b'hello world') * 2)
    data[20] ^= 0x01
    with pytest.raises(records.RecordError, match='record 0: data checksum'):
        list(records.read_records(io.BytesIO(bytes(data))))
    whole = records.frame_record(b'hello world') * 2
    with pytest.raises(records.RecordError, match='record 1: file ends'):
        list(records.read_records(io.BytesIO(whole[:-3])))


def test_decoder_reads_our_examples_and_tensorflows():
    import tensorflow as tf
    features = {'image/encoded': b'\x00jpeg', 'image/height': 70000, 'neg': -5, 'score': 0.25,
                'tags': ['a', 'b'], 'empty_ints': [], 'ids': [1, 2**40]}
    decoded = records.decode_example(records.encode_example(features))
    assert decoded == {'image/encoded': [b'\x00jpeg'], 'image/height': [70000], 'neg': [-5],
                       'score': [0.25], 'tags': [b'a', b'b'], 'empty_ints': [], 'ids': [1, 2**40]}
    example = tf.train.Example()
    example.features.feature['x'].int64_list.value.extend([3, -1])
    example.features.feature['y'].float_list.value.append(1.5)
    example.features.feature['z'].bytes_list.value.append(b'q')
    assert records.decode_example(example.SerializeToString()) == {'x': [3, -1], 'y': [1.5], 'z': [b'q']}
    with pytest.raises(ValueError):
        records.decode_example(b'\x0a\x05abc')

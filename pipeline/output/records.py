"""The record schema, written once: `tf.train.Example` encoding and TFRecord framing.

Examples are serialised straight to protobuf wire format (no TensorFlow import on workers, keys
in sorted order so the bytes are deterministic), and framed as TFRecords with masked CRC32C.
Readers use the same definitions: `parse_spec()` for tf.data, and `read_records` with
`decode_example` where TensorFlow is not wanted (verify, the report, the PyTorch reader).

The decoder is written here rather than generated from example.proto: the protobuf runtime
alone has no `tf.train.Example` class (TensorFlow or a generated module ships it), and the
wire format of the three feature kinds takes a few dozen lines. tests/test_records.py pins it
against TensorFlow's own serializer, packed and unpacked lists included.
"""
import hashlib
import struct
from typing import BinaryIO, Iterator, Mapping, Sequence

import google_crc32c

ENCODED = 'image/encoded'
FORMAT = 'image/format'
FILENAME = 'image/filename'
HEIGHT = 'image/height'
WIDTH = 'image/width'
CHANNELS = 'image/channels'
COLORSPACE = 'image/colorspace'
LABEL = 'image/class/label'
TEXT = 'image/class/text'
SHA256 = 'image/key/sha256'
SOURCE = 'image/source'
PHASH = 'image/phash'                    # Perceptual hash (pipeline/quality/phash.py), as int64.
PHASH_MIRRORED = 'image/phash_mirrored'  # ... of the mirror image.

# Name -> value kind of every feature each record carries ('bytes', 'int' or 'text').
IMAGE_FEATURES = {
    ENCODED: 'bytes', FORMAT: 'text', FILENAME: 'text', HEIGHT: 'int', WIDTH: 'int',
    CHANNELS: 'int', COLORSPACE: 'text', LABEL: 'int', TEXT: 'text', SHA256: 'text',
    SOURCE: 'text', PHASH: 'int', PHASH_MIRRORED: 'int',
}
# The features a run with --leakage=off leaves out (it computes no perceptual hashes).
HASH_FEATURES = (PHASH, PHASH_MIRRORED)


def image_features(hashed: bool = True) -> dict[str, str]:
    """IMAGE_FEATURES of a dataset whose records carry perceptual hashes (`hashed`), or not."""
    return {name: kind for name, kind in IMAGE_FEATURES.items()
            if hashed or name not in HASH_FEATURES}

FeatureValue = bytes | str | int | float | bool | Sequence


_ONE_BYTE = tuple(bytes((value,)) for value in range(0x80))   # The varint of each value < 128.


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _delimited(field_tag: int, payload: bytes) -> bytes:
    return bytes([field_tag]) + _varint(len(payload)) + payload


def _as_list(value: FeatureValue) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def value_kind(value: FeatureValue) -> str:
    """'bytes', 'text', 'int' or 'float': how a value (or list of values) is stored."""
    items = _as_list(value)
    kinds = {_scalar_kind(v) for v in items}
    if len(kinds) > 1:
        raise ValueError(f'mixed value types in one feature: {sorted(kinds)}')
    return kinds.pop() if kinds else 'bytes'


def _scalar_kind(value) -> str:
    if isinstance(value, bytes):
        return 'bytes'
    if isinstance(value, str):
        return 'text'
    if isinstance(value, (bool, int)) or type(value).__name__.startswith(('int', 'uint')):
        return 'int'
    if isinstance(value, float) or type(value).__name__.startswith('float'):
        return 'float'
    raise ValueError(f'unsupported feature value {value!r} of type {type(value).__name__}')


def _feature(value: FeatureValue) -> bytes:
    """A Feature message of any value (_feature_parts takes the scalars every record has)."""
    items = _as_list(value)
    kind = value_kind(value)
    if kind in ('bytes', 'text'):
        body = b''.join(_delimited(0x0A, v.encode() if isinstance(v, str) else v) for v in items)
        return _delimited(0x0A, body)  # Feature.bytes_list
    if kind == 'int':
        packed = b''.join(_varint(int(v)) for v in items)
        return _delimited(0x1A, _delimited(0x0A, packed) if items else b'')  # int64_list
    packed = struct.pack(f'<{len(items)}f', *items)
    return _delimited(0x12, _delimited(0x0A, packed) if items else b'')  # float_list


_NAMES: dict[str, bytes] = {}


def _name(name: str) -> bytes:
    encoded = _NAMES.get(name)
    if encoded is None:
        encoded = _NAMES[name] = _delimited(0x0A, name.encode())
    return encoded


def _feature_parts(value: FeatureValue) -> tuple[bytes, bytes]:
    """A Feature message as (head, tail): a bytes or text value is its tail, so it is copied
    once, into the record. Scalar bytes, text and int values are encoded here, without calls."""
    if type(value) is str:
        value = value.encode()
    if type(value) is bytes:
        value_head = b'\x0a' + _varint(len(value))
        return b'\x0a' + _varint(len(value_head) + len(value)) + value_head, value
    if type(value) is int:   # Feature.int64_list of one value: at most 10 bytes, packed.
        packed = _varint(value)
        return b'\x1a' + _ONE_BYTE[len(packed) + 2] + b'\x0a' + _ONE_BYTE[len(packed)] + packed, b''
    return _feature(value), b''


def encode_example(features: Mapping[str, FeatureValue]) -> bytes:
    """Serialises a `tf.train.Example` with the given features, keys in sorted order.

    Lengths are worked out first, so every value is copied once, into the result."""
    pieces, size = [], 0
    for name, value in sorted(features.items()):
        head, tail = _feature_parts(value)
        entry_head = _name(name) + b'\x12' + _varint(len(head) + len(tail))
        piece = b'\x0a' + _varint(len(entry_head) + len(head) + len(tail)) + entry_head + head
        pieces += (piece, tail)
        size += len(piece) + len(tail)
    return b''.join((b'\x0a', _varint(size), *pieces))


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError('truncated varint')
        byte = data[pos]
        result |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes):
    """Yields (field number, wire type, value) of a protobuf message; value is bytes or int."""
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
        elif wire == 2:
            size, pos = _read_varint(data, pos)
            if pos + size > len(data):
                raise ValueError('truncated field')
            value, pos = data[pos:pos + size], pos + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, pos = data[pos:pos + size], pos + size
        else:
            raise ValueError(f'unsupported wire type {wire}')
        yield number, wire, value


def _decode_feature(data: bytes) -> list:
    for number, _, body in _fields(data):
        values = []
        for _, wire, item in _fields(body):
            if number == 1:
                values.append(item)
            elif number == 2:  # floats, packed or not
                values.extend(struct.unpack(f'<{len(item) // 4}f', item) if wire == 2
                              else struct.unpack('<f', item))
            elif number == 3:  # int64s, packed or not
                items = [item] if wire == 0 else _unpack_varints(item)
                values.extend(v - (1 << 64) if v >= 1 << 63 else v for v in items)
        return values
    return []


def _unpack_varints(data: bytes) -> list[int]:
    values, pos = [], 0
    while pos < len(data):
        value, pos = _read_varint(data, pos)
        values.append(value)
    return values


def decode_example(data: bytes) -> dict[str, list]:
    """Parses a serialised `tf.train.Example` into {name: list of bytes/int/float} (no TensorFlow).

    Raises ValueError when `data` is not a well-formed Example.
    """
    features = {}
    for number, wire, body in _fields(data):
        if number != 1 or wire != 2:
            raise ValueError(f'unexpected field {number} in Example')
        for _, _, entry in _fields(body):
            name, value = None, b''
            for field, _, item in _fields(entry):
                if field == 1:
                    name = item.decode()
                elif field == 2:
                    value = item
            if name is None:
                raise ValueError('feature without a name')
            features[name] = _decode_feature(value)
    return features


def _masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record_digest(record: bytes) -> str:
    """A record's mark in summary.json's `shard_first` (16 hex digits of its SHA-256), by which
    verify knows each shard holds the records the run wrote there."""
    return hashlib.sha256(record).hexdigest()[:16]


def content_mark(record: bytes) -> str:
    """A record's part of its shard's `shard_content` (content_digest): its SHA-256, in hex."""
    return hashlib.sha256(record).hexdigest()


def content_digest(marks: str) -> str:
    """summary.json's `shard_content` of a shard: the SHA-256 of its records' SHA-256s in
    order (`marks`: their content_mark, concatenated), so verify knows every record of a shard
    and their order from one value per shard, in either format."""
    return hashlib.sha256(bytes.fromhex(marks)).hexdigest()


def frame_record(data: bytes) -> bytes:
    """Frames one record as TFRecord: length, CRC of length, data, CRC of data."""
    length = struct.pack('<Q', len(data))
    return b''.join(
        (length, struct.pack('<I', _masked_crc(length)), data, struct.pack('<I', _masked_crc(data))))


class RecordError(ValueError):
    """A TFRecord file whose framing or checksums are wrong."""


def read_records(stream: BinaryIO) -> Iterator[bytes]:
    """Yields the records of a TFRecord stream, checking both CRCs of every record."""
    index = 0
    while True:
        header = stream.read(12)
        if not header:
            return
        if len(header) < 12:
            raise RecordError(f'record {index}: file ends inside the record header')
        length, length_crc = struct.unpack('<QI', header)
        if _masked_crc(header[:8]) != length_crc:
            raise RecordError(f'record {index}: length checksum mismatch')
        data = stream.read(length)
        footer = stream.read(4)
        if len(data) < length or len(footer) < 4:
            raise RecordError(f'record {index}: file ends inside the record data')
        if _masked_crc(data) != struct.unpack('<I', footer)[0]:
            raise RecordError(f'record {index}: data checksum mismatch')
        yield data
        index += 1


def parse_spec(extra_features: Mapping[str, Mapping] | None = None, hashed: bool = True) -> dict:
    """The `tf.io.parse_single_example` spec for a dataset's records (`hashed`: they carry
    perceptual hashes, as all but --leakage=off datasets do)."""
    import tensorflow as tf

    dtypes = {'bytes': tf.string, 'text': tf.string, 'int': tf.int64, 'float': tf.float32}
    spec = {name: tf.io.FixedLenFeature([], dtypes[kind])
            for name, kind in image_features(hashed).items()}
    for name, info in (extra_features or {}).items():
        dtype = dtypes[info['kind']]
        spec[name] = (tf.io.VarLenFeature(dtype) if info['is_list']
                      else tf.io.FixedLenFeature([], dtype))
    return spec

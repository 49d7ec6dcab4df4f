"""ExampleRefs as bytes, for the runs listing spills into the run's temporary folder
(transforms/listing.py): a plain format whose reader takes a file's bytes for what they are,
data, since anyone who can write the output folder can write them. Nothing is unpickled; a
ref decodes into exactly the types an ExampleRef holds, or is refused.

    HEAD (4 bytes, big-endian: the JSON text's length) | JSON text (ASCII) | BYTES

The JSON text is one array:

    [split, key, source, filename, label, size, mtime, problem, ignored, data, extras, member,
     group]

`label` is a string, an integer or null; `size` and `mtime` numbers or null; `data` null or
the length of the image's bytes, the first of BYTES. `extras` is a list of [name, kind,
is_list, values] (kind: 'bytes', 'text', 'int' or 'float', as records.value_kind says; a
'bytes' value is its length, its bytes the next of BYTES). `member`, null or an archive member:

    [kind, archive path, file, file size, file mtime, start, archive size, depth,
     name, offset, size, is_dir, error, index, cut, within, (a zip member's:) method,
     stored size, crc, name length, end]

with kind 0 (archive_base.Member), 1 (zip_index.ZipMember) or 2 (gzip_pass.StreamedMember).
`group`, null or a parquet RowGroupRead: [path, size, mtime, first group, end group, first
row, column, path column, limit, image root, root given, why no root]. The lengths of BYTES add up to what
follows the JSON text, exactly. Every length, count and depth is bounded before it is used
(a JSON text longer than SMALL_HEAD is counted before it is parsed, pipeline/base/json_size.py);
anything else is a SpillError saying what.
"""
import json
import struct
from typing import Any

from pipeline.base import json_size
from pipeline.base.refs import ExampleRef
from pipeline.inputs.archive_base import MAX_DEPTH, Archive, Member
from pipeline.inputs.gzip_pass import StreamedMember
from pipeline.inputs.zip_index import ZipMember
from pipeline.output.records import value_kind

_HEAD = struct.Struct('>I')
SMALL_HEAD = 4096          # Bytes of JSON text parsed without counting what it can make.
MAX_CONTAINERS = 100_000   # JSON arrays in one ref: a few, and one per extra feature.
MAX_VALUES = 10_000_000    # JSON values in one ref: an extra feature's list may be long.
_KINDS = (Member, ZipMember, StreamedMember)
_FEATURE_KINDS = {'bytes': bytes, 'text': str, 'int': int, 'float': float}
_BASE = 16                 # Fields of every member; a zip member has 5 more.
_NUMBER = (int, float)
_ENCODER = json.JSONEncoder(separators=(',', ':'))   # Made once: json.dumps makes one a call.


class SpillError(ValueError):
    """Bytes that are no ref this tool wrote: str(exc) says why."""


def encode(ref: ExampleRef) -> bytes:
    """The bytes of `ref` (see the module docstring)."""
    blobs = [] if ref.data is None else [ref.data]
    extras = [_extra(name, value, blobs) for name, value in ref.extras] if ref.extras else []
    head = _ENCODER.encode([
        ref.split, ref.key, ref.source, ref.filename, ref.label, ref.size, ref.mtime,
        ref.problem, ref.ignored, None if ref.data is None else len(ref.data), extras,
        None if ref.member is None else _member(ref.member),
        None if ref.group is None else _group(ref.group)]).encode('ascii')
    return b''.join((_HEAD.pack(len(head)), head, *blobs))


def _extra(name: str, value: Any, blobs: list[bytes]) -> list:
    kind = value_kind(value)
    is_list = isinstance(value, (list, tuple))
    items = list(value) if is_list else [value]
    if kind == 'bytes':
        blobs.extend(items)
        items = [len(item) for item in items]
    elif kind == 'int':
        items = [int(item) for item in items]
    elif kind == 'float':
        items = [float(item) for item in items]
    return [name, kind, is_list, items]


def _member(member: Member) -> list:
    kind = _KINDS.index(type(member))
    archive = member.archive
    fields = [kind, archive.path, archive.file, archive.file_size, archive.file_mtime,
              archive.start, archive.size, archive.depth, member.name, member.offset,
              member.size, member.is_dir, member.error, member.index, member.cut,
              list(member.within)]
    if kind == 1:
        fields += [member.method, member.stored_size, member.crc, member.name_length,
                   member.end]
    return fields


def _group(read) -> list:
    return [read.path, read.size, read.mtime, read.first_group, read.end_group, read.first_row,
            read.column, read.path_column, read.limit, read.image_root.path, read.image_root.given,
            read.image_root.why_not]


def decode(payload: bytes) -> ExampleRef:
    """The ref `payload` holds; SpillError if it is not one encode could have written."""
    if len(payload) < _HEAD.size:
        raise SpillError('shorter than its header')
    (length,) = _HEAD.unpack_from(payload)
    end = _HEAD.size + length
    if end > len(payload):
        raise SpillError(f'its text claims {length:,} bytes, more than it holds')
    head = payload[_HEAD.size:end]
    if length > SMALL_HEAD:
        excess = json_size.excess(head, MAX_CONTAINERS, MAX_VALUES)
        if excess:
            raise SpillError(f'it holds {excess}')
    try:
        fields = json.loads(head.decode('ascii'))
    except (ValueError, RecursionError):   # UnicodeDecodeError too.
        raise SpillError('its text is not JSON') from None
    if type(fields) is not list or len(fields) != 13:
        raise SpillError('its text is not a list of 13 fields')
    (split, key, source, filename, label, size, mtime, problem, ignored, data_length, extras,
     member, group) = fields
    if not (type(split) is str and type(key) is str and type(source) is str
            and type(filename) is str and type(ignored) is bool
            and (label is None or type(label) is str or type(label) is int)
            and (size is None or (type(size) is int and size >= 0))
            and (mtime is None or type(mtime) in _NUMBER)
            and (problem is None or type(problem) is str)
            and type(extras) is list):
        raise SpillError('a field is not of its type')
    blobs = _Blobs(payload, end)
    data = None if data_length is None else blobs.take(data_length)
    ref = ExampleRef(split, key, source, filename, label, size, data,
                     tuple(_extra_of(extra, blobs) for extra in extras) if extras else (),
                     problem, mtime, ignored,
                     None if member is None else _member_of(member),
                     None if group is None else _group_of(group))
    if blobs.at != len(payload):
        raise SpillError(f'{len(payload) - blobs.at:,} bytes follow what it names')
    return ref


class _Blobs:
    """The BYTES of a payload, taken in order, each within what is left."""

    def __init__(self, payload: bytes, at: int):
        self._payload, self.at = payload, at

    def take(self, length: Any) -> bytes:
        if type(length) is not int or not 0 <= length <= len(self._payload) - self.at:
            raise SpillError('a length runs past its end')
        self.at += length
        return self._payload[self.at - length:self.at]


def _extra_of(extra: Any, blobs: _Blobs) -> tuple[str, Any]:
    if type(extra) is not list or len(extra) != 4:
        raise SpillError('an extra feature is not [name, kind, is_list, values]')
    name, kind, is_list, items = extra
    wanted = _FEATURE_KINDS.get(kind) if type(kind) is str else None
    if (type(name) is not str or wanted is None or type(is_list) is not bool
            or type(items) is not list or not (is_list or len(items) == 1)):
        raise SpillError(f'extra feature {name!r:.80} is not of its type')
    if wanted is bytes:
        items = [blobs.take(length) for length in items]
    elif wanted is float:
        if not all(type(item) in _NUMBER for item in items):
            raise SpillError(f'extra feature {name!r:.80} holds other than numbers')
        items = [float(item) for item in items]
    elif not all(type(item) is wanted for item in items):
        raise SpillError(f'extra feature {name!r:.80} holds other than {kind}')
    return name, (tuple(items) if is_list else items[0])


def _member_of(fields: Any) -> Member:
    if type(fields) is not list or len(fields) not in (_BASE, _BASE + 5):
        raise SpillError('its archive member is not a list of its fields')
    (kind, path, file, file_size, file_mtime, start, archive_size, depth, name, offset, size,
     is_dir, error, index, cut, within, *zip_fields) = fields
    if not (type(kind) is int and 0 <= kind < len(_KINDS) and (len(zip_fields) == 5) == (kind == 1)
            and type(path) is str and type(file) is str and type(name) is str
            and _counts(file_size, start, offset, size, *zip_fields)
            and (archive_size is None or _counts(archive_size))
            and (file_mtime is None or type(file_mtime) in _NUMBER)
            and type(depth) is int and 1 <= depth <= MAX_DEPTH
            and type(is_dir) is bool and type(cut) is bool
            and (error is None or type(error) is str)
            and (index is None or _counts(index))
            and type(within) is list and len(within) <= MAX_DEPTH and _counts(*within)):
        raise SpillError('a field of its archive member is not of its type')
    archive = Archive(path, file, file_size, file_mtime, start, archive_size, depth)
    return _KINDS[kind](archive, name, offset, size, is_dir, error, index, cut, tuple(within),
                        *zip_fields)


def _group_of(fields: Any):
    from pipeline.inputs.parquet_image_paths import ImageRoot
    from pipeline.inputs.parquet_row_groups import RowGroupRead
    if type(fields) is not list or len(fields) != 12:
        raise SpillError('its row group read is not a list of its fields')
    (path, size, mtime, first_group, end_group, first_row, column, path_column, limit,
     root, given, why_not) = fields
    if not (type(path) is str and _counts(size, first_group, end_group, first_row, limit)
            and (mtime is None or type(mtime) in _NUMBER)
            and all(v is None or type(v) is str for v in (column, path_column, root))
            and type(given) is bool and type(why_not) is str):
        raise SpillError('a field of its row group read is not of its type')
    return RowGroupRead(path, size, mtime, first_group, end_group, first_row, column,
                        path_column, limit, ImageRoot(root, given, why_not))


def _counts(*values: Any) -> bool:
    """Whether every value is a whole number of 0 or more (no bool)."""
    return all(type(v) is int and v >= 0 for v in values)

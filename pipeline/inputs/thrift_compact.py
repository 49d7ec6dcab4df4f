"""A reader of the Thrift compact protocol, the encoding of a parquet file's footer and page
headers, for the few fields this tool needs of them, bounded: it reads nothing past its
buffer (IndexError when the buffer ends first), structs, lists and maps at most MAX_DEPTH deep
together, and makes a value only of the fields it is asked for (others, statistics included,
are skipped in place). Every element of a list or map takes a byte at least (a boolean in one
is a byte, as the protocol writes it), so a container claiming more elements than there are
bytes left is refused before any is read: the work is linear in the buffer, whatever it claims.

A spec says what to keep of a struct: {field id: spec of its value}, where a value's spec is
KEEP (an integer, a boolean, bytes), a dict (a struct) or a list of one spec (a list of such).
"""
MAX_DEPTH = 16
KEEP = True
_SKIP = None


def read_struct(data: bytes, spec: dict) -> tuple[dict, int]:
    """The struct at the start of `data`, as {field id: value} of the fields `spec` keeps, and
    where it ends; ValueError if it is not one, IndexError if `data` ends inside it."""
    reader = _Reader(data)
    return reader.struct(spec, 0), reader.at


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def struct(self, spec: dict | None, depth: int) -> dict | None:
        _check_depth(depth)
        fields, field = {}, 0
        while True:
            byte = self._byte()
            if byte == 0:
                return fields if spec is not _SKIP else None
            delta, kind = byte >> 4, byte & 0x0F
            field = field + delta if delta else _zigzag(self._varint())
            wanted = spec.get(field, _SKIP) if spec is not _SKIP else _SKIP
            value = self._value(kind, wanted, depth)
            if wanted is not _SKIP:
                fields[field] = value

    def _value(self, kind: int, spec, depth: int):
        if kind in (1, 2):                 # True, false (in a struct; a byte in a list).
            return kind == 1
        if kind == 3:                      # A byte.
            return self._byte()
        if kind in (4, 5, 6):              # i16, i32, i64.
            return _zigzag(self._varint())
        if kind == 7:                      # A double.
            return self._skip(8)
        if kind == 8:                      # Binary or text.
            length = self._varint()
            start = self.at
            self._skip(length)
            return bytes(self.data[start:self.at]) if spec is not _SKIP else None
        if kind in (9, 10):                # List, set.
            _check_depth(depth + 1)
            header = self._byte()
            count = header >> 4 if header >> 4 != 15 else self._varint()
            element = _in_container(header & 0x0F)
            self._check_count(count, 1)
            if not isinstance(spec, list):
                for _ in range(count):
                    self._value(element, _SKIP, depth + 1)
                return None
            return [self._value(element, spec[0], depth + 1) for _ in range(count)]
        if kind == 11:                     # Map: never kept.
            _check_depth(depth + 1)
            count = self._varint()
            types = self._byte() if count else 0
            key, value = _in_container(types >> 4), _in_container(types & 0x0F)
            self._check_count(count, 2)
            for _ in range(count):
                self._value(key, _SKIP, depth + 1)
                self._value(value, _SKIP, depth + 1)
            return None
        if kind == 12:
            return self.struct(spec if isinstance(spec, dict) else _SKIP, depth + 1)
        raise ValueError(f'unknown field type {kind}')

    def _check_count(self, count: int, each: int) -> None:
        """IndexError when `count` elements of `each` bytes at least cannot fit in what is left."""
        if count * each > len(self.data) - self.at:
            raise IndexError(f'a container claims {count:,} elements, more than the bytes left')

    def _byte(self) -> int:
        byte = self.data[self.at]
        self.at += 1
        return byte

    def _skip(self, length: int) -> None:
        if self.at + length > len(self.data):
            raise IndexError('the data ends inside a value')
        self.at += length

    def _varint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self._byte()
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ValueError('a number of more than 64 bits')


def _check_depth(depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f'structs, lists or maps nested more than {MAX_DEPTH} deep')


def _in_container(kind: int) -> int:
    """The type an element of a list or map of `kind` is read as: a boolean there is a byte."""
    return 3 if kind in (1, 2) else kind


def _zigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)

"""What a tar's extended headers say of the member after them (a GNU long name, pax records),
read the same way by the tar index (tar_index.py) and a gzip tar's pass (gzip_pass.py): in time
linear in their bytes, never more than EXTENDED_MAX of them."""

EXTENDED_MAX = 1 << 20                  # Bytes of a tar long-name or pax header, at most.
EXTENDED = (b'L', b'K', b'x', b'g')     # Type flags of extended headers.


def extended(kind: bytes, text: bytes) -> dict:
    """What an extended header says of the member after it: its `path` and `size`, if it says
    them. ValueError if its records do not parse."""
    if kind == b'L':
        return {'path': text.split(b'\0', 1)[0].decode('utf-8', 'surrogateescape')}
    if kind != b'x':
        return {}   # A long link name, or global pax records: nothing a member needs.
    records = _pax_records(text)
    found = {'path': records['path']} if 'path' in records else {}
    if 'size' in records:
        found['size'] = _size(records['size'])
    return found


def _size(text: str) -> int:
    """A pax record's size: decimal digits, at most 20 (more is no size a file has)."""
    if not (text.isascii() and text.isdigit() and len(text) <= 20):
        raise ValueError(f'its size {text[:24]!r} is not a number of bytes')
    return int(text)


def _pax_records(text: bytes) -> dict[str, str]:
    """The `LENGTH KEY=VALUE\\n` records of a pax header; ValueError if one does not parse."""
    records, position = {}, 0
    while position < len(text) and text[position] != 0:
        digits, space, _ = text[position:position + 24].partition(b' ')
        length = int(digits) if space and digits.isdigit() else 0
        record = text[position:position + length]
        key, equals, value = record[len(digits) + 1:-1].partition(b'=')
        if length <= len(digits) + 1 or len(record) < length or not record.endswith(b'\n') \
                or not equals:
            raise ValueError(f'its record at byte {position} does not parse')
        records[key.decode('utf-8', 'surrogateescape')] = value.decode('utf-8', 'surrogateescape')
        position += length
    return records

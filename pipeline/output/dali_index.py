"""NVIDIA DALI's index of a TFRecord shard (--dali_index): `SHARD.idx` beside each shard, so
`fn.readers.tfrecord(path=..., index_path=...)` reads the shards without DALI's `tfrecord2idx`.

The format is the one DALI's own tool writes and its reader parses (NVIDIA/DALI
`tools/tfrecord2idx`; `dali/operators/reader/loader/indexed_file_loader.h`, ReadIndexFile): a
text line per record, in file order, `OFFSET SIZE\\n` in decimal ASCII with one space between,
a newline after every line (the last too). OFFSET is where the record's framing starts; SIZE is
its length on disk with the framing (8-byte length, 4-byte CRC, data, 4-byte CRC: the data's
length + 16), because DALI reads those SIZE bytes at OFFSET and its parser
(`dali/operators/reader/parser/tfrecord_parser.h`) skips the 12-byte header itself. DALI reads
the numbers with `>>`, so any whitespace would do; this tool writes exactly tfrecord2idx's bytes.

The index is written from the record lengths the writer noted as it framed each record (no pass
over the shard's bytes); `verify` recomputes it from the shard's framing (`problem`).
"""
import itertools

from pipeline.output.shard_formats import TFRECORD

FORMAT = TFRECORD   # The format whose shards get an index.
SUFFIX = 'idx'
FRAMING = 16        # Bytes around each record's data: length, its CRC, the data's CRC.


def index_path(shard_path: str) -> str:
    """The index of the shard file `shard_path` (local or gs://, temporary or final name)."""
    return f'{shard_path}.{SUFFIX}'


def index_bytes(sizes: list[int]) -> bytes:
    """The index of a shard whose records take `sizes` bytes on disk each, framing included."""
    lines, offset = [], 0
    for size in sizes:
        lines.append(f'{offset} {size}\n')
        offset += size
    return ''.join(lines).encode()


def problem(index: bytes, sizes: list[int]) -> str | None:
    """What is wrong with `index` as the index of a shard whose records take `sizes` bytes on
    disk (read from its framing), naming the first line that differs; None when it is exact."""
    wanted = index_bytes(sizes)
    if index == wanted:
        return None
    found, expected = index.split(b'\n'), wanted.split(b'\n')
    number, line, want = next((n, a, b) for n, (a, b) in enumerate(
        itertools.zip_longest(found, expected), 1) if a != b)
    if line is None:   # The index's last line lacks its newline.
        return f'line {number - 1} does not end in a newline'
    shown = line.decode(errors='replace')[:60]
    if not want:
        return f'line {number} is {shown!r}, past the last of the shard\'s {len(sizes)} records'
    if number == len(found) and not line:
        return (f'line {number} is missing: {want.decode()!r} (offset and size of the shard\'s '
                f'record {number - 1})')
    return (f'line {number} is {shown!r}, not {want.decode()!r} (offset and size of the '
            f'shard\'s record {number - 1})')

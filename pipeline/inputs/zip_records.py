"""What a zip's records say, as both readers of zips check them: the zip index
(pipeline/inputs/zip_index.py) and a zip inside a gzip tar's pass (gzip_pass.py)."""
import bz2
import struct
import zipfile
import zlib

import numpy as np

# Decompressors of the compression methods read: method -> a new decompressor (None: stored).
METHODS = {zipfile.ZIP_STORED: None, zipfile.ZIP_DEFLATED: lambda: zlib.decompressobj(-15),
           zipfile.ZIP_BZIP2: bz2.BZ2Decompressor}
LOCAL_HEADER = struct.Struct('<4s22xHH')   # Its signature, then its name and extra lengths.
# Of a zip inside a gzip tar, held whole and read by zipfile (the zip index reads a zip's
# directory an entry at a time, zip_index.MAX_ENTRIES):
MAX_ENTRIES = 200_000         # Central directory entries, directory entries included: zipfile
# makes an object of each, and listing a member takes some 2.3 KB in all.
MAX_DIRECTORY = 128 << 20     # Bytes of its central directory (zipfile reads it whole).


def local_length(header: bytes) -> int:
    """The length of a zip member's local header (and name and extra field) from its start."""
    _, name_length, extra_length = LOCAL_HEADER.unpack_from(header)
    return LOCAL_HEADER.size + name_length + extra_length


def is_dir(info: zipfile.ZipInfo) -> bool:
    """Whether a zip member is a directory entry (zipfile's is_dir fails on an empty name)."""
    return info.filename.endswith('/')


def problem(info: zipfile.ZipInfo) -> str | None:
    """Why a zip member cannot be read, if its central directory entry says so."""
    if info.header_offset < 0:
        return 'damaged zip member: its local header would be before the start of the zip'
    if info.flag_bits & 0x1:
        return 'encrypted zip member'
    if info.compress_type not in METHODS:
        return (f'zip compression method {info.compress_type} is not supported (stored, '
                'deflate and bzip2 are)')
    if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
        return (f'damaged zip member: stored, but its size ({info.file_size} bytes) is not '
                f'its stored size ({info.compress_size})')
    return None


def ends(infos: list[zipfile.ZipInfo], directory: int) -> dict[int, int]:
    """id(member) -> where its data must end (`data_ends`)."""
    offsets = np.fromiter((info.header_offset for info in infos), np.int64, len(infos))
    return dict(zip(map(id, infos), data_ends(offsets, directory)))


def data_ends(offsets: np.ndarray, directory: int) -> list[int]:
    """Where the data of each member (its local header at each of `offsets`) must end: where
    the next member's local header or the central directory begins, so that no two members
    (nor a member and the directory the members are found in) share bytes, and no stretch of a
    zip is read twice (a zip made to hold itself, or the same bytes many times over, is
    damaged)."""
    order = np.argsort(offsets, kind='stable')
    found = np.empty_like(offsets)
    found[order] = np.minimum(np.append(offsets[order], directory)[1:], directory)
    return found.tolist()


def directory_excess(fp) -> str | None:
    """Why the central directory of the zip in the seekable file `fp` is not read: more than
    MAX_DIRECTORY bytes, or more than MAX_ENTRIES entries as its end record claims them or, when
    its bytes could hold more, as the entries' signatures count them; checked before zipfile
    makes an object of any entry (a million empty directory entries, 53 bytes each, took the
    launcher past 1.6 GB). None within the bounds, or when there is no end record to read
    (zipfile then says what is wrong)."""
    try:
        end = zipfile._EndRecData(fp)
    except (OSError, ValueError, EOFError, struct.error, zipfile.BadZipFile):
        return None   # zipfile meets the same and says what it is.
    if not end:
        return None
    size, claimed = end[zipfile._ECD_SIZE], end[zipfile._ECD_ENTRIES_TOTAL]
    if size > MAX_DIRECTORY:
        return (f'its central directory is {size:,} bytes, more than the {MAX_DIRECTORY:,} '
                'read')
    entries = claimed
    if claimed <= MAX_ENTRIES and size // zipfile.sizeCentralDir > MAX_ENTRIES:
        start = end[zipfile._ECD_LOCATION] - size   # Where zipfile reads it from.
        if end[zipfile._ECD_SIGNATURE] == zipfile.stringEndArchive64:
            start -= zipfile.sizeEndCentDir64 + zipfile.sizeEndCentDir64Locator
        fp.seek(max(0, start))
        entries = fp.read(size).count(b'PK\1\2')   # One per entry, at least.
    if entries > MAX_ENTRIES:
        return (f'its central directory holds {entries:,} entries, more than the '
                f'{MAX_ENTRIES:,} read (each takes memory while the zip is listed)')
    return None

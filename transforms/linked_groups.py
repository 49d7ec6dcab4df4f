"""A shuffle group's links, kept in the run's temporary folder so that a rerun after a crash
reuses them (as resume.py reuses chunks):

    links/<band>-<top bits>-<fingerprint>.npz   the group's reduced links and its crowded
                                                buckets

The fingerprint covers the group's key and every record the group was given (its hashes and
place; a record's source is found by its place), in their fixed order (leakage._members), so a
group is reused only for the very same records. The file is written atomically and read without
pickle: numpy arrays, and crowded buckets as JSON, with an HMAC-SHA256 of both and of the file's
name (which names the run and the group) under the run's resume key (pipeline/base/resume_key.py),
which a rerun checks before it reuses them: a flipped bit would change the clusters, and the
folder is anyone's who can write it.
"""
import hashlib
import hmac
import io
import json
import zipfile

import numpy as np

from pipeline.errors import DatasetError
from pipeline.io import fileio
from pipeline.output import bounded_reads, layout
from pipeline.quality.pairing import LINK, Table


def fingerprint(key: tuple, members: Table) -> str:
    """Of a group's key and its records."""
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8)
    digest.update(members.rows.tobytes())
    digest.update(members.mirrored.tobytes())
    return digest.hexdigest()


def path(temp_dir: str, key: tuple, members: Table) -> str:
    band, top, _ = key
    return layout.links_path(temp_dir, f'{band}-{top}-{fingerprint(key, members)}.npz')


def save(where: str, links: np.ndarray, crowded: list[tuple], key: bytes) -> None:
    """Keeps a group's result at `where`, sealed under `key`."""
    out, text = io.BytesIO(), _text(crowded)
    np.savez(out, links=links, crowded=text, digest=_digest(key, where, links, text))
    fileio.write_bytes_atomic(where, out.getvalue())


def load(where: str, key: bytes) -> tuple[np.ndarray, list[tuple]] | None:
    """(links, crowded buckets) kept at `where`; None when there is none or it cannot be read
    or it is not sealed under `key` for `where` (the group is then linked again)."""
    try:
        data = bounded_reads.read_file(where, bounded=True)
    except DatasetError:
        return None
    if data is None:
        return None
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as saved:
            links, text = saved['links'], saved['crowded']
            if (links.dtype != LINK or text.dtype != np.uint8
                    or not np.array_equal(saved['digest'], _digest(key, where, links, text))):
                return None
            crowded = [(band, value, count, examples)
                       for band, value, count, examples in json.loads(text.tobytes())]
    except (ValueError, KeyError, OSError, TypeError, RecursionError, zipfile.BadZipFile):
        return None
    return links, crowded


def _digest(key: bytes, where: str, links: np.ndarray, text: np.ndarray) -> np.ndarray:
    digest = hmac.new(key, '/'.join(where.split('/')[-3:]).encode() + b'\0', hashlib.sha256)
    digest.update(links.tobytes())
    digest.update(text.tobytes())
    return np.frombuffer(digest.digest(), dtype=np.uint8)


def _text(value) -> np.ndarray:
    return np.frombuffer(json.dumps(value).encode(), dtype=np.uint8)

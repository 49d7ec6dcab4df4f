"""Exact copies of a JPEG kept as it is are converted once per worker.

A JPEG stored as it is (StoredImage.passed_through) is its own record bytes, and all the rest
of what converting it finds (its size, its verdict, its hashes) follows from its bytes and the
run's options, which a worker's converter holds fixed. So the converter remembers that much of
the last LIMIT such JPEGs by their SHA-256, which the record needs anyway, and an exact copy
(the same bytes under another name: a dataset with many, or a file listed in two splits) is
not decoded again. Anything else is converted every time: a re-encoded image's bytes are not
held, so with --reencode nothing is remembered and no extra SHA-256 is taken. Held: LIMIT
entries of ~300 bytes, ~5 MB a worker at most.
"""
import dataclasses
import hashlib
import operator

from pipeline.base.settings import ImageOptions
from transforms.images import StoredImage, convert_image

LIMIT = 1 << 14
_AFTER_BYTES = operator.attrgetter(*(f.name for f in dataclasses.fields(StoredImage)[1:]))


class KeptCopies:
    """convert_image with what the last LIMIT JPEGs kept as they are were found to be."""

    def __init__(self, options: ImageOptions, hashed: bool):
        self._options, self._hashed = options, hashed
        self._kept: dict[bytes, tuple] = {}   # SHA-256 -> the StoredImage's fields after its bytes.
        self.reused = 0   # Images not converted again.

    def convert(self, data: bytes) -> tuple[StoredImage, str]:
        """(what to store of `data`, the SHA-256 of the stored bytes in hex); raises ImageError
        as convert_image does."""
        # With --reencode nothing is stored as it is: nothing to look up.
        digest = None if self._options.reencode else hashlib.sha256(data)
        known = digest and self._kept.get(digest.digest())
        if known:
            self.reused += 1
            return StoredImage(data, *known), digest.hexdigest()
        stored = convert_image(data, self._options, self._hashed)
        if digest is None or not stored.passed_through:
            return stored, hashlib.sha256(stored.encoded).hexdigest()
        if len(self._kept) >= LIMIT:
            del self._kept[next(iter(self._kept))]   # The oldest.
        self._kept[digest.digest()] = _AFTER_BYTES(stored)
        return stored, digest.hexdigest()

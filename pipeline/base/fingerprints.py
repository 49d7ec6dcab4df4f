"""Fingerprints of values: what names a run, a chunk of work or a file of it (transforms/resume.py
says how they are used)."""
import hashlib

LAYOUT_VERSION = 8   # Raise when the bytes a run writes for the same options change.


def fingerprint(*parts) -> str:
    """A stable hex fingerprint of values with a deterministic repr."""
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()

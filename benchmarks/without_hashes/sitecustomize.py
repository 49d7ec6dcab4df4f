"""Loaded by every Python process of a conversion started with this folder on PYTHONPATH (the
launcher and each worker), to take parts of the data-quality checks out for a measurement:

- WITHOUT_PAIRING=1: no record is sent to the pairing (its stages run, on nothing);
- WITHOUT_HASHES=1: that, and every image's hashes are phash.FLAT (not computed) and the strict
  verdict decodes at 1/8 scale, the least the verdict needs.

Used by benchmarks/quality_cost.py, never by the product.
"""
import os

if os.environ.get('WITHOUT_PAIRING') == '1' or os.environ.get('WITHOUT_HASHES') == '1':
    from transforms import encode_chunks

    def _nothing_filed(filer, table) -> int:
        return 0   # No record filed for the leakage check: its link tasks find nothing to read.

    encode_chunks.file_part = _nothing_filed

if os.environ.get('WITHOUT_HASHES') == '1':
    from transforms import images
    from pipeline.quality import jpeg_check, phash

    def _flat(pixels, single: bool = False) -> tuple[int, int]:
        return phash.FLAT, phash.FLAT

    jpeg_check.HASH_SIDE = 1
    phash.perceptual_hashes = images.perceptual_hashes = _flat

"""Exact copies of a JPEG kept as it is convert once per worker (transforms/kept_copies.py)."""
import hashlib
import io

from PIL import Image

from pipeline.base.choices import DamagedAction
from pipeline.base.settings import ImageOptions
from pipeline.testing import imagemaker
from transforms import kept_copies
from transforms.images import convert_image
from transforms.kept_copies import KeptCopies


def test_a_copy_of_a_kept_jpeg_gets_what_its_first_conversion_found_without_a_decode():
    photo, other = imagemaker.jpeg(96, 64, seed=1), imagemaker.jpeg(96, 64, seed=2)
    grey = imagemaker.encode(Image.open(io.BytesIO(photo)).convert('L'), 'JPEG')
    converter = KeptCopies(ImageOptions(), hashed=True)
    first, sha256 = converter.convert(photo)
    assert first == convert_image(photo, ImageOptions()) and first.passed_through
    assert sha256 == hashlib.sha256(photo).hexdigest()
    again = converter.convert(bytes(bytearray(photo)))   # Equal bytes, another object.
    assert again == (first, sha256) and converter.reused == 1
    assert converter.convert(other)[0] == convert_image(other, ImageOptions())
    stored, grey_sha256 = converter.convert(grey)   # Re-encoded: converted every time.
    assert not stored.passed_through and grey_sha256 == hashlib.sha256(stored.encoded).hexdigest()
    assert converter.convert(grey) == (stored, grey_sha256) and converter.reused == 1


def test_a_kept_damaged_jpeg_keeps_its_damage_and_reencode_remembers_nothing():
    whole = imagemaker.jpeg(96, 64, seed=3)
    cut = whole[:len(whole) * 2 // 3]   # Premature end: damaged, kept with --damaged_images=keep.
    keep = KeptCopies(ImageOptions(damaged_images=DamagedAction.KEEP), hashed=True)
    first, _ = keep.convert(cut)
    assert first.passed_through and 'Premature end' in first.damage
    assert keep.convert(cut)[0] == first and keep.reused == 1
    reencode = KeptCopies(ImageOptions(reencode=True), hashed=True)
    assert reencode.convert(whole) == reencode.convert(whole) and reencode.reused == 0


def test_only_the_last_limit_kept_jpegs_are_remembered(monkeypatch):
    monkeypatch.setattr(kept_copies, 'LIMIT', 2)
    a, b, c = (imagemaker.jpeg(32, 32, seed=s) for s in (4, 5, 6))
    converter = KeptCopies(ImageOptions(), hashed=False)
    for data in (a, b, c, b, c, a):   # a is forgotten when c comes; a again forgets b.
        converter.convert(data)
    assert converter.reused == 2

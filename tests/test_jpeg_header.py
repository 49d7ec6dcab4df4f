"""The JPEG header read without Pillow agrees with Pillow on every file it reads, and leaves to
Pillow what it does not vouch for."""
import io
import random
import struct

import pytest
from PIL import Image

from pipeline.testing import imagemaker
from pipeline.base.settings import ImageOptions
from transforms.images import convert_image, jpeg_header


def _jpeg(mode: str = 'RGB', size=(64, 48), **save) -> bytes:
    image = Image.open(io.BytesIO(imagemaker.jpeg(*size, seed=3))).convert(mode)
    out = io.BytesIO()
    image.save(out, 'JPEG', quality=85, **save)
    return out.getvalue()


def _exif(orientation: int, order: str = '<') -> bytes:
    mark = b'II*\0' if order == '<' else b'MM\0*'
    entry = struct.pack(order + 'HHLHH', 0x0112, 3, 1, orientation, 0)
    directory = struct.pack(order + 'H', 1) + entry + b'\0' * 4
    return b'Exif\0\0' + mark + struct.pack(order + 'L', 8) + directory


def _pillow(data: bytes) -> tuple:
    image = Image.open(io.BytesIO(data))
    return (image.format, image.size, image.mode, image.getexif().get(0x0112, 1))


def _agree(data: bytes) -> bool:
    """Asserts that a header read without Pillow is Pillow's; returns whether there was one."""
    header = jpeg_header(data)
    if header is not None:
        mode = {1: 'L', 3: 'RGB', 4: 'CMYK'}[header.components]
        assert _pillow(data) == ('JPEG', (header.width, header.height), mode, header.orientation)
    return header is not None


READ = {
    'rgb': _jpeg(),
    'progressive, optimized': _jpeg(progressive=True, optimize=True),
    'grayscale': _jpeg('L'),
    'cmyk': _jpeg('CMYK'),
    'orientation 6, little-endian': _jpeg(exif=_exif(6)),
    'orientation 3, big-endian': _jpeg(exif=_exif(3, '>')),
    'orientation 1': _jpeg(exif=_exif(1)),
    'EXIF from Pillow': _jpeg(exif=Image.Exif().tobytes()),
    'ICC profile': _jpeg(icc_profile=b'\0' * 300),
    'comment': _jpeg(comment=b'made here'),
    'no chroma subsampling': _jpeg(subsampling=0),
}
LEFT_TO_PILLOW = {
    'PNG': imagemaker.png(20, 10),
    'XMP': _jpeg(xmp=b'<x:xmpmeta><tiff:Orientation>6</tiff:Orientation></x:xmpmeta>'),
    'header cut short': _jpeg()[:150],
    'EXIF not TIFF': _jpeg(exif=b'Exif\0\0nonsense'),
    'orientation as LONG': _jpeg(exif=_exif(6).replace(b'\x12\x01\x03\x00', b'\x12\x01\x04\x00')),
    'two frames (MPO)': None,
}


@pytest.mark.parametrize('name', READ)
def test_plain_jpegs_are_read_as_pillow_reads_them(name):
    assert _agree(READ[name])


@pytest.mark.parametrize('name', LEFT_TO_PILLOW)
def test_other_files_are_left_to_pillow(name):
    data = LEFT_TO_PILLOW[name]
    if data is None:
        out = io.BytesIO()
        first = Image.open(io.BytesIO(_jpeg()))
        first.save(out, 'MPO', save_all=True, append_images=[first.copy()])
        data = out.getvalue()
    assert jpeg_header(data) is None


def test_damaged_headers_either_agree_with_pillow_or_are_left_to_it():
    random.seed(7)
    sources = [READ['rgb'], READ['orientation 6, little-endian'], READ['ICC profile'],
               READ['progressive, optimized']]
    read = 0
    for _ in range(3000):
        data = bytearray(random.choice(sources))
        for _ in range(random.randint(1, 3)):
            data[random.randrange(2, 400)] = random.randrange(256)
        try:
            read += _agree(bytes(data))
        except (OSError, SyntaxError, ValueError, struct.error) as exc:
            pytest.fail(f'read a header Pillow rejects ({exc}): {bytes(data[:400]).hex()}')
    assert read > 100   # Most changes land in pixel data or tables, which do not matter here.


def test_images_read_here_are_kept_or_reencoded_as_pillow_decides():
    options = ImageOptions()
    for name, data in READ.items():
        image = Image.open(io.BytesIO(data))
        kept = image.mode == 'RGB' and image.getexif().get(0x0112, 1) == 1
        assert convert_image(data, options).passed_through == kept, name

"""Decoding, validation and normalisation of single images (transforms/images.py)."""
import io
import zlib

import numpy as np
import pytest
import simplejpeg
from PIL import Image, ImageOps

from pipeline.testing import imagemaker
from transforms import images
from pipeline.quality.phash import perceptual_hashes
from transforms.png_chunks import plain_png, png_stream
from pipeline.base.settings import ImageOptions
from transforms.images import (DamagedImageError, ImageError, convert_image,
                              target_size)

DEFAULT = ImageOptions()


def test_rgb_jpeg_is_stored_byte_for_byte():
    data = imagemaker.jpeg(640, 300)
    stored = convert_image(data, DEFAULT)
    assert stored.encoded == data and stored.passed_through
    assert (stored.height, stored.width) == (300, 640)


def test_progressive_jpeg_is_passed_through():
    data = imagemaker.jpeg(300, 200, progressive=True)
    assert convert_image(data, DEFAULT).encoded == data


def test_reencode_flag_reencodes_rgb_jpeg():
    data = imagemaker.jpeg(64, 64)
    stored = convert_image(data, ImageOptions(reencode=True, jpeg_quality=100))
    assert stored.encoded != data and not stored.passed_through
    assert np.abs(imagemaker.decode(stored.encoded).astype(int) - imagemaker.decode(data)).mean() < 2


def test_png_becomes_rgb_jpeg_with_same_pixels():
    source = imagemaker.gradient(300, 260)
    stored = convert_image(imagemaker.encode(Image.fromarray(source), 'PNG'),
                           ImageOptions(jpeg_quality=100))
    assert Image.open(io.BytesIO(stored.encoded)).format == 'JPEG'
    assert (stored.height, stored.width) == (260, 300)
    assert np.abs(imagemaker.decode(stored.encoded).astype(int) - source).mean() < 2


def test_grayscale_jpeg_becomes_three_equal_channels():
    gray = Image.fromarray(imagemaker.gradient(50, 40)[..., 0])
    stored = convert_image(imagemaker.encode(gray, 'JPEG', quality=95), DEFAULT)
    pixels = imagemaker.decode(stored.encoded)
    assert pixels.shape == (40, 50, 3)
    assert Image.open(io.BytesIO(stored.encoded)).mode == 'RGB'
    assert np.abs(pixels[..., 0].astype(int) - np.asarray(gray)).mean() < 3


def test_cmyk_jpeg_is_converted_to_rgb():
    rgb = Image.fromarray(imagemaker.gradient(64, 64))
    data = imagemaker.encode(rgb.convert('CMYK'), 'JPEG', quality=95)
    stored = convert_image(data, DEFAULT)
    assert not stored.passed_through
    assert Image.open(io.BytesIO(stored.encoded)).mode == 'RGB'
    assert np.abs(imagemaker.decode(stored.encoded).astype(int) - np.asarray(rgb)).mean() < 6


def test_alpha_is_composited_on_white():
    rgba = np.zeros((10, 20, 4), np.uint8)
    rgba[:, :10] = (255, 0, 0, 255)      # opaque red
    rgba[:, 10:] = (0, 0, 255, 0)        # fully transparent blue
    stored = convert_image(imagemaker.encode(Image.fromarray(rgba, 'RGBA'), 'PNG'),
                           ImageOptions(jpeg_quality=100))
    pixels = imagemaker.decode(stored.encoded).astype(int)
    assert np.abs(pixels[:, 2:8] - (255, 0, 0)).max() < 12
    assert np.abs(pixels[:, 13:] - (255, 255, 255)).max() < 12


def test_palette_png_with_transparency():
    image = Image.new('P', (16, 16), 0)
    image.putpalette([0, 255, 0] + [0, 0, 0] * 255)
    image.paste(1, (8, 0, 16, 16))
    data = imagemaker.encode(image, 'PNG', transparency=1)
    pixels = imagemaker.decode(convert_image(data, ImageOptions(jpeg_quality=100)).encoded).astype(int)
    assert np.abs(pixels[:, 1:5] - (0, 255, 0)).max() < 12
    assert np.abs(pixels[:, 11:] - (255, 255, 255)).max() < 12


def test_sixteen_bit_png_is_scaled_not_clipped():
    samples = np.full((8, 8), 65535, np.uint16)
    samples[:, 4:] = 32896  # 128 * 257
    stored = convert_image(imagemaker.encode(Image.fromarray(samples), 'PNG'),
                           ImageOptions(jpeg_quality=100))
    pixels = imagemaker.decode(stored.encoded).astype(int)
    assert abs(pixels[:, :2].mean() - 255) < 3 and abs(pixels[:, 6:].mean() - 128) < 3


def test_interlaced_png_gif_tiff_webp_bmp_decode():
    source = imagemaker.gradient(160, 120)
    image = Image.fromarray(source)
    for fmt, kwargs in [('PNG', {'interlace': 1}), ('GIF', {}), ('TIFF', {}), ('WEBP', {'lossless': True}),
                        ('BMP', {})]:
        stored = convert_image(imagemaker.encode(image, fmt, **kwargs), ImageOptions(jpeg_quality=100))
        assert (stored.height, stored.width) == (120, 160), fmt
        tolerance = 25 if fmt == 'GIF' else 3  # GIF quantises to 256 colours.
        assert np.abs(imagemaker.decode(stored.encoded).astype(int) - source).mean() < tolerance, fmt


def test_animated_gif_keeps_first_frame():
    frames = [Image.new('RGB', (10, 10), c) for c in [(255, 0, 0), (0, 0, 255)]]
    out = io.BytesIO()
    frames[0].save(out, 'GIF', save_all=True, append_images=frames[1:])
    pixels = imagemaker.decode(convert_image(out.getvalue(), DEFAULT).encoded).astype(int)
    assert np.abs(pixels - (255, 0, 0)).max() < 12


@pytest.mark.parametrize('orientation,size', [(2, (200, 300)), (3, (200, 300)), (4, (200, 300)),
                                              (5, (300, 200)), (6, (300, 200)), (7, (300, 200)),
                                              (8, (300, 200))])
def test_exif_rotation_is_applied(orientation, size):
    data = imagemaker.exif_rotated_jpeg(300, 200, orientation)
    stored = convert_image(data, ImageOptions(jpeg_quality=100))
    assert (stored.height, stored.width) == size
    expected = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert('RGB'))
    assert np.abs(imagemaker.decode(stored.encoded).astype(int) - expected).mean() < 3
    assert 0x0112 not in Image.open(io.BytesIO(stored.encoded)).getexif()


def test_exif_rotation_can_be_disabled():
    data = imagemaker.exif_rotated_jpeg(300, 200, 6)
    stored = convert_image(data, ImageOptions(apply_exif_orientation=False))
    assert stored.encoded == data and (stored.height, stored.width) == (200, 300)


def test_truncated_jpeg_is_rejected_as_damaged():
    data = imagemaker.jpeg(400, 300)
    with pytest.raises(DamagedImageError, match='damaged JPEG: Premature end of JPEG file'):
        convert_image(data[: len(data) // 2], DEFAULT)


def test_empty_and_garbage_are_rejected():
    with pytest.raises(ImageError, match='empty file'):
        convert_image(b'', DEFAULT)
    with pytest.raises(ImageError, match='not an image'):
        convert_image(b'this is a text file', DEFAULT)


def test_decompression_bomb_is_rejected_before_decoding():
    data = imagemaker.encode(Image.new('L', (5000, 5000)), 'PNG')
    with pytest.raises(ImageError, match='max_image_pixels'):
        convert_image(data, ImageOptions(max_image_pixels=1_000_000))


def test_resize_keeps_aspect_and_never_upscales():
    assert target_size(4000, 3000, ImageOptions(max_side=1000)) == (1000, 750)
    assert target_size(4000, 3000, ImageOptions(max_pixels=120_000)) == (400, 300)
    assert target_size(400, 300, ImageOptions(max_side=1000, max_pixels=10**9)) == (400, 300)
    stored = convert_image(imagemaker.jpeg(1600, 1200), ImageOptions(max_side=400))
    assert (stored.width, stored.height) == (400, 300) and not stored.passed_through
    assert imagemaker.decode(stored.encoded).shape == (300, 400, 3)


def test_resize_after_exif_rotation_uses_upright_size():
    data = imagemaker.exif_rotated_jpeg(800, 400, 6)
    stored = convert_image(data, ImageOptions(max_side=200))
    assert (stored.width, stored.height) == (100, 200)


def test_jpeg_that_libjpeg_only_warns_about_is_judged_like_pillow():
    data = imagemaker.jpeg(200, 100)
    sos = data.index(b'\xff\xda')
    warned = data[:sos] + b'\x00\x01' + data[sos:]  # "2 extraneous bytes before marker"
    stored = convert_image(warned, DEFAULT)
    assert stored.passed_through and stored.encoded == warned
    reencoded = convert_image(warned, ImageOptions(reencode=True))
    assert (reencoded.width, reencoded.height) == (200, 100)
    with pytest.raises(ImageError, match='truncated'):
        convert_image(warned[:len(warned) // 2], DEFAULT)


@pytest.mark.parametrize('orientation', range(1, 9))
def test_a_png_is_turned_upright_as_its_strips_are_converted(orientation, monkeypatch):
    monkeypatch.setattr(images, 'STRIP_PIXELS', 30 * 7)   # Strips of 7 rows, the last one short.
    y, x = np.mgrid[:50, :30]
    image = Image.fromarray(np.stack([x * 8, y * 5, 250 - y * 5, 128 + x * 4], -1)
                            .astype(np.uint8), 'RGBA')
    exif = Image.Exif()
    exif[0x0112] = orientation
    stream = io.BytesIO()
    image.save(stream, 'PNG', exif=exif)
    stored = convert_image(stream.getvalue(), ImageOptions(jpeg_quality=100))
    expected = ImageOps.exif_transpose(Image.open(io.BytesIO(stream.getvalue()))).convert('RGBA')
    white = Image.new('RGB', expected.size, (255, 255, 255))
    white.paste(expected, mask=expected.getchannel('A'))
    decoded = np.asarray(Image.open(io.BytesIO(stored.encoded)), dtype=np.int16)
    assert decoded.shape == np.asarray(white).shape
    assert np.abs(decoded - np.asarray(white, dtype=np.int16)).mean() < 3


def test_a_png_private_chunk_is_skipped_and_the_pixels_are_the_same():
    plain = io.BytesIO()
    Image.fromarray(np.arange(48 * 32 * 3, dtype=np.uint8).reshape(32, 48, 3)).save(plain, 'PNG')
    png, padding = plain.getvalue(), bytes(1 << 20)
    padded = png[:33] + imagemaker.png_chunk(b'zzZz', padding) + png[33:]
    opened = Image.open(png_stream(padded))
    assert opened.private_chunks == []
    assert np.array_equal(np.asarray(opened), np.asarray(Image.open(io.BytesIO(png))))
    assert convert_image(padded, ImageOptions()) == convert_image(png, ImageOptions())


def _with_chunk(png: bytes, kind: bytes, body: bytes, after_pixels: bool = False) -> bytes:
    """`png` with a chunk added after IHDR, or just before IEND."""
    at = len(png) - 12 if after_pixels else 33
    return png[:at] + imagemaker.png_chunk(kind, body) + png[at:]


_RGB = Image.fromarray(imagemaker.gradient(40, 30))


@pytest.mark.parametrize('name,data,plain', [
    ('RGB', imagemaker.encode(_RGB, 'PNG'), True),
    ('grey', imagemaker.encode(_RGB.convert('L'), 'PNG'), True),
    ('text', _with_chunk(imagemaker.encode(_RGB, 'PNG'), b'tEXt', b'Software\0gimp'), True),
    ('text after the pixels', _with_chunk(imagemaker.encode(_RGB, 'PNG'), b'tEXt',
                                          b'Software\0gimp', after_pixels=True), False),
    ('short pHYs after the pixels', _with_chunk(imagemaker.encode(_RGB, 'PNG'), b'pHYs', b'abc',
                                                after_pixels=True), False),
    ('a second header', _with_chunk(imagemaker.encode(_RGB, 'PNG'), b'IHDR',
                                    imagemaker.encode(_RGB, 'PNG')[16:29]), False),
    ('a frame without animation control', _with_chunk(imagemaker.encode(_RGB, 'PNG'), b'fcTL',
                                                      bytes(26)), False),
    ('EXIF after the pixels', _with_chunk(imagemaker.encode(_RGB, 'PNG'), b'eXIf',
                                          b'MM\0*\0\0\0\x08\0\0', after_pixels=True), False),
    ('raw EXIF profile', _with_chunk(imagemaker.encode(_RGB, 'PNG'), b'zTXt',
                                     b'Raw profile type exif\0\0' + zlib.compress(b'x')), False),
    ('XMP', _with_chunk(imagemaker.encode(_RGB, 'PNG'), b'iTXt',
                        b'XML:com.adobe.xmp\0\0\0\0\0<x/>', after_pixels=True), False),
    ('transparency', imagemaker.encode(_RGB.convert('L'), 'PNG', transparency=7), False),
    ('palette', imagemaker.encode(_RGB.convert('P'), 'PNG'), False),
    ('alpha', imagemaker.encode(_RGB.convert('RGBA'), 'PNG'), False),
    ('16-bit', imagemaker.encode(_RGB.convert('I;16'), 'PNG'), False),
    ('animated', _with_chunk(imagemaker.encode(_RGB, 'PNG'), b'acTL', bytes(8)), False),
    ('no IEND', imagemaker.encode(_RGB, 'PNG')[:-12], False),
    ('a small suggested palette', _with_chunk(imagemaker.encode(_RGB, 'PNG'), b'sPLT',
                                              b'p\0\x08' + bytes(6 * 10)), True),
    ('a suggested palette of 120 KB', _with_chunk(imagemaker.encode(_RGB, 'PNG'), b'sPLT',
                                                  b'p\0\x08' + bytes(6 * 20_000)), False),
])
def test_a_png_goes_to_libspng_only_when_pillow_would_apply_nothing_to_its_samples(
        name, data, plain):
    """Plain PNGs (8-bit grey or RGB, nothing to composite, turn or look up) are decoded by
    libspng, the rest by Pillow; either way the record holds the pixels Pillow decodes."""
    assert plain_png(data) is plain
    if plain:
        pixels = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert('RGB'))
        stored = convert_image(data, ImageOptions())
        assert stored.encoded == simplejpeg.encode_jpeg(
            pixels, quality=95, colorspace='RGB', colorsubsampling='420', fastdct=False)
        assert (stored.phash, stored.phash_mirrored) == perceptual_hashes(pixels)


def test_a_png_oriented_by_xmp_alone_is_turned_upright():
    xmp = b'<x:xmpmeta><rdf:Description tiff:Orientation="6"/></x:xmpmeta>'
    data = _with_chunk(imagemaker.encode(_RGB, 'PNG'), b'iTXt',
                       b'XML:com.adobe.xmp\0\0\0\0\0' + xmp, after_pixels=True)
    stored = convert_image(data, ImageOptions())
    assert (stored.width, stored.height) == (30, 40)


def test_a_plain_png_whose_pixel_stream_fails_its_checksum_is_refused_as_pillow_refuses_it():
    png = imagemaker.encode(_RGB, 'PNG')
    at = png.index(b'IDAT')
    length = int.from_bytes(png[at - 4:at], 'big')
    stream = png[at + 4:at + 4 + length - 4] + bytes(4)   # The zlib stream's Adler-32 zeroed.
    broken = png[:at - 4] + imagemaker.png_chunk(b'IDAT', stream) + png[at + 8 + length:]
    assert plain_png(broken)
    with pytest.raises(ImageError, match='broken data stream'):
        convert_image(broken, ImageOptions())


@pytest.mark.parametrize('mode', ['RGB', 'L'])
def test_reencoding_a_clean_jpeg_takes_verdict_pixels_and_hashes_from_one_decode(mode):
    """With --reencode a clean JPEG is decoded once, strictly, and hashed from those pixels; a
    damaged one is still judged damaged (and skipped by default)."""
    data = imagemaker.encode(Image.open(io.BytesIO(imagemaker.jpeg(seed=3))).convert(mode), 'JPEG')
    pixels = simplejpeg.decode_jpeg(data, colorspace='RGB')
    stored = convert_image(data, ImageOptions(reencode=True))
    assert stored.encoded == simplejpeg.encode_jpeg(
        pixels, quality=95, colorspace='RGB', colorsubsampling='420', fastdct=False)
    assert (stored.phash, stored.phash_mirrored) == perceptual_hashes(pixels, single=True)
    assert not stored.passed_through and stored.damage == ''
    with pytest.raises(DamagedImageError, match='damaged JPEG: .*Premature end of JPEG file'):
        convert_image(data[:len(data) * 2 // 3], ImageOptions(reencode=True))


def test_hashes_in_single_precision_have_the_bits_of_double_precision_on_photos():
    """--reencode hashes full-size pixels in float32: on photos, RGB and grey, every bit is the
    one float64 gives (the default's hashes of the same pixels)."""
    for seed in range(12):
        pixels = imagemaker.photo(375, 500, seed=seed)
        for view in (pixels, pixels[:, :, 1]):
            hashes = perceptual_hashes(view, single=True)
            assert hashes == perceptual_hashes(view) and hashes[0] != hashes[1]

"""Decode, validate and normalise one image into the JPEG bytes a record stores.

Every image is decoded once in full. JPEGs kept as they are are decoded at a reduced scale (the
one the perceptual hash reads; 1/8 with --leakage=off), which still entropy-decodes the whole
stream and so catches truncation, at a fraction of the IDCT work. With --reencode a clean RGB or
grey JPEG is decoded once, strictly, at the size it is stored at: that decode is its verdict,
its pixels and what its hashes read. Output is always an RGB,
3-channel JPEG: alpha is composited on white, 16-bit samples are scaled down, palettes,
grayscale and CMYK/YCCK are converted, and EXIF orientation is applied.

Pillow reads headers and every format; libjpeg-turbo through simplejpeg decodes clean RGB and
grayscale JPEGs and encodes all output, being faster at both; libspng through imagecodecs
(which checks the zlib stream's checksum, as Pillow does) decodes plain 8-bit grey and RGB PNGs
(png_chunks.plain_png) to the same pixels in about 0.6 of Pillow's time, and where it fails
Pillow decodes and judges. Every JPEG gets a verdict from strict libjpeg-turbo (jpeg_check.py):
a damaged one (it decodes only with libjpeg warnings) is skipped, kept or re-encoded from
Pillow's decode as --damaged_images says; one libjpeg-turbo cannot decode at all is judged by
Pillow, as is every other format. Every stored image gets a perceptual hash and a mirror hash
(phash.py), from the same reduced-scale decode for JPEGs and from the final pixels otherwise
(none with --leakage=off; in single precision with --reencode, whose pixels are full size).
The header of a plain JPEG (size, components, EXIF orientation) is read here without Pillow,
which costs a tenth as much; any header this reading does not fully vouch for is left to
Pillow, so both readings agree on every image (tests/test_jpeg_header.py).
Memory: an image Pillow decodes is converted to upright RGB pixels a strip at a time and then
let go, and its hash reads the pixels a block at a time, so a 9400x9400 PNG (just under the
default --max_image_pixels) takes about 0.65 GB: Pillow's decode (4 bytes a pixel) and the
pixels (3); libspng holds only the pixels. The input bytes are held meanwhile, and WebP decodes
with copies, so an image whose file and decode (DECODE_BYTES_PER_PIXEL) would hold more than
BUDGET_BYTES_PER_PIXEL of --max_image_pixels is refused as too large.
"""
import dataclasses
import io
import math
import struct

import imagecodecs
import numpy as np
import simplejpeg
from PIL import Image

from pipeline.base.choices import DamagedAction
from pipeline.base.settings import ImageOptions
from pipeline.quality.jpeg_check import DAMAGED, check_jpeg
from pipeline.quality.phash import perceptual_hashes
from transforms.png_chunks import plain_png, png_stream

# Size limits are enforced by `convert_image` with a message that names the flag to change.
Image.MAX_IMAGE_PIXELS = None

_ORIENTATION_TAG = 0x0112
_SIXTEEN_BIT_MODES = ('I;16', 'I;16B', 'I;16L', 'I;16N', 'I')
@dataclasses.dataclass(frozen=True)
class StoredImage:
    """The JPEG bytes a record stores, with the size of the image they hold."""
    encoded: bytes
    height: int
    width: int
    passed_through: bool
    damage: str = ''        # libjpeg's reason when the input is a damaged JPEG that was stored
    phash: int = 0          # Perceptual hash (phash.py) of the image and of its mirror image.
    phash_mirrored: int = 0


class ImageError(ValueError):
    """An input that cannot become a record; the message is the reason shown to the user."""


class DamagedImageError(ImageError):
    """A damaged JPEG skipped by --damaged_images=skip."""


def target_size(width: int, height: int, options: ImageOptions) -> tuple[int, int]:
    """The (width, height) after `--max_pixels` / `--max_side`, keeping aspect; never larger."""
    scale = 1.0
    if options.max_pixels and width * height > options.max_pixels:
        scale = math.sqrt(options.max_pixels / (width * height))
    if options.max_side and max(width, height) * scale > options.max_side:
        scale = options.max_side / max(width, height)
    if scale >= 1.0:
        return width, height
    return max(1, int(width * scale)), max(1, int(height * scale))


def convert_image(data: bytes, options: ImageOptions, hashed: bool = True) -> StoredImage:
    """Validates `data` and returns what to store; raises ImageError with the reason. Without
    `hashed` (--leakage=off) its perceptual hashes are left 0."""
    if not data:
        raise ImageError('empty file')
    try:
        header = jpeg_header(data)
        image = None if header else Image.open(png_stream(data))
        width, height = (header.width, header.height) if header else image.size
        if width * height > options.max_image_pixels:
            raise ImageError(
                f'image is {width}x{height} = {width * height} pixels, above --max_image_pixels '
                f'{options.max_image_pixels} (raise the flag if such images are expected)')
        if image is not None:
            _check_decode_memory(image, len(data), options.max_image_pixels)
        plain = image is not None and image.format == 'PNG' and plain_png(data)
        orientation = 1
        if options.apply_exif_orientation and not plain:   # A plain PNG has none to apply.
            orientation = header.orientation if header else image.getexif().get(_ORIENTATION_TAG, 1)
        rgb_jpeg = header.components == 3 if header else (image.format == 'JPEG'
                                                          and image.mode == 'RGB')
        is_jpeg = header is not None or image.format == 'JPEG'
        size = target_size(width, height, options)
        pixels = (_strict_rgb(data, (width, height), size, orientation)   # Its verdict too.
                  if options.reencode and header is not None and header.components != 4 else None)
        check = check_jpeg(data, width, height, hashed) if is_jpeg and pixels is None else None
        damage = check.reason if check is not None and check.verdict == DAMAGED else ''
        if damage and options.damaged_images == DamagedAction.SKIP:
            raise DamagedImageError(f'damaged JPEG: {damage} (strict libjpeg-turbo; '
                                    '--damaged_images=keep or reencode converts such files)')
        cmyk = (header.components if header else len(image.getbands())) == 4
        luma = _orient(check.pixels, orientation) if check is not None and not cmyk else None
        keep = (rgb_jpeg and orientation in (1, None) and size == (width, height)
                and not options.reencode
                and not (damage and options.damaged_images == DamagedAction.REENCODE))
        if keep:
            if check is None:  # libjpeg-turbo cannot decode it: Pillow has the last word.
                luma = _pillow_draft(data, width, height, image)
            return StoredImage(data, height, width, True, damage, *_hashes(luma, hashed))
        if pixels is None and plain:
            pixels = _plain_png_rgb(data)
        if pixels is None:
            pixels = _decode_rgb(image or Image.open(png_stream(data)), data, size, bool(damage),
                                 orientation)
        image = None   # Pillow's decode (4 bytes a pixel) goes; the pixels are all there is.
        final = (size[1], size[0]) if orientation in (5, 6, 7, 8) else size
        if (pixels.shape[1], pixels.shape[0]) != final:
            pixels = np.asarray(Image.fromarray(pixels).resize(final, Image.Resampling.BICUBIC))
        encoded = simplejpeg.encode_jpeg(np.ascontiguousarray(pixels), quality=options.jpeg_quality,
                                         colorspace='RGB', colorsubsampling='420', fastdct=False)
        hashes = _hashes(pixels if luma is None else luma, hashed, single=options.reencode)
        return StoredImage(encoded, pixels.shape[0], pixels.shape[1], False, damage, *hashes)
    except ImageError:
        raise
    except Image.DecompressionBombError as exc:
        raise ImageError(str(exc)) from None
    except _DECODE_ERRORS as exc:
        raise ImageError(_describe(exc)) from None


# What Pillow's readers raise on a malformed file: besides the usual, a chunk cut short after a
# PNG's pixels (a 1-byte gAMA, an empty iCCP) fails as an index or struct error.
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError, KeyError, struct.error)

DECODE_BYTES_PER_PIXEL = {'WEBP': 19}   # Measured peaks; libwebp cannot decode by strips.
PILLOW_BYTES_PER_PIXEL = 8   # Pillow's decode (up to 4 bytes a pixel) and the RGB pixels (3).
BUDGET_BYTES_PER_PIXEL = 9   # Of --max_image_pixels: what one conversion may hold at once.


def _check_decode_memory(image: Image.Image, size: int, max_image_pixels: int) -> None:
    """Raises ImageError when converting `image` (decoded by Pillow from a file of `size`
    bytes, which stay held meanwhile) would hold more than --max_image_pixels allows."""
    per_pixel = DECODE_BYTES_PER_PIXEL.get(image.format, PILLOW_BYTES_PER_PIXEL)
    width, height = image.size
    cost, budget = size + width * height * per_pixel, max_image_pixels * BUDGET_BYTES_PER_PIXEL
    if cost > budget:
        raise ImageError(
            f'image is {width}x{height} {image.format}, which takes about {cost / 1e6:.0f} MB to '
            f'convert ({per_pixel} bytes a pixel plus the {size / 1e6:.0f} MB file), above the '
            f'{budget / 1e6:.0f} MB that --max_image_pixels {max_image_pixels} allows '
            f'({BUDGET_BYTES_PER_PIXEL} bytes a pixel; raise the flag if such images are expected)')


def _hashes(pixels: np.ndarray, hashed: bool, single: bool = False) -> tuple[int, int]:
    return perceptual_hashes(pixels, single) if hashed else (0, 0)


def _pillow_draft(data: bytes, width: int, height: int, image: Image.Image | None) -> np.ndarray:
    """A JPEG decoded by Pillow at about 1/8 scale (raises if it is truncated or corrupt)."""
    image = image or Image.open(io.BytesIO(data))
    image.draft('RGB', (max(1, width // 8), max(1, height // 8)))
    image.load()
    return np.asarray(_to_rgb(image))


@dataclasses.dataclass(frozen=True)
class JpegHeader:
    """What a JPEG's header says, as Pillow reports it: size, components (1: L, 3: RGB,
    4: CMYK) and the EXIF orientation (1 when there is none)."""
    width: int
    height: int
    components: int
    orientation: int


_SOF = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF,
                  0xDE))
_SKIPPED = frozenset((0xC4, 0xCC, 0xDA, 0xDC, 0xDD, 0xDF, 0xFE))  # DHT DAC SOS DNL DRI EXP COM
_TIFF_UNIT = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4,
              16: 8}   # Bytes per value of each TIFF type Pillow reads.


def jpeg_header(data: bytes) -> JpegHeader | None:
    """The header of a JPEG, read without Pillow; None unless it is one whose header Pillow
    reads the same way without trouble: markers back to back up to the first scan, every
    segment whole, one 8-bit frame of 1, 3 or 4 components, at most one EXIF block (well-formed,
    with at most one SHORT orientation), and nothing Pillow interprets further (XMP, which can
    carry an orientation; MPF, which makes an MPO; Photoshop blocks; short JFIF, Adobe or ICC
    segments). Pillow reads everything else, so both agree on every file."""
    if not data.startswith(b'\xff\xd8\xff'):
        return None
    pos, frame, exif = 2, None, None
    while True:
        if pos + 4 > len(data) or data[pos] != 0xFF:
            return None
        marker, length = data[pos + 1], data[pos + 2] << 8 | data[pos + 3]
        segment = data[pos + 4:pos + 2 + length]
        if length < 2 or len(segment) != length - 2:
            return None
        pos += 2 + length
        if marker in _SOF:
            if frame or len(segment) < 6 or (len(segment) - 6) % 3 or segment[0] != 8:
                return None
            frame = segment[3] << 8 | segment[4], segment[1] << 8 | segment[2], segment[5]
        elif marker == 0xDB:
            if not _quantization_tables_whole(segment):
                return None
        elif 0xE0 <= marker <= 0xEF:
            if marker == 0xE1 and segment.startswith(b'Exif\0\0'):
                if exif is not None:
                    return None
                exif = segment[6:]
            elif not _app_segment_plain(marker, segment):
                return None
        elif marker == 0xDA:
            break
        elif marker not in _SKIPPED:
            return None
    if not frame or not frame[0] or not frame[1] or frame[2] not in (1, 3, 4):
        return None
    orientation = 1 if exif is None else _exif_orientation(exif)
    return JpegHeader(*frame, orientation) if orientation is not None else None


def _quantization_tables_whole(segment: bytes) -> bool:
    pos = 0
    while pos < len(segment):
        pos += 1 + 64 * (1 if segment[pos] < 16 else 2)
    return pos == len(segment)


def _app_segment_plain(marker: int, segment: bytes) -> bool:
    """Whether Pillow stores an APPn segment without reading more from it than is there."""
    if marker == 0xE0 and segment.startswith(b'JFIF'):
        return len(segment) >= 12
    if marker == 0xEE and segment.startswith(b'Adobe'):
        return len(segment) >= 12
    if marker == 0xE2 and segment.startswith(b'ICC_PROFILE\0'):
        return len(segment) >= 14
    return not ((marker == 0xE1 and segment.startswith(b'http://ns.adobe.com/xap/1.0/\0'))
                or (marker == 0xE2 and segment.startswith(b'MPF\0'))
                or (marker == 0xED and segment.startswith(b'Photoshop 3.0\0')))


def _exif_orientation(tiff: bytes) -> int | None:
    """The orientation in a well-formed EXIF block's first directory (1 if absent); None when
    the block is anything else."""
    if not tiff:
        return 1
    order = {b'II*\0': '<', b'MM\0*': '>'}.get(tiff[:4])
    if order is None or len(tiff) < 8:
        return None
    directory = struct.unpack_from(order + 'L', tiff, 4)[0]
    if directory + 2 > len(tiff):
        return None
    count = struct.unpack_from(order + 'H', tiff, directory)[0]
    if directory + 2 + 12 * count + 4 > len(tiff):
        return None
    orientation = None
    for entry in range(directory + 2, directory + 2 + 12 * count, 12):
        tag, kind, values, offset = struct.unpack_from(order + 'HHLL', tiff, entry)
        unit = _TIFF_UNIT.get(kind)
        if unit is None or (values * unit > 4 and offset + values * unit > len(tiff)):
            return None
        if tag == _ORIENTATION_TAG:
            if orientation is not None or kind != 3 or values != 1:
                return None
            orientation = struct.unpack_from(order + 'H', tiff, entry + 8)[0]
    return 1 if orientation is None else orientation


def _decode_rgb(image: Image.Image, data: bytes, size: tuple[int, int], damaged: bool,
                orientation: int) -> np.ndarray:
    """The full image as 8-bit RGB pixels (HxWx3), turned upright by `orientation`; JPEGs to
    be downscaled are decoded at a reduced scale. A damaged JPEG is Pillow's decode, or
    libjpeg-turbo's lenient one where Pillow gives up (a truncated file)."""
    if damaged:
        try:
            return _pillow_rgb(image, size, orientation)
        except _DECODE_ERRORS:
            return _orient(simplejpeg.decode_jpeg(data, colorspace='RGB', strict=False),
                           orientation)
    if image.format == 'JPEG' and image.mode in ('RGB', 'L'):
        pixels = _strict_rgb(data, image.size, size, orientation)
        if pixels is not None:
            return pixels
    return _pillow_rgb(image, size, orientation)


def _strict_rgb(data: bytes, full: tuple[int, int], size: tuple[int, int],
                orientation: int) -> np.ndarray | None:
    """An RGB or grey JPEG of `full` (width, height) as pixels (HxWx3) at `size` (scaled at
    decode when smaller), upright, from one strict libjpeg-turbo decode, which is also its
    verdict (ok); None when strict libjpeg-turbo refuses it."""
    scaled = size != full
    try:
        return _orient(simplejpeg.decode_jpeg(data, colorspace='RGB', strict=True,
                                              min_height=size[1] if scaled else 0,
                                              min_width=size[0] if scaled else 0), orientation)
    except ValueError:
        return None


def _plain_png_rgb(data: bytes) -> np.ndarray | None:
    """A plain PNG's pixels (png_chunks.plain_png) as 8-bit RGB, decoded by libspng; None
    when it cannot decode them (Pillow then has the last word)."""
    try:
        pixels = imagecodecs.spng_decode(data)
    except imagecodecs.SpngError:
        return None
    return pixels if pixels.ndim == 3 else np.repeat(pixels[:, :, None], 3, axis=2)


def _pillow_rgb(image: Image.Image, size: tuple[int, int], orientation: int) -> np.ndarray:
    if image.format == 'JPEG' and size != image.size:
        image.draft(image.mode, size)
    image.load()
    return _rgb_array(image, orientation)


STRIP_PIXELS = 1 << 22   # Pixels converted at once (every conversion of _to_rgb is per pixel).


_INVERSE = {6: 8, 8: 6}   # Every other orientation undoes itself.


def _rgb_array(image: Image.Image, orientation: int) -> np.ndarray:
    """A decoded image's pixels as 8-bit RGB (HxWx3), converted a strip of rows at a time and
    written straight into the upright array: a whole-image conversion, np.asarray, and a
    contiguous copy of a rotated view would each hold it again at once (a 9400x9400 PNG took
    over a gigabyte besides Pillow's own decode)."""
    width, height = image.size
    turned = orientation in (5, 6, 7, 8)
    upright = np.empty((width, height, 3) if turned else (height, width, 3), np.uint8)
    pixels = _orient(upright, _INVERSE.get(orientation, orientation))   # A view of `upright`.
    step = max(1, STRIP_PIXELS // width)
    for top in range(0, height, step):
        strip = _to_rgb(image.crop((0, top, width, min(height, top + step))))
        pixels[top:top + strip.height] = np.asarray(strip)
    return upright


def _describe(exc: Exception) -> str:
    text = str(exc)
    if text.startswith('cannot identify image file'):
        return 'not an image Pillow can read (cannot identify image file)'
    if 'truncated' in text:
        return f'truncated image ({text})'
    return f'cannot decode image: {text}'


def _orient(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """Applies an EXIF orientation (2-8) so the image is stored upright."""
    if orientation == 2:
        return pixels[:, ::-1]
    if orientation == 3:
        return pixels[::-1, ::-1]
    if orientation == 4:
        return pixels[::-1]
    if orientation == 5:
        return pixels.transpose(1, 0, 2)
    if orientation == 6:
        return np.rot90(pixels, -1)
    if orientation == 7:
        return pixels.transpose(1, 0, 2)[::-1, ::-1]
    if orientation == 8:
        return np.rot90(pixels, 1)
    return pixels


def _to_rgb(image: Image.Image) -> Image.Image:
    """Converts any decoded mode to 8-bit RGB; transparency is composited on white."""
    if image.mode in _SIXTEEN_BIT_MODES:
        samples = np.clip(np.asarray(image, dtype=np.int64), 0, 65535) // 257
        image = Image.fromarray(samples.astype(np.uint8), 'L')
    elif image.mode == 'F':
        image = Image.fromarray(np.clip(np.asarray(image), 0, 255).astype(np.uint8), 'L')
    has_alpha = image.mode in ('RGBA', 'LA', 'PA', 'RGBa', 'La') or (
        image.mode in ('P', 'L', 'RGB') and 'transparency' in image.info)
    if has_alpha:
        rgba = image.convert('RGBA')
        background = Image.new('RGB', rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel('A'))
        return background
    return image if image.mode == 'RGB' else image.convert('RGB')

"""Decode, validate and normalise one image into the JPEG bytes a record stores.

Every image is decoded once in full. JPEGs kept as they are are decoded at 1/8 scale, which
still entropy-decodes the whole stream and so catches truncation, at a fraction of the IDCT
work. Output is always an RGB, 3-channel JPEG: alpha is composited on white, 16-bit samples are
scaled down, palettes, grayscale and CMYK/YCCK are converted, and EXIF orientation is applied.

Pillow reads headers and every format; libjpeg-turbo through simplejpeg decodes clean RGB and
grayscale JPEGs and encodes all output, being faster at both. A JPEG that libjpeg-turbo only
warns about (extraneous bytes, say) is judged by Pillow instead, so what is accepted is what
Pillow accepts.
"""
import dataclasses
import io
import math

import numpy as np
import simplejpeg
from PIL import Image

# Size limits are enforced by `convert_image` with a message that names the flag to change.
Image.MAX_IMAGE_PIXELS = None

_ORIENTATION_TAG = 0x0112
_SIXTEEN_BIT_MODES = ('I;16', 'I;16B', 'I;16L', 'I;16N', 'I')


@dataclasses.dataclass(frozen=True)
class ImageOptions:
    """How images are normalised; every field is a pipeline flag of the same name."""
    jpeg_quality: int = 95
    reencode: bool = False
    apply_exif_orientation: bool = True
    max_pixels: int = 0
    max_side: int = 0
    max_image_pixels: int = 89_478_485


@dataclasses.dataclass(frozen=True)
class StoredImage:
    """The JPEG bytes a record stores, with the size of the image they hold."""
    encoded: bytes
    height: int
    width: int
    passed_through: bool


class ImageError(ValueError):
    """An input that cannot become a record; the message is the reason shown to the user."""


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


def convert_image(data: bytes, options: ImageOptions) -> StoredImage:
    """Validates `data` and returns what to store; raises ImageError with the reason."""
    if not data:
        raise ImageError('empty file')
    try:
        image = Image.open(io.BytesIO(data))
        width, height = image.size
        if width * height > options.max_image_pixels:
            raise ImageError(
                f'image is {width}x{height} = {width * height} pixels, above --max_image_pixels '
                f'{options.max_image_pixels} (raise the flag if such images are expected)')
        orientation = image.getexif().get(_ORIENTATION_TAG, 1) if options.apply_exif_orientation else 1
        size = target_size(width, height, options)
        keep = (image.format == 'JPEG' and image.mode == 'RGB' and orientation in (1, None)
                and size == (width, height) and not options.reencode)
        if keep:
            _validate_jpeg(image, data)
            return StoredImage(data, height, width, passed_through=True)
        pixels = _orient(_decode_rgb(image, data, size), orientation)
        final = (size[1], size[0]) if orientation in (5, 6, 7, 8) else size
        if (pixels.shape[1], pixels.shape[0]) != final:
            pixels = np.asarray(Image.fromarray(pixels).resize(final, Image.Resampling.BICUBIC))
        encoded = simplejpeg.encode_jpeg(np.ascontiguousarray(pixels), quality=options.jpeg_quality,
                                         colorspace='RGB', colorsubsampling='420', fastdct=False)
        return StoredImage(encoded, pixels.shape[0], pixels.shape[1], passed_through=False)
    except ImageError:
        raise
    except Image.DecompressionBombError as exc:
        raise ImageError(str(exc)) from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise ImageError(_describe(exc)) from None


def _validate_jpeg(image: Image.Image, data: bytes) -> None:
    """Decodes a JPEG at 1/8 scale; raises if it is truncated or corrupt."""
    width, height = image.size
    try:
        simplejpeg.decode_jpeg(data, colorspace='RGB', fastdct=True, fastupsample=True,
                               min_height=max(1, height // 8), min_width=max(1, width // 8))
    except ValueError:  # A libjpeg-turbo warning or error: Pillow has the last word.
        image.draft('RGB', (max(1, width // 8), max(1, height // 8)))
        image.load()


def _decode_rgb(image: Image.Image, data: bytes, size: tuple[int, int]) -> np.ndarray:
    """The full image as 8-bit RGB pixels (HxWx3); JPEGs to be downscaled are decoded at a
    reduced scale."""
    if image.format == 'JPEG' and image.mode in ('RGB', 'L'):
        scaled = size != image.size
        try:
            return simplejpeg.decode_jpeg(data, colorspace='RGB',
                                          min_height=size[1] if scaled else 0,
                                          min_width=size[0] if scaled else 0)
        except ValueError:
            pass
    if image.format == 'JPEG' and size != image.size:
        image.draft(image.mode, size)
    image.load()
    return np.asarray(_to_rgb(image))


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

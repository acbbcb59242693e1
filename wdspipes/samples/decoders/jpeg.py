"""JPEG decoding through libjpeg-turbo (the ``simplejpeg`` package), straight into numpy.

Image specs decode a field whose bytes start with a JPEG marker (``FF D8 FF``) here, whatever
its extension, and, to make the same pixels as Pillow (whose wheels use libjpeg-turbo too, with
the same accurate DCT and smooth upsampling), ask for grey output only of grey JPEGs: a colour
JPEG in mode L is decoded to RGB and converted by Pillow's formula. What this module cannot
decode, it leaves to Pillow (:func:`decode` returns None): CMYK and YCCK JPEGs (Pillow and
libjpeg-turbo convert them differently), JPEGs libjpeg-turbo refuses or finds damaged
(12-bit, lossless, truncated: Pillow then decodes them or says why not), and every JPEG when
simplejpeg is not installed.

>>> import io, numpy as np, PIL.Image
>>> jpeg = io.BytesIO()
>>> PIL.Image.new("RGB", (40, 30), (200, 30, 60)).save(jpeg, "JPEG")
>>> header = read_header(jpeg.getvalue())
>>> header
JpegHeader(width=40, height=30, colorspace='YCbCr')
>>> decode(jpeg.getvalue(), header, "RGB", scale=4).shape  # at 4/8 of the size
(15, 20, 3)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from PIL import Image

__all__ = [
    "FAST_SCALES",
    "JPEG_MAGIC",
    "JpegHeader",
    "decode",
    "decode_image",
    "fast_scale",
    "is_jpeg",
    "read_header",
    "scaled",
]

JPEG_MAGIC = b"\xff\xd8\xff"
"""The first bytes of every JPEG file: start of image, then the next marker's FF."""

_OUTPUT = {"L": "GRAY", "RGB": "RGB", "RGBA": "RGBA"}
_UNSET: Any = object()
_library: Any = _UNSET


def _simplejpeg() -> Any:
    """The simplejpeg module, or None where it is not installed (looked up once)."""
    global _library
    if _library is _UNSET:
        try:
            import simplejpeg
        except ImportError:
            simplejpeg = None
        _library = simplejpeg
    return _library


class JpegHeader(NamedTuple):
    """The size and colour space of a JPEG that :func:`decode` can decode."""

    width: int
    height: int
    colorspace: str  # "Gray", "YCbCr" or "RGB"


def is_jpeg(data: bytes) -> bool:
    """Whether ``data`` starts as a JPEG file does."""
    return data[:3] == JPEG_MAGIC


def read_header(data: bytes) -> JpegHeader | None:
    """The header of a JPEG that :func:`decode` can decode, or None (leave it to Pillow): not
    a JPEG, CMYK or YCCK, a header libjpeg-turbo cannot read, or no simplejpeg. The caller
    checks its size (see :func:`~wdspipes.samples.decoders.images.check_pixels`)."""
    simplejpeg = _simplejpeg()
    if simplejpeg is None or not is_jpeg(data):
        return None
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except (ValueError, RuntimeError):
        return None
    if colorspace not in ("Gray", "YCbCr", "RGB"):
        return None
    return JpegHeader(int(width), int(height), colorspace)


FAST_SCALES = (1, 2, 4, 8)
"""The scales M (decoding at M/8 of the size) that libjpeg-turbo decodes fastest, by its SIMD
inverse DCTs. At 3/8 it takes as long as at 4/8, at 5/8, 6/8 and 7/8 longer than in full."""


def fast_scale(needed: int) -> int:
    """The smallest of :data:`FAST_SCALES` at least ``needed`` (at most 8)."""
    return next(scale for scale in FAST_SCALES if scale >= min(needed, 8))


def scaled(length: int, scale: int) -> int:
    """A side of ``length`` pixels decoded at ``scale``/8, as libjpeg-turbo rounds it (up)."""
    return -(-length * scale // 8)


def decode(data: bytes, header: JpegHeader, mode: str, scale: int = 8) -> np.ndarray | None:
    """The pixels of a JPEG, in Pillow ``mode`` L, RGB or RGBA, as a new writable ``uint8``
    array (height x width, x 3 or 4 channels), decoded at ``scale``/8 of its size; None where
    libjpeg-turbo fails on the data (leave it to Pillow, which decodes or explains).

    At a scale below 8 whose output size a smaller scale also gives (tiny images), the smaller
    scale is used: the output size is what counts.
    """
    grey = mode == "L" and header.colorspace == "Gray"
    pixels = _decode(data, header, "RGBX" if mode == "L" and not grey else _OUTPUT[mode], scale)
    if pixels is None or mode != "L":
        return pixels
    return pixels.reshape(pixels.shape[:2]) if grey else _luma(pixels)


def decode_image(data: bytes, header: JpegHeader, mode: str, scale: int = 8) -> Image.Image | None:
    """As :func:`decode`, but a Pillow image on the decoded memory (no copy), to resize: mode
    RGBX where ``mode`` is RGB (Pillow keeps RGB in 4 bytes a pixel; convert what is made of
    it to RGB)."""
    from PIL import Image

    if mode != "RGB":
        pixels = decode(data, header, mode, scale)
        return None if pixels is None else Image.fromarray(pixels)
    pixels = _decode(data, header, "RGBX", scale)
    if pixels is None:
        return None
    size = (pixels.shape[1], pixels.shape[0])
    return Image.frombuffer("RGBX", size, pixels, "raw", "RGBX", 0, 1)


def _decode(data: bytes, header: JpegHeader, output: str, scale: int) -> np.ndarray | None:
    """simplejpeg's array, in its ``output`` layout; None where it refuses the data."""
    smaller = {}
    if scale < 8:
        smaller = {
            "min_height": scaled(header.height, scale),
            "min_width": scaled(header.width, scale),
        }
    try:
        pixels: np.ndarray = _simplejpeg().decode_jpeg(data, output, **smaller)
    except (ValueError, RuntimeError):
        return None
    return pixels


def _luma(rgbx: np.ndarray) -> np.ndarray:
    """Grey levels of RGBX pixels by Pillow's own conversion, so that they are Pillow's."""
    from PIL import Image

    height, width = rgbx.shape[:2]
    image = Image.frombuffer("RGBX", (width, height), rgbx, "raw", "RGBX", 0, 1)
    return np.array(image.convert("L"))

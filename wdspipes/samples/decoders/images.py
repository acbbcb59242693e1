"""Image decoding by a spec string such as ``"rgb8"`` or ``"torchrgb"``, optionally smaller.

| spec | result |
|---|---|
| ``l8 rgb8 rgba8`` | numpy ``uint8``, height x width (x channels) |
| ``l rgb rgba`` | numpy ``float32`` in [0, 1] |
| ``torchl8 torchrgb8 torchrgba8`` | torch ``uint8``, (channels x) height x width |
| ``torchl torchrgb torchrgba``, ``torch`` (= ``torchrgb``) | torch ``float32`` in [0, 1] |
| ``pil pilrgb pill pilrgba`` | ``PIL.Image`` in mode RGB, RGB, L, RGBA |

Grey images have no channel axis. The decoder applies to the fields whose last extension (in any
case) is in its table of formats, :data:`IMAGE_FORMATS` by default, and opens each only in the
formats that its extension names there: a ``.jpg`` field as a JPEG, a ``.png`` field as a PNG.
Data of another format is a :class:`ImageFormatError` naming the format found (a ``.jpg``
field holding PostScript says so), never opened by another of Pillow's plugins; Pillow's EPS
plugin, which runs Ghostscript, is never used. An image of more than ``max_pixels`` pixels
(:data:`MAX_PIXELS`, Pillow's own threshold, by default) is a :class:`ImageTooLargeError`,
found from its header before any pixel is decoded. Other fields are left to later handlers.

JPEG data is decoded by libjpeg-turbo straight into the array (see
:mod:`wdspipes.samples.decoders.jpeg`), with the pixels Pillow gives; the rest, and the ``pil``
specs, by Pillow. Arrays and tensors are new, writable and contiguous.

``resize=`` and ``crop=`` (a :class:`~wdspipes.samples.decoders.geometry.RandomResizedCrop`) give
images of the training size; a JPEG is then decoded only at the scale they need (1/8, 2/8,
4/8 or in full: see :func:`~wdspipes.samples.decoders.jpeg.fast_scale`).

>>> import io, PIL.Image
>>> png = io.BytesIO()
>>> PIL.Image.new("RGB", (3, 2), (255, 0, 0)).save(png, format="PNG")
>>> array = ImageDecoder("rgb8")(".png", png.getvalue())
>>> array.shape, array.dtype, array[0, 0].tolist()
((2, 3, 3), dtype('uint8'), [255, 0, 0])
>>> ImageDecoder("torchl")(".PNG", png.getvalue()).shape
torch.Size([2, 3])
>>> jpeg = io.BytesIO(); PIL.Image.new("RGB", (640, 480)).save(jpeg, format="JPEG")
>>> ImageDecoder("torchrgb8", resize=224)(".jpg", jpeg.getvalue()).shape
torch.Size([3, 224, 298])
>>> ImageDecoder("rgb8")(".png", jpeg.getvalue())
Traceback (most recent call last):
...
wdspipes.errors.ImageFormatError: a .png field holds JPEG data, not PNG: \
not opened (a field opens only in the formats its extension names)
"""

from __future__ import annotations

import io
import random
import struct
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from wdspipes.core.arguments import int_at_least
from wdspipes.errors import ImageFormatError, ImageTooLargeError
from wdspipes.samples.decoders import jpeg
from wdspipes.samples.decoders.basic import last_extension
from wdspipes.samples.decoders.geometry import (
    Plan,
    RandomResizedCrop,
    ResizeSize,
    check_resize,
    render,
    render_pixels,
    resize_plan,
)

if TYPE_CHECKING:
    from PIL import Image

__all__ = [
    "IMAGE_FORMATS",
    "IMAGE_SPECS",
    "MAX_PIXELS",
    "REFUSED_FORMATS",
    "ImageDecoder",
    "ImageFormatError",
    "ImageTooLargeError",
    "check_pixels",
    "image_extensions",
    "open_image",
]

IMAGE_FORMATS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(["jpg", "jpeg", "jpe", "jfif"], ("JPEG",)),
    "png": ("PNG",),
    "webp": ("WEBP",),
    "gif": ("GIF",),
    **dict.fromkeys(["tif", "tiff"], ("TIFF",)),
    "bmp": ("BMP",),
    **dict.fromkeys(["ppm", "pgm", "pbm", "pnm"], ("PPM",)),
}
"""Field extension (lower-case) -> the Pillow formats a field of that extension is opened in:
the formats the writers write and GIF. Give ``ImageDecoder(formats=...)`` another table for
others (``{"ico": "ICO"}``), or to accept fields that hold another format than their extension
names (``{"jpg": ("JPEG", "PNG")}``)."""

REFUSED_FORMATS = frozenset({"EPS"})
"""Pillow formats never opened from data: their plugin runs an external program (EPS and
PostScript: Ghostscript, whose ``-dSAFER`` sandbox has been escaped many times)."""

MAX_PIXELS = 89_478_485
"""The most pixels (width x height) of an image decoded by default: Pillow's
``Image.MAX_IMAGE_PIXELS``, above which Pillow only warns (and refuses at twice as many). As
8-bit RGB that is 256 MiB; as ``float32`` RGB (``"rgb"``, ``"torchrgb"``), 1 GiB."""


# spec -> (library, element type, Pillow mode)
IMAGE_SPECS: dict[str, tuple[str, str, str]] = {
    "l8": ("numpy", "uint8", "L"),
    "rgb8": ("numpy", "uint8", "RGB"),
    "rgba8": ("numpy", "uint8", "RGBA"),
    "l": ("numpy", "float", "L"),
    "rgb": ("numpy", "float", "RGB"),
    "rgba": ("numpy", "float", "RGBA"),
    "torchl8": ("torch", "uint8", "L"),
    "torchrgb8": ("torch", "uint8", "RGB"),
    "torchrgba8": ("torch", "uint8", "RGBA"),
    "torchl": ("torch", "float", "L"),
    "torchrgb": ("torch", "float", "RGB"),
    "torch": ("torch", "float", "RGB"),
    "torchrgba": ("torch", "float", "RGBA"),
    "pill": ("pil", "", "L"),
    "pil": ("pil", "", "RGB"),
    "pilrgb": ("pil", "", "RGB"),
    "pilrgba": ("pil", "", "RGBA"),
}


def image_extensions() -> frozenset[str]:
    """The field extensions that image specs decode by default: those of
    :data:`IMAGE_FORMATS`, lower-case, without the dot."""
    return frozenset(IMAGE_FORMATS)


def open_image(
    data: bytes, formats: Sequence[str], max_pixels: int | None = MAX_PIXELS, extension: str = ""
) -> Image.Image:
    """The image in ``data`` opened by Pillow in one of ``formats`` (its header read, its
    pixels not decoded yet: ``load()`` or ``convert()`` decode them), checked for size. No
    other of Pillow's plugins sees the data.

    Args:
        data: the field's bytes.
        formats: Pillow format names, tried in order.
        max_pixels: the most pixels (width x height) allowed; None for no limit.
        extension: the field's extension, for the messages.

    Raises:
        ImageFormatError: the data is none of ``formats`` (the message names the format it is,
            if Pillow knows it), or is one and Pillow cannot read its header.
        ImageTooLargeError: more pixels than ``max_pixels``.
    """
    from PIL import Image

    what = f"a .{extension} field" if extension else "the data"
    prefix = data[:16]
    for name in formats:
        if name not in Image.OPEN:
            Image.preinit()  # the common plugins (JPEG, PNG, GIF, BMP, PPM) alone
            if name not in Image.OPEN:
                Image.init()  # all the others (WebP, TIFF, ...)
        factory, accept = Image.OPEN[name]
        if accept is not None and accept(prefix) is not True:
            continue  # Pillow's plugins return True, or a string of doubt (then not opened)
        try:
            image: Image.Image = factory(io.BytesIO(data), "")
        except (SyntaxError, IndexError, TypeError, struct.error, OSError) as exn:
            raise ImageFormatError(f"{what} holds damaged {name} data: {exn}") from exn
        check_pixels(image.width, image.height, max_pixels)
        return image
    found = _format_of(prefix)
    held = f"{found} data" if found is not None else "data of no image format Pillow knows"
    raise ImageFormatError(
        f"{what} holds {held}, not {' or '.join(formats)}: not opened (a field opens only in "
        "the formats its extension names)"
    )


def check_pixels(width: int, height: int, max_pixels: int | None) -> None:
    """Raise :class:`ImageTooLargeError` if a ``width`` x ``height`` image has more than
    ``max_pixels`` pixels."""
    if max_pixels is not None and width * height > max_pixels:
        raise ImageTooLargeError(
            f"an image of {width} x {height} = {width * height:,} pixels, over the limit of "
            f"{max_pixels:,} (max_pixels): a decompression bomb, or a limit to raise"
        )


def _format_of(prefix: bytes) -> str | None:
    """The Pillow format whose plugin recognises ``prefix``, to name it in an error: only the
    plugins' checks of the first bytes run, never a plugin itself."""
    from PIL import Image

    Image.init()
    for name in Image.ID:
        accept = Image.OPEN[name][1]
        if accept is not None and accept(prefix) is True:
            return name
    return None


def _image_formats(
    formats: Mapping[str, str | Sequence[str]] | None, extensions: frozenset[str] | None
) -> dict[str, tuple[str, ...]]:
    """The table ``extension -> formats`` of an ImageDecoder, checked: only ``extensions`` of
    it if given, every format one Pillow has and none of :data:`REFUSED_FORMATS` (a table
    given as ``formats``; the default one is known to be so)."""
    table = {
        extension.lower(): tuple(
            name.upper() for name in ([names] if isinstance(names, str) else names)
        )
        for extension, names in (IMAGE_FORMATS if formats is None else formats).items()
    }
    if extensions is not None:
        unknown = sorted(set(extensions) - set(table))
        if unknown:
            raise ValueError(
                f"no image format for the extensions {', '.join(unknown)}: give "
                f"formats={{extension: Pillow format, ...}} (by default: {' '.join(table)})"
            )
        table = {extension: table[extension] for extension in extensions}
    if formats is None:
        # The default table holds formats Pillow has (tests/test_images.py): no need to load
        # all of Pillow's plugins to check it, 70 ms that every pipeline's first batch waited.
        return table
    from PIL import Image

    Image.init()
    for extension, names in table.items():
        for name in names:
            if name in REFUSED_FORMATS:
                raise ValueError(
                    f"the {name} format (for .{extension}) is never opened: Pillow's plugin "
                    "runs an external program (Ghostscript)"
                )
            if name not in Image.OPEN:
                raise ValueError(f"Pillow opens no format {name!r} (for .{extension})")
    return table


class ImageDecoder:
    """A decode handler for image fields, by spec (see the module's table).

    Args:
        spec: the image spec.
        extensions: the field extensions it decodes, lower-case; by default every one of
            ``formats``.
        resize: the size to give every image: ``N`` makes the shorter side N pixels and keeps
            the aspect (torchvision's ``Resize(N)``), ``(height, width)`` that size exactly.
        crop: a random resized crop for every image (not with ``resize``). It draws from the
            generator that the ``decode`` stage hands over for each sample (``rng``).
        formats: field extension -> the Pillow format (or formats) a field of that extension
            is opened in; :data:`IMAGE_FORMATS` by default.
        max_pixels: the most pixels (width x height) of an image; None for no limit. Default
            :data:`MAX_PIXELS`.

    Called as ``decoder(key, data)``, or ``decoder(key, data, rng)`` with a
    ``random.Random`` for the crop (fresh entropy if not given). It returns None for fields
    of other extensions, and raises :class:`ImageFormatError` for data of a format the
    extension does not name, :class:`ImageTooLargeError` for an image over ``max_pixels``
    (the ``decode`` stage makes them :class:`~wdspipes.errors.DecodeError` naming the field).

    Raises:
        ValueError: an unknown spec, naming the known ones; a bad ``resize``; both ``resize``
            and ``crop``; an extension without a format; a format Pillow does not have, or one
            of :data:`REFUSED_FORMATS`.
    """

    def __init__(
        self,
        spec: str,
        extensions: frozenset[str] | None = None,
        *,
        resize: ResizeSize | None = None,
        crop: RandomResizedCrop | None = None,
        formats: Mapping[str, str | Sequence[str]] | None = None,
        max_pixels: int | None = MAX_PIXELS,
    ) -> None:
        if spec not in IMAGE_SPECS:
            known = " ".join(IMAGE_SPECS)
            raise ValueError(f"unknown image spec {spec!r}; known specs: {known}")
        if resize is not None and crop is not None:
            raise ValueError("give ImageDecoder resize= or crop=, not both")
        if crop is not None and not isinstance(crop, RandomResizedCrop):
            raise TypeError(f"crop must be a RandomResizedCrop, got {crop!r}")
        int_at_least("max_pixels", max_pixels, none=True)
        self.spec = spec
        self.formats = _image_formats(formats, extensions)
        self.extensions = frozenset(self.formats)
        self.max_pixels = max_pixels
        self.resize = None if resize is None else check_resize(resize)
        self.crop = crop
        self.takes_rng = crop is not None
        """Whether the ``decode`` stage hands it a generator per sample (see
        :func:`~wdspipes.samples.decoders.decode_field`)."""

    def __call__(self, key: str, data: bytes, rng: random.Random | None = None) -> Any:
        extension = last_extension(key).lower()
        formats = self.formats.get(extension)
        if formats is None:
            return None
        library, element, mode = IMAGE_SPECS[self.spec]
        header = self._jpeg_header(data, formats, library)
        if self.resize is None and self.crop is None:
            return self._full(data, header, formats, extension, library, element, mode)
        if header is None:
            full = self._open(data, formats, extension, mode)
            image = render(full, self._plan(*full.size, rng))
        else:
            plan = self._plan(header.width, header.height, rng)
            scale = jpeg.fast_scale(plan.dct_scale())
            if library != "pil" and scale == 8:
                pixels = jpeg.decode(data, header, mode)
                if pixels is not None:
                    return _result(render_pixels(pixels, plan), library, element, fresh=True)
            image = self._smaller(data, header, formats, mode, plan, scale)
        if image.mode != mode:
            image = image.convert(mode)  # RGBX, as the JPEG decoder gave it
        if library == "pil":
            return image
        return _result(np.asarray(image), library, element, fresh=False)

    def _jpeg_header(
        self, data: bytes, formats: tuple[str, ...], library: str
    ) -> jpeg.JpegHeader | None:
        """The header of a JPEG for libjpeg-turbo, where the extension takes JPEG (its size
        checked); None to leave the field to Pillow."""
        whole = self.resize is None and self.crop is None
        if "JPEG" not in formats or (library == "pil" and whole):
            return None
        header = jpeg.read_header(data)
        if header is not None:
            check_pixels(header.width, header.height, self.max_pixels)
        return header

    def _full(
        self,
        data: bytes,
        header: jpeg.JpegHeader | None,
        formats: tuple[str, ...],
        extension: str,
        library: str,
        element: str,
        mode: str,
    ) -> Any:
        if header is not None:
            pixels = jpeg.decode(data, header, mode)
            if pixels is not None:
                return _result(pixels, library, element, fresh=True)
        image = self._open(data, formats, extension, mode)
        if library == "pil":
            return image
        return _result(np.asarray(image), library, element, fresh=False)

    def _smaller(
        self,
        data: bytes,
        header: jpeg.JpegHeader,
        formats: tuple[str, ...],
        mode: str,
        plan: Plan,
        scale: int,
    ) -> Image.Image:
        """The plan carried out by Pillow's filter on the JPEG decoded at ``scale``/8 (the
        smallest fast scale that keeps the box at least the output size), or by Pillow in full
        where libjpeg-turbo refuses the data."""
        image = jpeg.decode_image(data, header, mode, scale)
        if image is None:
            return render(self._open(data, formats, "", mode), plan)
        return render(image, plan, scale / 8)

    def _open(
        self, data: bytes, formats: tuple[str, ...], extension: str, mode: str
    ) -> Image.Image:
        """The image decoded by Pillow, in ``mode``."""
        image = open_image(data, formats, self.max_pixels, extension)
        image.load()
        return image if image.mode == mode else image.convert(mode)

    def _plan(self, width: int, height: int, rng: random.Random | None) -> Plan:
        if self.crop is not None:
            return self.crop.plan(width, height, random.Random() if rng is None else rng)
        if self.resize is not None:
            return resize_plan(width, height, self.resize)
        return Plan((width, height), (0, 0, width, height), False)

    def __repr__(self) -> str:
        options = "".join(
            f", {name}={value!r}"
            for name, value in (("resize", self.resize), ("crop", self.crop))
            if value is not None
        )
        if self.formats != IMAGE_FORMATS:
            options += f", formats={self.formats!r}"
        if self.max_pixels != MAX_PIXELS:
            options += f", max_pixels={self.max_pixels!r}"
        return f"ImageDecoder({self.spec!r}{options})"


def _result(pixels: np.ndarray, library: str, element: str, fresh: bool) -> Any:
    """An image spec's result from ``uint8`` pixels, height x width (x channels): one new
    contiguous array or tensor, or ``pixels`` themselves when they are ``fresh`` (new and
    writable) and already what is asked for."""
    if library == "numpy":
        if element == "float":
            return _unit_floats(pixels, planes=False)
        return pixels if fresh else np.array(pixels, order="C")
    import torch

    if pixels.ndim == 3:
        pixels, fresh = pixels.transpose(2, 0, 1), False
    if element == "float":
        return torch.from_numpy(_unit_floats(pixels, planes=pixels.ndim == 3))
    return torch.from_numpy(pixels if fresh else np.array(pixels, order="C"))


def _unit_floats(pixels: np.ndarray, planes: bool) -> np.ndarray:
    """``pixels / 255`` as a new contiguous ``float32`` array, written in one pass (plane by
    plane where ``planes``: channels first, read across the channels of each pixel)."""
    out = np.empty(pixels.shape, np.float32)
    for source, target in zip(pixels, out, strict=True) if planes else [(pixels, out)]:
        np.divide(source, np.float32(255), out=target)
    return out

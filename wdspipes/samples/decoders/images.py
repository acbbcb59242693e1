"""Image decoding by a spec string such as ``"rgb8"`` or ``"torchrgb"``, optionally smaller.

| spec | result |
|---|---|
| ``l8 rgb8 rgba8`` | numpy ``uint8``, height x width (x channels) |
| ``l rgb rgba`` | numpy ``float32`` in [0, 1] |
| ``torchl8 torchrgb8 torchrgba8`` | torch ``uint8``, (channels x) height x width |
| ``torchl torchrgb torchrgba``, ``torch`` (= ``torchrgb``) | torch ``float32`` in [0, 1] |
| ``pil pilrgb pill pilrgba`` | ``PIL.Image`` in mode RGB, RGB, L, RGBA |

Grey images have no channel axis. The decoder applies to fields whose last extension is one
Pillow can open (jpg, png, webp, ...), in any case; it leaves other fields to later handlers.
JPEG data (by its first bytes, whatever the extension) is decoded by libjpeg-turbo straight
into the array (see :mod:`wdspipes.samples.decoders.jpeg`), with the pixels Pillow gives; the rest,
and the ``pil`` specs, by Pillow. Arrays and tensors are new, writable and contiguous.

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
"""

from __future__ import annotations

import io
import random
from typing import TYPE_CHECKING, Any

import numpy as np

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

__all__ = ["IMAGE_SPECS", "ImageDecoder", "image_extensions"]

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
    """The file extensions Pillow can open, lower-cased, without the dot."""
    from PIL import Image

    Image.init()
    return frozenset(
        extension[1:].lower()
        for extension, image_format in Image.registered_extensions().items()
        if image_format in Image.OPEN
    )


class ImageDecoder:
    """A decode handler for image fields, by spec (see the module's table).

    Args:
        spec: the image spec.
        extensions: the field extensions it decodes, lower-case; by default every one Pillow
            opens.
        resize: the size to give every image: ``N`` makes the shorter side N pixels and keeps
            the aspect (torchvision's ``Resize(N)``), ``(height, width)`` that size exactly.
        crop: a random resized crop for every image (not with ``resize``). It draws from the
            generator that the ``decode`` stage hands over for each sample (``rng``).

    Called as ``decoder(key, data)``, or ``decoder(key, data, rng)`` with a
    ``random.Random`` for the crop (fresh entropy if not given). It returns None for fields
    of other extensions.

    Raises:
        ValueError: an unknown spec, naming the known ones; a bad ``resize``; both ``resize``
            and ``crop``.
    """

    def __init__(
        self,
        spec: str,
        extensions: frozenset[str] | None = None,
        *,
        resize: ResizeSize | None = None,
        crop: RandomResizedCrop | None = None,
    ) -> None:
        if spec not in IMAGE_SPECS:
            known = " ".join(IMAGE_SPECS)
            raise ValueError(f"unknown image spec {spec!r}; known specs: {known}")
        if resize is not None and crop is not None:
            raise ValueError("give ImageDecoder resize= or crop=, not both")
        if crop is not None and not isinstance(crop, RandomResizedCrop):
            raise TypeError(f"crop must be a RandomResizedCrop, got {crop!r}")
        self.spec = spec
        self.extensions = image_extensions() if extensions is None else extensions
        self.resize = None if resize is None else check_resize(resize)
        self.crop = crop
        self.takes_rng = crop is not None
        """Whether the ``decode`` stage hands it a generator per sample (see
        :func:`~wdspipes.samples.decoders.decode_field`)."""

    def __call__(self, key: str, data: bytes, rng: random.Random | None = None) -> Any:
        if last_extension(key).lower() not in self.extensions:
            return None
        library, element, mode = IMAGE_SPECS[self.spec]
        if self.resize is None and self.crop is None:
            return self._full(data, library, element, mode)
        header = jpeg.read_header(data)
        if header is None:
            full = _open(data, mode)
            image = render(full, self._plan(*full.size, rng))
        else:
            plan = self._plan(header.width, header.height, rng)
            scale = jpeg.fast_scale(plan.dct_scale())
            if library != "pil" and scale == 8:
                pixels = jpeg.decode(data, header, mode)
                if pixels is not None:
                    return _result(render_pixels(pixels, plan), library, element, fresh=True)
            image = self._smaller(data, header, mode, plan, scale)
        if image.mode != mode:
            image = image.convert(mode)  # RGBX, as the JPEG decoder gave it
        if library == "pil":
            return image
        return _result(np.asarray(image), library, element, fresh=False)

    def _full(self, data: bytes, library: str, element: str, mode: str) -> Any:
        header = None if library == "pil" else jpeg.read_header(data)
        if header is not None:
            pixels = jpeg.decode(data, header, mode)
            if pixels is not None:
                return _result(pixels, library, element, fresh=True)
        image = _open(data, mode)
        if library == "pil":
            return image
        return _result(np.asarray(image), library, element, fresh=False)

    def _smaller(
        self, data: bytes, header: jpeg.JpegHeader, mode: str, plan: Plan, scale: int
    ) -> Image.Image:
        """The plan carried out by Pillow's filter on the JPEG decoded at ``scale``/8 (the
        smallest fast scale that keeps the box at least the output size), or by Pillow in full
        where libjpeg-turbo refuses the data."""
        image = jpeg.decode_image(data, header, mode, scale)
        if image is None:
            return render(_open(data, mode), plan)
        return render(image, plan, scale / 8)

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
        return f"ImageDecoder({self.spec!r}{options})"


def _open(data: bytes, mode: str) -> Image.Image:
    """The image decoded by Pillow, in ``mode``."""
    from PIL import Image

    image: Image.Image = Image.open(io.BytesIO(data))
    image.load()
    return image if image.mode == mode else image.convert(mode)


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

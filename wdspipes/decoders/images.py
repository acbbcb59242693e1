"""Image decoding through Pillow, by a spec string such as ``"rgb8"`` or ``"torchrgb"``.

| spec | result |
|---|---|
| ``l8 rgb8 rgba8`` | numpy ``uint8``, height x width (x channels) |
| ``l rgb rgba`` | numpy ``float32`` in [0, 1] |
| ``torchl8 torchrgb8 torchrgba8`` | torch ``uint8``, (channels x) height x width |
| ``torchl torchrgb torchrgba``, ``torch`` (= ``torchrgb``) | torch ``float32`` in [0, 1] |
| ``pil pilrgb pill pilrgba`` | ``PIL.Image`` in mode RGB, RGB, L, RGBA |

Grey images have no channel axis. The decoder applies to fields whose last extension is one
Pillow can open (jpg, png, webp, ...), in any case; it leaves other fields to later handlers.

>>> import io, PIL.Image
>>> png = io.BytesIO(); PIL.Image.new("RGB", (3, 2), (255, 0, 0)).save(png, format="PNG")
>>> array = ImageDecoder("rgb8")(".png", png.getvalue())
>>> array.shape, array.dtype, array[0, 0].tolist()
((2, 3, 3), dtype('uint8'), [255, 0, 0])
>>> ImageDecoder("torchl")(".PNG", png.getvalue()).shape
torch.Size([2, 3])
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from wdspipes.decoders.basic import last_extension

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

    Raises:
        ValueError: an unknown spec, naming the known ones.
    """

    def __init__(self, spec: str, extensions: frozenset[str] | None = None) -> None:
        if spec not in IMAGE_SPECS:
            known = " ".join(IMAGE_SPECS)
            raise ValueError(f"unknown image spec {spec!r}; known specs: {known}")
        self.spec = spec
        self.extensions = image_extensions() if extensions is None else extensions

    def __call__(self, key: str, data: bytes) -> Any:
        if last_extension(key).lower() not in self.extensions:
            return None
        from PIL import Image

        library, element, mode = IMAGE_SPECS[self.spec]
        image: Image.Image = Image.open(io.BytesIO(data))
        image.load()
        if image.mode != mode:
            image = image.convert(mode)
        if library == "pil":
            return image
        # Each result is one writable copy of the pixels: np.asarray is a read-only view.
        if element == "float":
            array = np.asarray(image).astype(np.float32)
            array /= np.float32(255)
        elif library == "numpy":
            array = np.array(image)
        else:
            array = np.asarray(image)
        if library == "numpy":
            return array
        import torch

        if array.ndim == 3:
            array = array.transpose(2, 0, 1)
        if not (array.flags.writeable and array.flags.c_contiguous):
            array = np.array(array, order="C")
        return torch.from_numpy(array)

    def __repr__(self) -> str:
        return f"ImageDecoder({self.spec!r})"

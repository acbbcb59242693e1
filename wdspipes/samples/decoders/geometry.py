"""The size and box an image is decoded to: ``resize=`` sizes and :class:`RandomResizedCrop`.

Sizes given by users are ``(height, width)``, as in torchvision; sizes and boxes passed to
Pillow are ``(width, height)`` and ``(left, upper, right, lower)``, in pixels of the full
image. A plan says what to make of an image of a given size; :func:`render` carries it out on
a decoded image, which may be the full image or one the JPEG decoder made smaller by ``scale``.

>>> import random
>>> crop = RandomResizedCrop(4, flip=0.0)
>>> crop.plan(640, 480, random.Random(1))
Plan(size=(4, 4), box=(32, 195, 308, 421), flip=False)
>>> resize_plan(640, 480, 240)
Plan(size=(320, 240), box=(0, 0, 640, 480), flip=False)
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import numpy as np

if TYPE_CHECKING:
    from PIL import Image

__all__ = ["Plan", "RandomResizedCrop", "ResizeSize", "render", "render_pixels", "resize_plan"]

ResizeSize = int | tuple[int, int]
"""``N`` (the shorter side becomes N, the aspect kept) or ``(height, width)`` (exactly)."""

ImageT = TypeVar("ImageT", np.ndarray, "Image.Image")


class Plan(NamedTuple):
    """What to make of an image: the ``size`` out (width, height), from the ``box`` (left,
    upper, right, lower) of the full image, mirrored left to right if ``flip``."""

    size: tuple[int, int]
    box: tuple[int, int, int, int]
    flip: bool

    def dct_scale(self) -> int:
        """The smallest JPEG decoding scale M (the image decoded at M/8 of its size, M from 1 to
        8) at which the box is still at least ``size`` in both directions."""
        (width, height), (left, upper, right, lower) = self.size, self.box
        needed = max(-(-8 * width // (right - left)), -(-8 * height // (lower - upper)))
        return min(max(needed, 1), 8)


def _pair(size: ResizeSize, name: str) -> tuple[int, int]:
    """``size`` checked, as ``(height, width)``; an int N is ``(N, N)``."""
    pair = (size, size) if isinstance(size, int) else size
    if not (
        isinstance(pair, tuple | list)
        and len(pair) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in pair)
    ):
        raise ValueError(f"{name} must be an int >= 1 or a (height, width) pair, got {size!r}")
    return pair[0], pair[1]


def check_resize(size: ResizeSize) -> ResizeSize:
    """``size`` if it is a valid ``resize=`` value, as an int or a ``(height, width)`` tuple.

    Raises:
        ValueError: naming the bad value.
    """
    pair = _pair(size, "resize")
    return size if isinstance(size, int) else pair


def resize_plan(width: int, height: int, size: ResizeSize) -> Plan:
    """The plan for ``resize=size`` of a ``width`` x ``height`` image: torchvision's
    ``Resize(size)`` (an int: the shorter side becomes ``size``, the longer one in proportion,
    rounded down)."""
    if isinstance(size, int):
        short, long = sorted((width, height))
        other = int(size * long / short)
        out = (size, other) if width <= height else (other, size)
    else:
        out = (size[1], size[0])
    return Plan(out, (0, 0, width, height), False)


class RandomResizedCrop:
    """A random part of the image, resized to ``size``, as torchvision's ``RandomResizedCrop``
    (bilinear, antialiased), then mirrored left to right with probability ``flip``.

    The part covers a fraction of the image's area drawn uniformly from ``scale``, with an
    aspect ratio (width / height) drawn log-uniformly from ``ratio``; after 10 draws that do not
    fit, the centre of the image, as large as ``ratio`` allows. Given to an
    :class:`~wdspipes.samples.decoders.ImageDecoder` (``crop=``), it picks the part from the
    image's size before decoding, and JPEG images are decoded only at the scale the part needs.

    Args:
        size: the output size, ``(height, width)``, or one int for a square.
        scale: the range of the part's fraction of the area.
        ratio: the range of the part's aspect ratio, width / height.
        flip: the probability of mirroring the result left to right.

    Raises:
        ValueError: a size that is not positive, ranges that are not ``0 < low <= high``
            (``scale`` at most 1), ``flip`` outside [0, 1].

    >>> import numpy as np, random
    >>> crop = RandomResizedCrop((2, 3), flip=1.0)
    >>> crop.apply(np.zeros((60, 80, 3), np.uint8), random.Random(0)).shape
    (2, 3, 3)
    """

    def __init__(
        self,
        size: ResizeSize,
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        flip: float = 0.5,
    ) -> None:
        self.size = _pair(size, "size")
        self.scale = _range(scale, "scale", 1.0)
        self.ratio = _range(ratio, "ratio", math.inf)
        if not 0.0 <= flip <= 1.0:
            raise ValueError(f"flip must be a probability in [0, 1], got {flip!r}")
        self.flip = float(flip)

    def box(self, width: int, height: int, rng: random.Random) -> tuple[int, int, int, int]:
        """The part of a ``width`` x ``height`` image to keep, as ``(left, upper, right,
        lower)``: torchvision's ``RandomResizedCrop.get_params``, drawn from ``rng``."""
        area = width * height
        log_low, log_high = math.log(self.ratio[0]), math.log(self.ratio[1])
        for _ in range(10):
            target = area * rng.uniform(*self.scale)
            aspect = math.exp(rng.uniform(log_low, log_high))
            w = round(math.sqrt(target * aspect))
            h = round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                top, left = rng.randint(0, height - h), rng.randint(0, width - w)
                return left, top, left + w, top + h
        w, h = width, height  # the fallback: the centre, within the ratios
        if width / height < self.ratio[0]:
            h = round(width / self.ratio[0])
        elif width / height > self.ratio[1]:
            w = round(height * self.ratio[1])
        left, top = (width - w) // 2, (height - h) // 2
        return left, top, left + w, top + h

    def plan(self, width: int, height: int, rng: random.Random) -> Plan:
        """The box (:meth:`box`), then whether to flip, drawn from ``rng`` in that order."""
        box = self.box(width, height, rng)
        return Plan((self.size[1], self.size[0]), box, rng.random() < self.flip)

    def apply(self, image: ImageT, rng: random.Random | None = None) -> ImageT:
        """Crop an image decoded in full: a ``uint8`` numpy array (height x width, or x 3 or 4
        channels) gives a new array, a PIL image a new image. The same ``rng`` state gives the
        same part as an ImageDecoder with ``crop=self`` (which decodes JPEGs smaller).

        Args:
            image: the full image.
            rng: the generator to draw from; None draws from fresh entropy.
        """
        from PIL import Image

        rng = random.Random() if rng is None else rng
        if isinstance(image, Image.Image):
            return render(image, self.plan(*image.size, rng))
        height, width = image.shape[:2]
        return np.array(render(Image.fromarray(image), self.plan(width, height, rng)))

    def __repr__(self) -> str:
        return (
            f"RandomResizedCrop({self.size}, scale={self.scale}, ratio={self.ratio}, "
            f"flip={self.flip})"
        )


def _range(bounds: tuple[float, float], name: str, top: float) -> tuple[float, float]:
    low, high = (float(x) for x in bounds)
    if not 0.0 < low <= high <= top:
        limit = "" if top == math.inf else f" <= {top}"
        raise ValueError(
            f"{name} must be a (low, high) pair with 0 < low <= high{limit}, got {bounds!r}"
        )
    return low, high


def render(image: Image.Image, plan: Plan, scale: float = 1.0) -> Image.Image:
    """Carry out ``plan`` on ``image``, which is the full image decoded at ``scale`` of its
    size: the box, scaled, resized to the plan's size (Pillow's antialiased bilinear filter),
    and mirrored if the plan says so."""
    from PIL import Image

    left, upper, right, lower = plan.box
    box = (left * scale, upper * scale, right * scale, lower * scale)
    result = image.resize(plan.size, Image.Resampling.BILINEAR, box=box)
    if plan.flip:
        result = result.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return result


def render_pixels(pixels: np.ndarray, plan: Plan) -> np.ndarray:
    """Carry out ``plan`` on the ``uint8`` pixels of the full image (height x width, with or
    without channels): the box cut out, then resized by torch's antialiased bilinear filter (as
    torchvision's transforms do on tensors; about 3x faster than Pillow's on this machine), and
    mirrored if the plan says so. A new contiguous array, height x width (x channels).

    Pixels match :func:`render`'s (Pillow's filter) to 0.04 levels on average; they differ
    most along the box's edges, where Pillow's filter also reads the pixels beyond the box.

    >>> pixels = np.arange(6 * 8, dtype=np.uint8).reshape(6, 8)
    >>> render_pixels(pixels, Plan((4, 3), (0, 0, 8, 6), True)).tolist()
    [[12, 11, 9, 7], [26, 25, 23, 21], [40, 39, 37, 35]]
    """
    import torch

    left, upper, right, lower = plan.box
    part = pixels[upper:lower, left:right]
    planes = torch.from_numpy(part if part.ndim == 3 else part[..., None]).permute(2, 0, 1)
    # channels last in and out: torch's vectorised uint8 filter, and pixels already in order
    planes = planes[None].contiguous(memory_format=torch.channels_last)
    width, height = plan.size
    resized = torch.nn.functional.interpolate(
        planes, size=(height, width), mode="bilinear", antialias=True
    )[0].permute(1, 2, 0)
    if plan.flip:
        resized = resized.flip(1)
    result = np.ascontiguousarray(resized.numpy())
    return result if pixels.ndim == 3 else result[..., 0]

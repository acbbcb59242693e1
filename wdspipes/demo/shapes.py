"""The demo's dataset: small RGB pictures of shapes, drawn by Pillow, one class per shape.

Each picture holds one shape (:data:`CLASSES`) of random colour, size, position and rotation
over a noisy background of another colour, with a few stray strokes of clutter in the shape's
colour. Small shapes, noise and clutter keep it from being trivial; a small CNN still learns it
in a few epochs.

The pictures follow from the seed and the split's name alone, so a dataset is the same on every
machine, and the first ``n`` samples are the same whatever the count:

>>> samples = list(shape_samples(12, seed=0, split="train"))
>>> samples[0]["__key__"], samples[0]["jpg"].shape, samples[0]["jpg"].dtype
('train-000000', (32, 32, 3), dtype('uint8'))
>>> sorted(sample["cls"] for sample in samples)
[0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
>>> again = list(shape_samples(7, seed=0, split="train"))
>>> all((a["jpg"] == b["jpg"]).all() for a, b in zip(samples, again))
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from wdspipes.write import SampleEncoder, ShardWriter

__all__ = [
    "CLASSES",
    "IMAGE_SIZE",
    "draw_shape",
    "shape_samples",
    "write_split",
]

CLASSES = ("circle", "ring", "square", "triangle", "cross", "star")
"""The class names; a sample's ``cls`` is an index into them."""

IMAGE_SIZE = 32
"""Width and height of every picture, in pixels."""

_SUPERSAMPLE = 4  # shapes are drawn this many times larger, then shrunk: smooth edges
JPEG_QUALITY = 95  # the pictures are written as JPEG, decoded by the fast JPEG path
_MIN_CONTRAST = 90  # least distance, in RGB, between a shape's colour and its background's

Point = tuple[float, float]


def draw_shape(rng: np.random.Generator, label: int, size: int = IMAGE_SIZE) -> np.ndarray:
    """A ``size`` x ``size`` RGB picture (``uint8``, height x width x 3) of a shape of class
    ``label``, every property drawn from ``rng``."""
    background, ink = _colours(rng)
    big = size * _SUPERSAMPLE
    mask = Image.new("L", (big, big), 0)
    draw = ImageDraw.Draw(mask)
    radius = rng.uniform(0.17, 0.42) * big
    margin = radius * 0.8
    centre = (rng.uniform(margin, big - margin), rng.uniform(margin, big - margin))
    _DRAWERS[CLASSES[label]](draw, centre, radius, rng.uniform(0, 2 * math.pi))
    _clutter(draw, rng, big)
    alpha = np.asarray(mask.resize((size, size), Image.Resampling.BOX), np.float32)[..., None]
    alpha /= 255
    picture = background * (1 - alpha) + ink * alpha
    picture += _background_noise(rng, size)
    pixels: np.ndarray = np.clip(picture, 0, 255).round().astype(np.uint8)
    return pixels


def _colours(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A background and a shape colour at least ``_MIN_CONTRAST`` apart."""
    background = rng.uniform(0, 255, 3)
    while True:
        ink = rng.uniform(0, 255, 3)
        if np.linalg.norm(ink - background) >= _MIN_CONTRAST:
            return background, ink


def _background_noise(rng: np.random.Generator, size: int) -> np.ndarray:
    """Pixel noise of random strength over a gentle gradient, per channel."""
    ramp = np.linspace(-1, 1, size)
    gradient = rng.uniform(-30, 30, (1, 1, 3)) * ramp[:, None, None]
    gradient = gradient + rng.uniform(-30, 30, (1, 1, 3)) * ramp[None, :, None]
    return gradient + rng.normal(0, rng.uniform(4, 24), (size, size, 3))


def _clutter(draw: ImageDraw.ImageDraw, rng: np.random.Generator, big: int) -> None:
    """Up to three thin strokes in the shape's colour, where they may touch it."""
    for _ in range(rng.integers(0, 4)):
        start = rng.uniform(0, big, 2)
        end = start + rng.uniform(-0.3, 0.3, 2) * big
        draw.line([tuple(start), tuple(end)], fill=255, width=int(rng.integers(2, 5)))


def _polygon(centre: Point, radii: list[float], angle: float) -> list[Point]:
    """The points at ``radii`` from ``centre``, evenly spaced in angle from ``angle``."""
    step = 2 * math.pi / len(radii)
    x, y = centre
    return [
        (x + r * math.cos(angle + i * step), y + r * math.sin(angle + i * step))
        for i, r in enumerate(radii)
    ]


def _circle(draw: ImageDraw.ImageDraw, centre: Point, radius: float, angle: float) -> None:
    x, y = centre
    draw.ellipse([x - radius, y - radius, x + radius, y + radius], fill=255)


def _ring(draw: ImageDraw.ImageDraw, centre: Point, radius: float, angle: float) -> None:
    x, y = centre
    width = max(1, round(radius * 0.3))
    draw.ellipse([x - radius, y - radius, x + radius, y + radius], outline=255, width=width)


def _square(draw: ImageDraw.ImageDraw, centre: Point, radius: float, angle: float) -> None:
    draw.polygon(_polygon(centre, [radius] * 4, angle), fill=255)


def _triangle(draw: ImageDraw.ImageDraw, centre: Point, radius: float, angle: float) -> None:
    draw.polygon(_polygon(centre, [radius * 1.1] * 3, angle), fill=255)


def _cross(draw: ImageDraw.ImageDraw, centre: Point, radius: float, angle: float) -> None:
    arm = radius * 0.38
    corner = math.hypot(radius, arm)
    spread = math.atan2(arm, radius)
    for offset in (0, math.pi / 2):  # two bars at right angles
        a = angle + offset
        draw.polygon(
            [
                (centre[0] + corner * math.cos(a + s), centre[1] + corner * math.sin(a + s))
                for s in (spread, math.pi - spread, math.pi + spread, -spread)
            ],
            fill=255,
        )


def _star(draw: ImageDraw.ImageDraw, centre: Point, radius: float, angle: float) -> None:
    draw.polygon(_polygon(centre, [radius * 1.1, radius * 0.45] * 5, angle), fill=255)


_DRAWERS: dict[str, Callable[[ImageDraw.ImageDraw, Point, float, float], None]] = {
    "circle": _circle,
    "ring": _ring,
    "square": _square,
    "triangle": _triangle,
    "cross": _cross,
    "star": _star,
}


def shape_samples(count: int, seed: int, split: str) -> Iterator[dict[str, Any]]:
    """The first ``count`` samples of ``split``, ready for a ShardWriter: ``__key__``, ``jpg``
    (the picture) and ``cls`` (its label).

    Each run of ``len(CLASSES)`` samples holds every class once, in random order, so the
    classes are balanced within one sample. All is drawn from one random stream per seed and
    split name.

    >>> [sample["cls"] for sample in shape_samples(8, seed=0, split="val")]
    [2, 3, 1, 0, 4, 5, 1, 0]
    """
    rng = np.random.default_rng([seed, *split.encode()])
    for start in range(0, count, len(CLASSES)):
        for index, label in enumerate(rng.permutation(len(CLASSES))[: count - start], start):
            picture = draw_shape(rng, int(label))
            yield {"__key__": f"{split}-{index:06d}", "jpg": picture, "cls": int(label)}


def write_split(
    directory: Path,
    split: str,
    count: int,
    seed: int,
    per_shard: int,
    progress: Callable[[], object] = lambda: None,
) -> list[str]:
    """Write ``split`` as shards ``<split>-0000.tar``, ... of ``per_shard`` samples in
    ``directory``, calling ``progress`` after each sample. Returns the shards' paths."""
    pattern = str(directory / f"{split}-%04d.tar")
    encoder = SampleEncoder(jpeg_quality=JPEG_QUALITY)
    with ShardWriter(pattern, maxcount=per_shard, encoder=encoder) as writer:
        for sample in shape_samples(count, seed, split):
            writer.write(sample)
            progress()
    return writer.shards

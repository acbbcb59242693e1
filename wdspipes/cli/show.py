"""``wdspipes show``: a contact sheet of the first images of a shard, each with its key and label.

Each tile holds one sample's first image field (by extension, those the image decoders take:
:data:`~wdspipes.samples.decoders.images.IMAGE_FORMATS`), scaled to fit a square of ``size``
pixels, and under it two lines of text: the key, and the label (the sample's ``cls`` or ``txt``
field) if it has one. Each image is opened as the decoders open it: only in the format its
extension names, never by a plugin that runs a program (EPS), and refused above
:data:`~wdspipes.samples.decoders.images.MAX_PIXELS` pixels before it is decoded.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import click
from PIL import Image, ImageDraw, ImageFont

from wdspipes.cli.common import (
    NO_COMMANDS,
    Stopwatch,
    counted,
    expand_shards,
    read_samples,
    summarize,
)
from wdspipes.errors import DecodeError
from wdspipes.io.sinks import open_sink

if TYPE_CHECKING:
    from wdspipes.core.stage import Sample

__all__ = ["PAD", "Tile", "contact_sheet", "first_image", "show"]

LABEL_FIELDS = ("cls", "txt")
PAD = 4
"""Pixels of margin around each image, and between it and its text."""
BACKGROUND = (255, 255, 255)
INK = (0, 0, 0)

Tile = tuple[Image.Image, str, str]
"""An image, its sample's key, and its label (possibly empty)."""


def first_image(sample: Sample) -> tuple[str, bytes] | None:
    """The first field of ``sample`` (in tar order) whose last extension is an image's.

    >>> first_image({"__key__": "a", "cls": b"1", "seg.png": b"P", "jpg": b"J"})
    ('seg.png', b'P')
    """
    from wdspipes.samples.decoders.images import IMAGE_FORMATS  # Pillow and numpy: as it reads

    for name, value in sample.items():
        if not name.startswith("__") and name.rsplit(".", 1)[-1] in IMAGE_FORMATS:
            return name, value
    return None


def label_of(sample: Sample) -> str:
    """The first line of the sample's ``cls`` or ``txt`` field, or ``""``.

    >>> label_of({"__key__": "a", "txt": b"a cat\\non a mat", "cls": b"3"})
    '3'
    """
    for name in LABEL_FIELDS:
        value = sample.get(name)
        if isinstance(value, bytes):
            lines = value.decode("utf-8", "replace").strip().splitlines()
            return lines[0] if lines else ""
    return ""


def _open_image(sample: Sample, name: str, data: bytes, size: int) -> Image.Image:
    """The image of a field, in RGBA, shrunk to fit ``size`` pixels (large photos need not be
    held whole), opened as the image decoders open it (see the module)."""
    from wdspipes.samples.decoders.images import IMAGE_FORMATS, open_image

    extension = name.rsplit(".", 1)[-1]
    try:
        with open_image(data, IMAGE_FORMATS[extension], extension=extension) as image:
            image.draft("RGB", (size, size))  # JPEG: decode at a reduced scale
            converted: Image.Image = image.convert("RGBA")
        converted.thumbnail((size, size), Image.Resampling.LANCZOS)
        return converted
    except Exception as exn:
        raise DecodeError(
            f"cannot read the image: {exn}",
            url=sample.get("__url__"),
            key=sample["__key__"],
            field=name,
        ) from exn


def collect_tiles(samples: Iterable[Sample], count: int, size: int) -> tuple[list[Tile], int]:
    """The first ``count`` images of ``samples`` as tiles, at most ``size`` pixels wide and
    high, and how many samples were read."""
    tiles: list[Tile] = []
    read = 0
    for sample in samples:
        read += 1
        found = first_image(sample)
        if found is not None:
            image = _open_image(sample, *found, size)
            tiles.append((image, sample["__key__"], label_of(sample)))
            if len(tiles) == count:
                break
    return tiles, read


def contact_sheet(tiles: Sequence[Tile], columns: int, size: int) -> Image.Image:
    """The tiles in rows of ``columns`` (fewer if there are fewer tiles), each image scaled up
    or down to fit ``size`` x ``size`` and centred, its key and label under it.

    A cell is ``size + 2 * PAD`` pixels wide and ``size + 2 * PAD`` plus two lines of text
    high.

    >>> red = Image.new("RGBA", (20, 10), "red")
    >>> contact_sheet([(red, "k", "1")] * 5, columns=2, size=16).size[0]
    48
    """
    font = ImageFont.load_default()
    line = _line_height(font)
    columns = min(columns, len(tiles))
    rows = math.ceil(len(tiles) / columns)
    width, height = size + 2 * PAD, size + 2 * PAD + 2 * line + PAD
    sheet = Image.new("RGB", (columns * width, rows * height), BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    for index, (image, key, label) in enumerate(tiles):
        left, top = (index % columns) * width, (index // columns) * height
        scale = size / max(image.size)
        new_size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        resample = Image.Resampling.LANCZOS if scale < 1 else Image.Resampling.NEAREST
        thumbnail = image.resize(new_size, resample)
        x = left + PAD + (size - thumbnail.width) // 2
        y = top + PAD + (size - thumbnail.height) // 2
        sheet.paste(thumbnail, (x, y), thumbnail)
        for number, text in enumerate((key, label)):
            text = _fit(draw, text, font, size)
            draw.text((left + PAD, top + 2 * PAD + size + number * line), text, INK, font=font)
    return sheet


def _line_height(font: ImageFont.ImageFont | ImageFont.FreeTypeFont) -> int:
    return int(font.getbbox("Ag|")[3]) + 2


def _fit(
    draw: ImageDraw.ImageDraw,
    text: str,
    font: ImageFont.ImageFont | ImageFont.FreeTypeFont,
    width: int,
) -> str:
    """``text``, shortened with an ellipsis to fit ``width`` pixels."""
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text + "…"


@click.command()
@click.argument("shard")
@click.option(
    "-o",
    "--output",
    required=True,
    help="The PNG to write: a path, - for standard output, pipe:COMMAND or a store's URL.",
)
@click.option(
    "--count", default=16, show_default=True, type=click.IntRange(min=1), help="How many images."
)
@click.option(
    "--columns", default=4, show_default=True, type=click.IntRange(min=1), help="Images per row."
)
@click.option(
    "--size",
    default=128,
    show_default=True,
    type=click.IntRange(min=8),
    help="Pixels of each image's square.",
)
@NO_COMMANDS
def show(shard: str, output: str, count: int, columns: int, size: int) -> None:
    """Draw the first images of SHARD on a contact sheet (a PNG), each with its key and
    label (the sample's cls or txt field).

    A sample gives its first image field (jpg jpeg jpe jfif png webp gif tif tiff bmp ppm pgm
    pbm pnm), opened only in the format its extension names.
    """
    clock = Stopwatch()
    samples = read_samples(expand_shards([shard]), desc=shard)
    try:
        tiles, read = collect_tiles(samples, count, size)
    finally:
        samples.close()
    if not tiles:
        from wdspipes.samples.decoders.images import IMAGE_FORMATS

        extensions = " ".join(sorted(IMAGE_FORMATS))
        raise click.ClickException(
            f"{shard}: no images in {counted(read, 'sample')} (looked for fields {extensions})"
        )
    sheet = contact_sheet(tiles, columns, size)
    picture = io.BytesIO()
    sheet.save(picture, format="PNG")
    with open_sink(output) as sink:  # complete under its name, or not there at all
        sink.write(picture.getvalue())
    summarize(
        f"show: {counted(len(tiles), 'image')} from {counted(read, 'sample')} of "
        f"{shard} on a {sheet.width} x {sheet.height} pixel sheet, written to {output} in "
        f"{clock.elapsed():.1f} s.",
        err=output == "-",
    )

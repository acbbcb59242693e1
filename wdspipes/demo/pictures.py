"""The demo's two pictures, drawn with Pillow: a sheet of predictions and a loss curve.

>>> import torch
>>> images = torch.rand(3, 3, 32, 32)
>>> prediction_sheet(images, [0, 1, 2], [0, 2, 2], ["a", "b", "c"], columns=2).width
224
>>> loss_plot([2.0, 1.5, 1.0, 0.8], [2, 2], [1.4, 0.9]).size
(720, 440)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from PIL import Image, ImageDraw, ImageFont
from torch import Tensor

__all__ = ["loss_plot", "nice_ticks", "prediction_sheet"]

Font = ImageFont.ImageFont | ImageFont.FreeTypeFont
Colour = tuple[int, int, int]

WHITE = (255, 255, 255)
INK = (0, 0, 0)
GRID = (215, 215, 215)
RIGHT = (0, 128, 0)
WRONG = (210, 0, 0)
TRAINING = (70, 130, 210)
VALIDATION = (230, 110, 0)

SCALE = 3
"""Each picture of the prediction sheet is shown this many times larger, its pixels kept."""
PAD = 8


def prediction_sheet(
    images: Tensor,
    labels: Sequence[int],
    predictions: Sequence[int],
    classes: Sequence[str],
    columns: int = 8,
) -> Image.Image:
    """The ``images`` (float, N x 3 x height x width, in [0, 1]) in rows of ``columns``, each
    enlarged, with its true class under it and the predicted one under that: green when
    right, red (and the picture framed in red) when wrong."""
    font = _font(12)
    line = _line_height(font)
    side = images.shape[-1] * SCALE
    cell_width, cell_height = side + 2 * PAD, side + 2 * PAD + 2 * line
    columns = min(columns, len(images))
    heading = 2 * line + PAD
    rows = math.ceil(len(images) / columns)
    sheet = Image.new("RGB", (columns * cell_width, heading + rows * cell_height), WHITE)
    draw = ImageDraw.Draw(sheet)
    right = sum(label == guess for label, guess in zip(labels, predictions, strict=True))
    draw.text((PAD, PAD), f"{right} of {len(labels)} predicted right", INK, font=font)
    draw.text((PAD, PAD + line), "true class, then predicted class", INK, font=font)
    for index, (image, label, guess) in enumerate(zip(images, labels, predictions, strict=True)):
        x = (index % columns) * cell_width + PAD
        y = heading + (index // columns) * cell_height + PAD
        sheet.paste(_to_pil(image).resize((side, side), Image.Resampling.NEAREST), (x, y))
        if label != guess:
            draw.rectangle([x - 3, y - 3, x + side + 2, y + side + 2], outline=WRONG, width=2)
        draw.text((x, y + side + 3), classes[label], INK, font=font)
        colour = RIGHT if label == guess else WRONG
        draw.text((x, y + side + 3 + line), classes[guess], colour, font=font)
    return sheet


def _to_pil(image: Tensor) -> Image.Image:
    """A float picture, channels first, in [0, 1], as a Pillow RGB image."""
    pixels = (image.permute(1, 2, 0).clamp(0, 1) * 255).round().byte().contiguous().numpy()
    return Image.fromarray(pixels, "RGB")


def nice_ticks(top: float, most: int = 6) -> list[float]:
    """At most ``most`` ticks from 0 to ``top`` or just past it, in a round step: 1, 2 or 5
    times a power of ten.

    >>> nice_ticks(1.83), nice_ticks(10), nice_ticks(0.07)
    ([0.0, 0.5, 1.0, 1.5, 2.0], [0.0, 2.0, 4.0, 6.0, 8.0, 10.0], [0.0, 0.02, 0.04, 0.06, 0.08])
    """
    top = top if top > 0 else 1.0
    power = 10.0 ** math.floor(math.log10(top / (most - 1)))
    step = next(f * power for f in (1, 2, 5, 10) if top / (f * power) <= most - 1)
    return [round(i * step, 12) for i in range(math.ceil(top / step - 1e-9) + 1)]


@dataclass(frozen=True)
class _Frame:
    """The plotting area: data coordinates (epoch, loss) to pixels."""

    left: int
    top: int
    right: int
    bottom: int
    epochs: float
    loss: float

    def point(self, epoch: float, loss: float) -> tuple[float, float]:
        x = self.left + (self.right - self.left) * epoch / self.epochs
        y = self.bottom - (self.bottom - self.top) * min(loss, self.loss) / self.loss
        return x, y


def loss_plot(
    step_losses: Sequence[float],
    steps_per_epoch: Sequence[int],
    validation_losses: Sequence[float],
    size: tuple[int, int] = (720, 440),
) -> Image.Image:
    """A plot of the training loss of every step and the validation loss after every epoch,
    against epochs, with axes, ticks, labels and a legend.

    ``steps_per_epoch`` says how many of ``step_losses`` each epoch holds; the steps of an
    epoch are spread evenly over it.
    """
    font = _font(13)
    line = _line_height(font)
    image = Image.new("RGB", size, WHITE)
    draw = ImageDraw.Draw(image)
    losses = [loss for loss in (*step_losses, *validation_losses) if math.isfinite(loss)]
    loss_ticks = nice_ticks(max(losses, default=1.0))
    epochs = max(len(steps_per_epoch), 1)
    frame = _Frame(70, 20 + 3 * line, size[0] - 24, size[1] - 2 * line - 24, epochs, loss_ticks[-1])
    _axes(image, draw, frame, loss_ticks, font)
    training = [frame.point(*point) for point in _step_points(step_losses, steps_per_epoch)]
    if len(training) > 1:
        draw.line(training, TRAINING, width=1)
    validation = [frame.point(i + 1, loss) for i, loss in enumerate(validation_losses)]
    if len(validation) > 1:
        draw.line(validation, VALIDATION, width=2)
    for x, y in validation:
        draw.ellipse([x - 4, y - 4, x + 4, y + 4], fill=VALIDATION)
    _centred(draw, "Cross-entropy loss of the demo's CNN", size[0] / 2, 10, font)
    _legend(draw, (frame.left + frame.right) / 2, 14 + line, font)
    return image


def _axes(
    image: Image.Image, draw: ImageDraw.ImageDraw, frame: _Frame, ticks: list[float], font: Font
) -> None:
    """Grid lines and labelled ticks of the loss, ticks of the epochs, the axes and their
    names."""
    line = _line_height(font)
    for tick in ticks:
        x, y = frame.point(0, tick)
        draw.line([(frame.left, y), (frame.right, y)], GRID)
        text = f"{tick:g}"
        draw.text((x - 8 - draw.textlength(text, font=font), y - line / 2), text, INK, font=font)
    step = 1 if frame.epochs <= 10 else nice_ticks(frame.epochs, most=11)[1]
    for epoch in range(0, int(frame.epochs) + 1, int(step)):
        x, y = frame.point(epoch, 0)
        draw.line([(x, y), (x, y + 5)], INK)
        _centred(draw, str(epoch), x, y + 7, font)
    draw.line([(frame.left, frame.top), (frame.left, frame.bottom)], INK)
    draw.line([(frame.left, frame.bottom), (frame.right, frame.bottom)], INK)
    _centred(draw, "epoch", (frame.left + frame.right) / 2, frame.bottom + 9 + line, font)
    _vertical_text(image, "loss", (18, (frame.top + frame.bottom) // 2), font)


def _step_points(
    step_losses: Sequence[float], steps_per_epoch: Sequence[int]
) -> list[tuple[float, float]]:
    """``(epoch, loss)`` of each step: step ``i`` of ``n`` in epoch ``e`` at ``e + (i+1)/n``.

    >>> _step_points([3.0, 2.0, 1.0], [2, 1])
    [(0.5, 3.0), (1.0, 2.0), (2.0, 1.0)]
    """
    losses = iter(step_losses)  # shared: zip takes from range first, so each epoch its own
    return [
        (epoch + (step + 1) / steps, loss)
        for epoch, steps in enumerate(steps_per_epoch)
        for step, loss in zip(range(steps), losses, strict=False)
    ]


def _legend(draw: ImageDraw.ImageDraw, middle: float, y: int, font: Font) -> None:
    """One line: a sample of each curve and its name, centred on ``middle``."""
    entries = [("training loss, each step", TRAINING), ("validation loss, each epoch", VALIDATION)]
    widths = [36 + draw.textlength(text, font=font) for text, _ in entries]
    x = middle - (sum(widths) + 24) / 2
    centre = y + _line_height(font) / 2
    for (text, colour), width in zip(entries, widths, strict=True):
        draw.line([(x, centre), (x + 26, centre)], colour, width=2)
        if colour == VALIDATION:
            draw.ellipse([x + 9, centre - 4, x + 17, centre + 4], fill=colour)
        draw.text((x + 34, y), text, INK, font=font)
        x += width + 24


def _centred(draw: ImageDraw.ImageDraw, text: str, middle: float, y: float, font: Font) -> None:
    draw.text((middle - draw.textlength(text, font=font) / 2, y), text, INK, font=font)


def _vertical_text(image: Image.Image, text: str, centre: tuple[int, int], font: Font) -> None:
    """Draw ``text`` turned a quarter to the left, centred on ``centre``."""
    box = font.getbbox(text)
    label = Image.new("RGB", (int(box[2]) + 2, int(box[3]) + 2), WHITE)
    ImageDraw.Draw(label).text((1, 1), text, INK, font=font)
    label = label.rotate(90, expand=True)
    image.paste(label, (centre[0] - label.width // 2, centre[1] - label.height // 2))


def _font(size: int) -> Font:
    """Pillow's own font, ``size`` pixels high where Pillow can scale it (10.1 and later)."""
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # an older Pillow: one size only
        return ImageFont.load_default()


def _line_height(font: Font) -> int:
    return int(font.getbbox("Ag|")[3]) + 3

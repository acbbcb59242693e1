"""Progress bars for long work: the ``wdspipes`` command and the demo share them."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TypeVar

from tqdm import tqdm

from wdspipes.redaction import printable, redact

__all__ = ["byte_bar", "progress"]

T = TypeVar("T")


def progress(
    iterable: Iterable[T] | None = None,
    *,
    total: int | None = None,
    unit: str = "it",
    desc: str | None = None,
) -> Any:
    """A tqdm bar on stderr that shows only when stderr is a terminal and vanishes when done.
    Its ``desc`` (a shard's URL, often) is shown without the URL's secrets and with control
    characters escaped (see :mod:`wdspipes.redaction`).

    Use it as a context manager (or iterate it to the end) so that an error closes it before
    the error line is written.
    """
    return tqdm(
        iterable,
        total=total,
        unit=unit,
        desc=_shown(desc),
        file=sys.stderr,
        disable=None,
        leave=False,
        dynamic_ncols=True,
    )


def byte_bar(show: bool, desc: str, total: int | None) -> Any:
    """A tqdm bar in bytes on standard error (shown also when it is not a terminal); none (a
    no-op bar) unless ``show``."""
    return tqdm(
        desc=_shown(desc),
        total=total,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        file=sys.stderr,
        disable=None if show else True,
        leave=False,
        dynamic_ncols=True,
    )


def _shown(desc: str | None) -> str | None:
    return None if desc is None else printable(redact(desc))

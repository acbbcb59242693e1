"""The DataPipes of the stages on samples whose logic is torch-free (:mod:`wdspipes.samples`),
each the front end of its core class."""

from __future__ import annotations

from typing import TypeVar

from wdspipes.core.datapipe import StageDataPipe, functional_stage
from wdspipes.samples import shuffle

__all__ = ["BufferShuffler"]

T = TypeVar("T")


@functional_stage("buffer_shuffle")
class BufferShuffler(shuffle.BufferShuffler[T], StageDataPipe[T]):
    """The DataPipe of :class:`wdspipes.samples.shuffle.BufferShuffler`."""

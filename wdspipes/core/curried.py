"""Curried stages: the DataPipeline vocabulary (``tarfile_to_samples()``, ``shuffle(1000)``, ...).

A :class:`Curried` holds a stage class (or a function that builds stages) and its arguments;
called with an upstream DataPipe it builds the stage on it. A factory decorated with
:func:`stage_factory` returns a Curried, and may be passed to ``DataPipeline`` uncalled, which
means "with its defaults".

>>> from wdspipes.read.shards import ShardList, ShardResampler
>>> draw_three = Curried(ShardResampler, nshards=3, seed=0)
>>> draw_three
ShardResampler(nshards=3, seed=0)
>>> len(list(draw_three(ShardList("s-{0..9}.tar"))))
3
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ParamSpec

__all__ = ["Curried", "is_stage_factory", "stage_factory"]

P = ParamSpec("P")


class Curried:
    """A stage waiting for its upstream: ``Curried(fn, *args, **kwargs)(source)`` is
    ``fn(source, *args, **kwargs)`` (a stage class built on a DataPipe is its DataPipe front
    end). Picklable when ``fn`` and the arguments are."""

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs

    def __call__(self, source: Any) -> Any:
        """``fn(source, ...)``."""
        return self.fn(source, *self.args, **self.kwargs)

    def __repr__(self) -> str:
        params = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{getattr(self.fn, '__name__', self.fn)}({', '.join(params)})"


def stage_factory(factory: Callable[P, Curried]) -> Callable[P, Curried]:
    """Mark ``factory`` as returning a :class:`Curried`, so DataPipeline may call it for the
    user."""
    factory._wds_stage_factory = True  # type: ignore[attr-defined]
    return factory


def is_stage_factory(obj: object) -> bool:
    """Whether ``obj`` is a factory marked by :func:`stage_factory`."""
    return getattr(obj, "_wds_stage_factory", False) is True

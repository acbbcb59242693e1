"""webdataset's names that wdspipes does not provide: each module of the layer lists them with
what to use instead, and its module ``__getattr__`` raises :func:`no_counterpart`'s error for
them.

>>> raise no_counterpart("wdspipes.filters", "Cached", {"Cached": "use cache_dir="})
Traceback (most recent call last):
...
AttributeError: webdataset.filters.Cached has no counterpart in wdspipes.filters: use cache_dir=
>>> raise no_counterpart("wdspipes.filters", "nothing", {})
Traceback (most recent call last):
...
AttributeError: module 'wdspipes.filters' has no attribute 'nothing'
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["no_counterpart"]


def no_counterpart(path: str, name: str, missing: Mapping[str, str]) -> AttributeError:
    """The error for ``path.name``, a name that the module at webdataset's module path ``path``
    (``wdspipes.filters``, ...) does not hold: what to use instead where ``missing`` says it
    (one of webdataset's names), else Python's own message."""
    advice = missing.get(name)
    if advice is None:
        return AttributeError(f"module {path!r} has no attribute {name!r}")
    theirs = "webdataset" + path.removeprefix("wdspipes")
    return AttributeError(f"{theirs}.{name} has no counterpart in {path}: {advice}")

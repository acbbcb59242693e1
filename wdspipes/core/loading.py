"""What webdataset's module paths (``wdspipes.filters``, ``wdspipes.shardlists``, ...) need of
loading: a name they do not define themselves, loaded from the module that holds it, or an
error saying what to use instead of one of webdataset's names that wdspipes does not provide.

``import wdspipes`` loads the whole api at once (see :mod:`wdspipes`), so nothing here waits
for torch any more.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

__all__ = ["API", "compat_name", "load_api"]

API = "wdspipes.api"


def load_api() -> ModuleType:
    """:mod:`wdspipes.api`, imported: torch and every stage loaded."""
    return importlib.import_module(API)


def compat_name(module: str, name: str, lazy: Mapping[str, str], missing: Mapping[str, str]) -> Any:
    """``module.name`` for a name that one of webdataset's module paths (``wdspipes.filters``,
    ``wdspipes.shardlists``, ...) does not define itself: a name in ``lazy`` loads from the
    module it maps to (``"wdspipes.api"``, or ``"path:attribute"`` for another name there);
    a name in ``missing``, one of webdataset's that wdspipes does not provide, is an
    AttributeError saying what to use instead.

    >>> compat_name("wdspipes.x", "gunzip", {"gunzip": "gzip:decompress"}, {})
    <function decompress at ...>
    >>> compat_name("wdspipes.x", "Cached", {}, {"Cached": "use cache_dir="})
    Traceback (most recent call last):
    ...
    AttributeError: webdataset.x.Cached has no counterpart in wdspipes.x: use cache_dir=
    """
    source = lazy.get(name)
    if source is not None:
        path, _, attribute = source.partition(":")
        return getattr(importlib.import_module(path), attribute or name)
    advice = missing.get(name)
    if advice is not None:
        theirs = "webdataset" + module.removeprefix("wdspipes")
        raise AttributeError(f"{theirs}.{name} has no counterpart in {module}: {advice}")
    raise AttributeError(f"module {module!r} has no attribute {name!r}")

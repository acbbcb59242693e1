"""The package's names load on first use, and with them torch.

``import torch`` takes 2 to 4 s, and the ``wdspipes`` command creates, lists and copies
shards without it, so ``import wdspipes`` loads nothing of torch. The package is a thin front
over :mod:`wdspipes.api`, which holds every public name and whose import loads torch and
registers every stage's functional name on ``IterDataPipe``:

- the first ``wdspipes.NAME`` loads :mod:`wdspipes.api` (:func:`api_name`);
- if torch is loaded already when wdspipes is imported, the api is loaded at once
  (:func:`load_api_if_torch_is_loaded`), so ``import torch; import wdspipes`` chains
  ``IterableWrapper(urls).open_shards()`` at once.

Nothing of torch is changed to watch for it: a program that imports wdspipes first and then
torch chains wdspipes' functional names on torch's own DataPipes once it has used a name of
wdspipes (``wds.WebDataset(...)``, ``wds.ShardList(...)``, or ``import wdspipes.api``);
before that, torch's ``AttributeError`` says the DataPipe has no such attribute.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping, MutableMapping
from types import ModuleType
from typing import Any

__all__ = [
    "API",
    "api_dir",
    "api_name",
    "compat_name",
    "load_api",
    "load_api_if_torch_is_loaded",
]

API = "wdspipes.api"


def load_api() -> ModuleType:
    """:mod:`wdspipes.api`, imported: torch and every stage loaded."""
    return importlib.import_module(API)


def api_name(package: str, name: str, namespace: MutableMapping[str, Any]) -> Any:
    """``package.name`` for a name the package module does not hold yet: loads the api, and
    keeps the value in ``namespace`` (the package's globals) for the next time.

    Raises:
        AttributeError: no such name (dunder names other than ``__all__`` never load the api,
            so that tools probing a module for ``__wrapped__`` or ``__path__`` stay cheap).
    """
    if name.startswith("__") and name != "__all__":
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    api = load_api()
    if name in namespace:  # a submodule, set on the package by the api's imports
        return namespace[name]
    try:
        value = getattr(api, name)
    except AttributeError:
        value = _submodule(package, name)  # webdataset's module paths: wds.filters, ...
    namespace[name] = value
    return value


def _submodule(package: str, name: str) -> ModuleType:
    """The submodule ``package.name``, imported.

    Raises:
        AttributeError: there is none.
    """
    try:
        return importlib.import_module(f"{package}.{name}")
    except ModuleNotFoundError as exn:
        if exn.name != f"{package}.{name}":
            raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}") from None


def compat_name(module: str, name: str, lazy: Mapping[str, str], missing: Mapping[str, str]) -> Any:
    """``module.name`` for a name that one of webdataset's module paths (``wdspipes.filters``,
    ``wdspipes.shardlists``, ...) does not define itself: a name in ``lazy`` loads from the
    module it maps to (``"wdspipes.api"``, or ``"path:attribute"`` for another name there),
    and so torch only where that module needs it; a name in ``missing``, one of webdataset's
    that wdspipes does not provide, is an AttributeError saying what to use instead.

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


def api_dir(namespace: MutableMapping[str, Any]) -> list[str]:
    """``dir(wdspipes)``: what the package holds and every name of the api."""
    return sorted({*namespace, *load_api().__all__})


def load_api_if_torch_is_loaded() -> None:
    """Load the api now if torch is loaded already, so that a program that imported torch
    first chains wdspipes' functional names on torch's DataPipes at once."""
    if "torch" in sys.modules:
        load_api()

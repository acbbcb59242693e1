"""The package's names load with torch, and not before.

``import torch`` takes 2 to 4 s, and the ``wdspipes`` command creates, lists and copies
shards without it, so ``import wdspipes`` loads nothing of torch. The package is a thin front
over :mod:`wdspipes.api`, which holds every public name and whose import loads torch and
registers every stage's functional name on ``IterDataPipe``:

- the first ``wdspipes.NAME`` loads :mod:`wdspipes.api` (:func:`api_name`);
- if torch is loaded already when wdspipes is imported, the api is loaded at once;
- otherwise the api is loaded as soon as torch is, right after torch's own import. When that
  import came from a wdspipes module still being imported (``import wdspipes.read.tar`` before
  anything else), the api cannot load then; a functional name that torch does not know, asked
  of one of its DataPipes, loads it and is asked again.

So a program may import wdspipes and torch in either order and chain at once, as when the
package loaded everything on import.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Mapping, MutableMapping, Sequence
from types import ModuleType
from typing import Any

__all__ = ["API", "api_dir", "api_name", "compat_name", "load_api", "when_torch_loads"]

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


def when_torch_loads() -> None:
    """Load the api now if torch is loaded, else offer the stages' names to torch once it is."""
    if "torch" in sys.modules:
        load_api()
    elif not any(isinstance(finder, _TorchWatch) for finder in sys.meta_path):
        sys.meta_path.insert(0, _TorchWatch())


class _TorchWatch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when torch is imported, it has torch's own loader run, then
    :func:`_offer_stages`; then it leaves ``sys.meta_path``."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenOffer(spec.loader)
        return spec


class _ThenOffer(importlib.abc.Loader):
    """torch's loader, then :func:`_offer_stages`. The module keeps torch's own loader."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _offer_stages()


def _offer_stages() -> None:
    """Load the api now that torch is loaded, unless a wdspipes module is still being imported
    (the api would import it half-made); then have a name torch's DataPipes do not know load
    the api first."""
    if not any(_initializing(name, module) for name, module in list(sys.modules.items())):
        load_api()
        return
    from torch.utils.data import IterDataPipe

    torch_getattr = IterDataPipe.__getattr__

    def getattr_offering_stages(self: IterDataPipe[Any], attribute_name: str) -> Any:
        if attribute_name not in IterDataPipe.functions and not attribute_name.startswith("_"):
            IterDataPipe.__getattr__ = torch_getattr  # type: ignore[method-assign]
            load_api()
        return torch_getattr(self, attribute_name)

    IterDataPipe.__getattr__ = getattr_offering_stages  # type: ignore[method-assign]


def _initializing(name: str, module: ModuleType | None) -> bool:
    """Whether ``module`` is a wdspipes module whose import has begun and not ended (the import
    system marks its spec so while the module runs)."""
    spec = getattr(module, "__spec__", None)
    return name.partition(".")[0] == "wdspipes" and bool(getattr(spec, "_initializing", False))

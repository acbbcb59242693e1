"""webdataset 1.0.2, the reference of the differential tests: imported without its
deprecation warnings, and run with the files it leaves open closed."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import webdataset as wdsref

__all__ = ["quietly", "wdsref"]


def quietly(run: Callable[[Any], Any], lib: Any) -> Any:
    """``run(lib)``; for webdataset (or one of its modules), which leaks one open file per
    shard, with those files closed (and their warnings silenced) before it returns."""
    if not getattr(lib, "__name__", "").startswith("webdataset"):
        return run(lib)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = run(lib)
        gc.collect()
    return result

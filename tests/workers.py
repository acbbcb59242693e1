"""Helpers of the tests that run loader workers."""

from __future__ import annotations

import sys
import warnings
from typing import Any

__all__ = ["print_warnings"]


def print_warnings(worker_id: int) -> None:
    """Show warnings on stderr in a forked worker, as without pytest: the fork inherits
    pytest's warning recorder, which would keep them in the worker (a ``worker_init_fn``)."""

    def show(message: Any, category: Any, filename: str, lineno: int, *_: Any) -> None:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno))

    warnings.showwarning = show

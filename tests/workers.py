"""Helpers of the tests that run loader workers."""

from __future__ import annotations

import sys
import warnings
from typing import Any

from torch.utils.data import DataLoader

__all__ = ["print_warnings", "two_workers"]


def print_warnings(worker_id: int) -> None:
    """Show warnings on stderr in a forked worker, as without pytest: the fork inherits
    pytest's warning recorder, which would keep them in the worker (a ``worker_init_fn``)."""

    def show(message: Any, category: Any, filename: str, lineno: int, *_: Any) -> None:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno))

    warnings.showwarning = show


def two_workers(pipe: Any) -> DataLoader[Any]:
    """A plain DataLoader of ``pipe`` with two forked workers that show their warnings on
    stderr (see :func:`print_warnings`), for a test to read with ``capfd``."""
    return DataLoader(
        pipe,
        batch_size=None,
        num_workers=2,
        multiprocessing_context="fork",
        worker_init_fn=print_warnings,
    )

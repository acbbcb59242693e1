"""torchdata's loaders as wdspipes runs them: DataLoader2, imported quietly, and mended where it
loses its way. The mends of DataLoader2 and StatefulDataLoader are :mod:`~wdspipes.loaders.compat`
(the loaders' states in :mod:`~wdspipes.loaders.loader_state`, DataLoader2's workers seen from the
main process in :mod:`~wdspipes.loaders.worker_queues`).

torchdata 0.9 is the last release with DataLoader2. It warns about that at import; wdspipes
silences exactly that warning and nothing else. The stages themselves need only torch. With
torchdata 0.10 or later (or none), :func:`dataloader2` raises a
:class:`~wdspipes.errors.TorchdataVersionError` that says what to use instead:
``StatefulDataLoader``, or ``torchdata.nodes.Loader(wds.as_node(pipe))``
(:mod:`wdspipes.nodes`); nothing else of wdspipes needs DataLoader2.

DataLoader2 also fails when workers run out of items at different times, and waits by polling;
:func:`fix_dataloader2` mends both (it lives with the other torchdata mends in
:mod:`wdspipes.loaders.compat`, and is applied by :func:`dataloader2`, when wdspipes is imported
after DataLoader2, and whenever a wdspipes graph is pickled; without DataLoader2 it does
nothing).
"""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType

from wdspipes.errors import TorchdataVersionError
from wdspipes.loaders.compat import fix_dataloader2

__all__ = ["dataloader2", "fix_dataloader2"]

_DEPRECATION = r"(?s).*The 'datapipes', 'dataloader2' modules are deprecated"

INSTEAD = (
    "use torchdata.stateful_dataloader.StatefulDataLoader, or "
    "torchdata.nodes.Loader(wds.as_node(pipe)), or install torchdata 0.9 "
    "(pip install 'torchdata==0.9.0', for Python < 3.13)"
)
"""What a program that asked for DataLoader2 can use where there is none."""


def dataloader2() -> ModuleType:
    """The ``torchdata.dataloader2`` module, without its deprecation warning, mended.

    Raises:
        TorchdataVersionError: torchdata has no DataLoader2: it is 0.10 or later, or missing
            (an ``ImportError`` too).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_DEPRECATION, category=UserWarning)
        try:
            module = importlib.import_module("torchdata.dataloader2")
        except ImportError as exn:
            needs = "DataLoader2 exists in torchdata 0.8 and 0.9 only"
            raise TorchdataVersionError.lacking(needs, INSTEAD) from exn
    fix_dataloader2()
    return module

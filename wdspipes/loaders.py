"""torchdata's DataLoader2, imported quietly, and mended where it loses its way.

torchdata 0.9 is the last release with DataLoader2. It warns about that at import; wdspipes
silences exactly that warning and nothing else. The stages themselves need only torch.

DataLoader2 also fails when workers run out of items at different times, and waits by polling;
:func:`fix_dataloader2` mends both (it lives with the other torchdata mends in
:mod:`wdspipes.core.compat`, and is applied by :func:`dataloader2`, when wdspipes is imported after
DataLoader2, and whenever a wdspipes graph is pickled).
"""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType

from wdspipes.core.compat import fix_dataloader2

__all__ = ["dataloader2", "fix_dataloader2"]

_DEPRECATION = r"(?s).*The 'datapipes', 'dataloader2' modules are deprecated"


def dataloader2() -> ModuleType:
    """The ``torchdata.dataloader2`` module, without its deprecation warning, mended.

    Raises:
        ImportError: torchdata is missing (it has no release for Python 3.13 and later).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_DEPRECATION, category=UserWarning)
        try:
            module = importlib.import_module("torchdata.dataloader2")
        except ImportError as exn:
            raise ImportError(
                "DataLoader2 needs torchdata>=0.8,<0.10, which exists for Python < 3.13: "
                "pip install 'torchdata==0.9.0'"
            ) from exn
    fix_dataloader2()
    return module

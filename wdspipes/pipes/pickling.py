"""How stages pickle, so that they take lambdas and closures wherever torch's ``.map`` does.

Two things pickle a stage. Torch's graph traversal (``traverse_dps``, which the loaders run as they
seed and split a pipeline, workers or not; wdspipes' own traversals do not pickle: see
:mod:`wdspipes.core.engine`) pickles each stage with a hook that should keep only the upstream
DataPipes; but torch's hook keeps every list, tuple and dict too, so the functions held in one
(``map_tuple``'s, ``map_dict``'s, ``decode``'s handlers) were pickled there, and a lambda failed
under a loader even without a worker process. :func:`pickled_attributes` hands that traversal
only the attributes that hold a DataPipe.

A worker process that is sent the pipeline (a ``spawn`` or ``forkserver`` worker of a
``DataLoader``, and ``DataLoader2``, which pickles its graph as it starts) must get every
function. Each attribute holding functions crosses in a :class:`PickledFunctions`: by plain
pickle where that works, else through dill when it is installed (as torch pickles lambdas),
else with a ``PicklingError`` that names the stage, the function and the fix.

>>> import pickle
>>> from torch.utils.data.datapipes.iter import IterableWrapper
>>> pipe = IterableWrapper([(1, 2)]).map_tuple(lambda x: x + 1)
>>> list(pipe)
[(2, 2)]
>>> pickle.dumps(pipe)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
_pickle.PicklingError: map_tuple (TupleMapper) cannot send fns[0] (<lambda>) to a worker \
process: ... Define it at module level (a functools.partial of such a function works too), \
or install dill (pip install dill), which wdspipes then pickles it with, as torch does
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import pickle
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from torch.utils.data import IterDataPipe, MapDataPipe

from wdspipes.core.protocol import functional_name

__all__ = ["PickledFunctions", "dill_module", "pickled_attributes", "unpickled_attributes"]

_DATAPIPES = (IterDataPipe, MapDataPipe)
_COLLECTIONS = (list, tuple, dict, set, frozenset)


def dill_module() -> ModuleType | None:
    """dill, if it is installed (torch pickles lambdas with it then); else None."""
    if importlib.util.find_spec("dill") is None:
        return None
    return importlib.import_module("dill")


def pickled_attributes(stage: IterDataPipe[Any]) -> dict[str, Any]:
    """What pickling ``stage`` takes: for torch's graph traversal (a ``getstate_hook`` is set), the
    attributes that hold DataPipes, through the hook; otherwise every attribute, those
    holding functions wrapped in :class:`PickledFunctions`."""
    attributes: dict[str, Any] = stage.__dict__
    hook = IterDataPipe.getstate_hook
    if hook is not None:
        linked = {name: value for name, value in attributes.items() if _holds_datapipe(value)}
        return hook(linked)  # type: ignore[no-any-return]
    return {
        name: PickledFunctions(value, stage, name) if _holds_functions(value) else value
        for name, value in attributes.items()
    }


def unpickled_attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    """``attributes`` as a stage keeps them: wrappers left by a shallow copy taken off."""
    return {
        name: value.value if isinstance(value, PickledFunctions) else value
        for name, value in attributes.items()
    }


class PickledFunctions:
    """An attribute of a stage holding functions (one, or a collection of them), on its way
    to another process: pickled as the value itself, through dill where pickle cannot, or
    refused with an error that says which stage and function, and what to do."""

    __slots__ = ("name", "stage", "value")

    def __init__(self, value: Any, stage: IterDataPipe[Any], name: str) -> None:
        self.value = value
        self.stage = stage
        self.name = name

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        try:
            pickle.dumps(self.value)
        except Exception as exn:  # PicklingError, or AttributeError / TypeError for locals
            dill = dill_module()
            if dill is None:
                raise pickle.PicklingError(self._refusal(exn)) from exn
            return dill.loads, (dill.dumps(self.value),)
        return _same, (self.value,)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return copy.deepcopy(self.value, memo)

    def _refusal(self, exn: Exception) -> str:
        where, culprit = self.name, self.value
        for place, item in _items(self.value):
            try:
                pickle.dumps(item)
            except Exception as item_exn:
                where, culprit, exn = f"{self.name}{place}", item, item_exn
                break
        described = getattr(culprit, "__qualname__", None) or type(culprit).__name__
        return (
            f"{_stage_name(self.stage)} cannot send {where} ({described}) to a worker process: "
            f"{type(exn).__name__}: {exn}. Define it at module level (a functools.partial of "
            "such a function works too), or install dill (pip install dill), which wdspipes "
            "then pickles it with, as torch does"
        )


def _same(value: Any) -> Any:
    return value


def _items(value: Any) -> Iterator[tuple[str, Any]]:
    """The members of a collection, with their place (``[0]``, ``['cls']``); none otherwise."""
    if isinstance(value, dict):
        yield from ((f"[{key!r}]", item) for key, item in value.items())
    elif isinstance(value, (list, tuple)):
        yield from ((f"[{index}]", item) for index, item in enumerate(value))


def _stage_name(stage: IterDataPipe[Any]) -> str:
    """``map_tuple (TupleMapper)``: the functional name, where the class has one, and class."""
    cls = type(stage)
    name = functional_name(cls)
    return cls.__name__ if name is None else f"{name} ({cls.__name__})"


def _is_function(value: Any) -> bool:
    return callable(value) and not isinstance(value, (type, *_DATAPIPES))


def _holds_functions(value: Any) -> bool:
    """A function, or a list, tuple or dict with one, and no DataPipe in it."""
    if _is_function(value):
        return True
    members = value.values() if isinstance(value, dict) else value
    return (
        isinstance(value, (list, tuple, dict))
        and any(_is_function(item) for item in members)
        and not _holds_datapipe(value)
    )


def _holds_datapipe(value: Any) -> bool:
    """A DataPipe, or a collection holding one at any depth."""
    if isinstance(value, _DATAPIPES):
        return True
    if not isinstance(value, _COLLECTIONS):
        return False
    members = value.values() if isinstance(value, dict) else value
    return any(_holds_datapipe(item) for item in members)

"""The ``torchdata.nodes`` front end: a wdspipes pipeline as a source node.

torchdata 0.10 and later build loaders of *nodes* (``torchdata.nodes.BaseNode``): iterators
that give their state and start again from one. :func:`as_node` makes a wdspipes pipeline
one, whose state is the pipeline's own (its ``state_dict``), so that
``torchdata.nodes.Loader`` saves and restores it exactly, mid-epoch as between epochs, and
other nodes (``Batcher``, ``ParallelMapper``, ``Prefetcher``, ``PinMemory``) can follow it.

Importing this module loads neither torch nor torchdata; :func:`as_node` loads
``torchdata.nodes``, and where torchdata has none (0.9 and before) it raises a
:class:`~wdspipes.errors.TorchdataVersionError`.
"""

from __future__ import annotations

import importlib
from typing import Any

from wdspipes.errors import TorchdataVersionError

__all__ = ["as_node"]

_METHODS = ("state_dict", "load_state_dict", "__iter__")


def as_node(pipe: Any) -> Any:
    """``pipe``, a wdspipes pipeline (its last stage), as a ``torchdata.nodes.BaseNode``:
    ``torchdata.nodes.Loader(wds.as_node(pipe))`` runs it with the loader's checkpoints.

    Each epoch of the loader is an iteration of the pipeline, numbered as a ``for`` loop over
    it numbers them (``pipe.set_epoch(n)`` numbers the next one ``n``). The node's state is
    ``pipe.state_dict()``, and starting from a state is ``pipe.load_state_dict(state)``
    (see :mod:`wdspipes.core.engine`): the loader restored from a state saved at any
    point delivers what the uninterrupted run would have, in the same order, that epoch and
    the epochs after it. A pipeline that cannot resume raises
    :class:`~wdspipes.errors.ResumeError` naming the stage as its state is asked for.

    The node runs the pipeline in the process that iterates it; for worker processes use
    ``StatefulDataLoader`` (or DataLoader2 with torchdata 0.9). A pipeline split among ranks
    (``split_by_node`` or the ``sharding_filter`` before the reader) is split as it is.

    Args:
        pipe: the last stage of a wdspipes pipeline (anything with ``state_dict``,
            ``load_state_dict`` and ``__iter__`` of the same meaning).

    Returns:
        A ``torchdata.nodes.BaseNode`` over ``pipe``; its ``pipeline`` attribute is ``pipe``.

    Raises:
        TorchdataVersionError: torchdata has no ``torchdata.nodes`` (it is older than 0.10,
            or missing).
        TypeError: ``pipe`` is not a pipeline that gives and takes its state.
    """
    missing = [name for name in _METHODS if not callable(getattr(pipe, name, None))]
    if missing:
        raise TypeError(
            f"as_node takes a wdspipes pipeline, which gives and takes its state; "
            f"{type(pipe).__name__} has no {', '.join(missing)}"
        )
    try:
        importlib.import_module("torchdata.nodes")
    except ImportError as exn:
        raise TorchdataVersionError.lacking(
            "wds.as_node needs torchdata.nodes, in torchdata 0.10 and later",
            "pip install 'torchdata>=0.10' (with torchdata 0.9, run the pipeline with "
            "DataLoader2 or StatefulDataLoader)",
        ) from exn
    from wdspipes.nodes.pipeline_node import PipelineNode

    return PipelineNode(pipe)

"""The node of :func:`wdspipes.nodes.as_node`: needs ``torchdata.nodes`` (torchdata 0.10+)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, TypeVar

from torchdata.nodes import BaseNode

__all__ = ["Pipeline", "PipelineNode"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Pipeline(Protocol[T_co]):
    """What :class:`PipelineNode` uses of a wdspipes pipeline: its last stage's public state
    methods, and iterating it (each iteration an epoch)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...

    def __iter__(self) -> Iterator[T_co]: ...


class PipelineNode(BaseNode[T]):  # type: ignore[misc]  # torchdata has no type hints
    """A wdspipes pipeline as a ``torchdata.nodes`` source node (see
    :func:`wdspipes.nodes.as_node`): ``reset`` begins an epoch of the pipeline, from the start
    or from a state the pipeline gave; ``get_state`` is the pipeline's state."""

    def __init__(self, pipeline: Pipeline[T]) -> None:
        super().__init__()
        self.pipeline = pipeline
        self._items: Iterator[T] | None = None

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._close()
        if initial_state is not None:
            self.pipeline.load_state_dict(initial_state)
        self._items = iter(self.pipeline)

    def next(self) -> T:
        assert self._items is not None  # BaseNode resets a node before its first next()
        return next(self._items)

    def get_state(self) -> dict[str, Any]:
        return self.pipeline.state_dict()

    def _close(self) -> None:
        """Let go of the epoch begun last (its open shards), if it did not end."""
        items, self._items = self._items, None
        close = getattr(items, "close", None)
        if close is not None:
            close()

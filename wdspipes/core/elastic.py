"""Resuming with the shards split among another number of readers: the states of all the
readers of a job merged into one (:func:`merge_pipeline_states`), which every reader of any other
split takes its share of.

A reader's state is the work it had left in the epoch, in terms every reader shares: the
sharding filter splits one list of shards (the same in every reader: the stages before it are
seeded alike), giving reader ``i`` of ``n`` the shards at indexes ``i, i + n, i + 2n, ...``; a
shard is named by that index. So the states of every reader say, together:

- which shards some reader began (:class:`ShardSet`): each reader's opener counts the shards it
  took, so reader ``i`` began ``i, i + n, ...`` up to its count;
- where each reader was in the shard it was reading (shard index, byte offset);
- the places (shard index, byte offset) of the samples its shuffle buffer held;
- the counts of the stages after (``with_epoch``'s items left).

A new reader ``j`` of ``m`` takes the share the sharding filter gives it anyway, the shards at
``j, j + m, ...`` of the same list, and of those: reads the ones no reader began, goes on with
those begun but not finished from where the old reader was, and skips the others; it takes the
buffered samples of its own shards (read again from them) into its buffer first, and its share
of the items left to ``with_epoch``. Every sample not yet delivered is delivered once, the
split is a function of the merged state and ``(j, m)`` alone, and the next epoch is a normal
epoch of ``m`` readers.

>>> began = ShardSet.taken(readers=2, counts=[3, 2])  # reader 0 took 0, 2, 4; reader 1: 1, 3
>>> began, 4 in began, 5 in began
(ShardSet(below=5), True, False)
>>> began.union(ShardSet(7, (9,)))
ShardSet(below=7, extra=(9,))
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from wdspipes.core.engine import FORMAT
from wdspipes.errors import ResumeError

__all__ = ["ShardSet", "merge_pipeline_states", "owned", "share_of"]


class ShardSet:
    """A set of shard indexes, small however many: every index below :attr:`below`, and the
    indexes in :attr:`extra` (each above it). The shards begun in an epoch have this shape:
    readers progress alike, so all of them up to some index, and a few beyond.

    >>> ShardSet(3, (5, 6)).union(ShardSet(0, (3, 4, 9))), 9 in ShardSet(3, (9,))
    (ShardSet(below=7, extra=(9,)), True)
    """

    __slots__ = ("below", "extra")

    def __init__(self, below: int = 0, extra: Iterable[int] = ()) -> None:
        found = sorted({index for index in extra if index >= below})
        while found and found[0] == below:  # take the run that continues below in
            below += 1
            found.pop(0)
        self.below = below
        self.extra = tuple(found)

    @classmethod
    def taken(cls, readers: int, counts: list[int]) -> ShardSet:
        """The shards reader ``i`` of ``readers`` takes first, ``counts[i]`` of them, for
        every ``i``: ``i, i + readers, ...`` as the sharding filter deals them."""
        below = min(i + count * readers for i, count in enumerate(counts))
        extra = (
            range(i + readers * _ceil(below - i, readers), i + count * readers, readers)
            for i, count in enumerate(counts)
        )
        return cls(below, itertools.chain.from_iterable(extra))

    def union(self, other: ShardSet) -> ShardSet:
        return ShardSet(max(self.below, other.below), itertools.chain(self.extra, other.extra))

    def __contains__(self, index: object) -> bool:
        return isinstance(index, int) and (index < self.below or index in self.extra)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ShardSet) and (self.below, self.extra) == (
            other.below,
            other.extra,
        )

    def __hash__(self) -> int:
        return hash((self.below, self.extra))

    def __repr__(self) -> str:
        extra = f", extra={self.extra}" if self.extra else ""
        return f"ShardSet(below={self.below}{extra})"

    def to_state(self) -> list[Any]:
        """Plain data for a state: ``[below, [extra...]]``."""
        return [self.below, list(self.extra)]

    @classmethod
    def from_state(cls, state: list[Any]) -> ShardSet:
        return cls(state[0], state[1])


def _ceil(numerator: int, denominator: int) -> int:
    return max(0, -(-numerator // denominator))


def owned(index: int, layout: tuple[int, int]) -> bool:
    """Whether the sharding filter gives shard ``index`` to the reader ``layout`` names,
    ``(readers, reader)``."""
    readers, reader = layout
    return index % readers == reader


def share_of(total: int, layout: tuple[int, int]) -> int:
    """The share of ``total`` items of the reader ``layout`` names, ``(readers, reader)``:
    the first ``total % readers`` readers one more than the others."""
    readers, reader = layout
    return total // readers + (reader < total % readers)


def merge_pipeline_states(states: list[dict[str, Any]]) -> dict[str, Any]:
    """The states of every reader of a job merged into one state, which loads into a pipeline
    split among any number of readers (see the module).

    Args:
        states: one pipeline state per reader (each a stage's ``state_dict()``), in any
            order; the state of a reader that had delivered nothing of the epoch may have
            ``"stages": None``.

    Raises:
        ResumeError: a state is not a pipeline state, or is merged already; the states are of
            different pipelines or epochs, or of a split among different numbers of readers;
            a reader is missing or given twice.
    """
    if not states:
        raise ResumeError("merge_states needs the states of every reader of the job, got none")
    for state in states:
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            found = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise ResumeError(
                f"not a wdspipes pipeline state (format {found!r}, expected {FORMAT!r})"
            )
        if "readers" in state:
            raise ResumeError(
                "a merged state cannot be merged again: merge the states the readers saved"
            )
    counts = {state["reader"][1] for state in states}
    if len(counts) > 1:
        raise ResumeError(
            f"the states are of splits among {sorted(counts)} readers: merge the states of one "
            "job, saved at one time"
        )
    (readers,) = counts
    by_reader = {}
    for state in states:
        index = state["reader"][0]
        if index in by_reader:
            raise ResumeError(f"the states hold reader {index}'s state twice")
        by_reader[index] = state
    missing = sorted(set(range(readers)) - by_reader.keys())
    if missing:
        raise ResumeError(
            f"the states of readers {missing} of {readers} are missing: every reader's state is "
            "needed, or the samples left to it would be lost"
        )
    epochs = {state["epoch"] for state in states} - {None}
    if len(epochs) > 1:
        raise ResumeError(f"the states are of different epochs ({sorted(epochs)})")
    ordered = [by_reader[index] for index in range(readers)]
    begun = [state for state in ordered if state["stages"] is not None]
    keys = {tuple(state["stages"]) for state in begun}
    if len(keys) > 1:
        raise ResumeError("the states are of different pipelines")
    return {
        "format": FORMAT,
        "epoch": next(iter(epochs), None),
        "seeded": any(state.get("seeded", False) for state in states),
        "readers": readers,
        "starting": [index for index, state in enumerate(ordered) if state["stages"] is None],
        "stages": (
            {key: [state["stages"][key] for state in begun] for key in begun[0]["stages"]}
            if begun
            else None
        ),
    }

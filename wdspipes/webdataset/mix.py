"""webdataset's ``webdataset.mix`` names: ``RoundRobin`` and ``RandomMix``, datasets mixed from
a list, which wdspipes' mixers are (``interleave`` and ``interleave_randomly``, see
:mod:`wdspipes.samples.mix`) with webdataset's arguments. As webdataset's are datasets, each is
a DataPipe, on which stages chain, whatever its datasets are.

>>> mixed = RoundRobin([["a", "b", "c"], [1]], longest=True)
>>> list(mixed), type(mixed).__mro__[1] is RoundRobin
(['a', 1, 'b', 'c'], True)
>>> list(mixed.batched(2, collation_fn=None))
[['a', 1], ['b', 'c']]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from wdspipes.samples.mix import Interleaver, RandomInterleaver

__all__ = ["RandomMix", "RoundRobin"]

T = TypeVar("T")


class RoundRobin(Interleaver[T]):
    """webdataset's ``RoundRobin(datasets, longest=False)``: ``interleave`` over a list of
    datasets (see :class:`~wdspipes.samples.mix.Interleaver`), a DataPipe.

    >>> list(RoundRobin([["a", "b", "c"], [1]], longest=True))
    ['a', 1, 'b', 'c']

    Raises:
        ValueError: no datasets.
    """

    def __new__(cls, /, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(cls.DataPipe)  # a DataPipe, on which stages chain

    def __init__(self, datasets: Sequence[Iterable[T]], longest: bool = False) -> None:
        if not datasets:
            raise ValueError("RoundRobin needs at least one dataset")
        super().__init__(*datasets, longest=longest)


class RandomMix(RandomInterleaver[T]):
    """webdataset's ``RandomMix(datasets, probs=None, longest=False)``: ``interleave_randomly``
    over a list of datasets (see :class:`~wdspipes.samples.mix.RandomInterleaver`), with
    ``seed`` as there, a DataPipe.

    >>> mixed = RandomMix([["a"] * 30, ["b"] * 10], probs=[3, 1], longest=True, seed=1)
    >>> sorted(mixed) == ["a"] * 30 + ["b"] * 10
    True

    Raises:
        ValueError: no datasets, or probabilities that do not fit them.
    """

    def __new__(cls, /, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(cls.DataPipe)  # a DataPipe, on which stages chain

    def __init__(
        self,
        datasets: Sequence[Iterable[T]],
        probs: Sequence[float] | None = None,
        longest: bool = False,
        seed: int | None = None,
    ) -> None:
        if not datasets:
            raise ValueError("RandomMix needs at least one dataset")
        super().__init__(*datasets, probs=probs, longest=longest, seed=seed)

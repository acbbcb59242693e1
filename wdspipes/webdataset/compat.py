"""webdataset's ``webdataset.compat`` names that wdspipes has: ``WebLoader``, a torch
``DataLoader`` on which stages chain. (``WebDataset`` and ``DataPipeline`` are wdspipes' own
ways to build a pipeline: :mod:`wdspipes.pipeline`.)
"""

from __future__ import annotations

from typing import Any, cast

from torch.utils.data import DataLoader

from wdspipes.pipeline import IterableSource

__all__ = ["WebLoader"]


class WebLoader(IterableSource):
    """webdataset's ``WebLoader``: a torch ``DataLoader(*args, **kwargs)`` on which further
    stages chain, run in the process that iterates it.

    Its use is to mix samples across worker processes: batch small in the workers, then
    ``WebLoader(pipe, batch_size=None, num_workers=4).unbatched().shuffle(1000).batched(64)``
    (``.shuffle(1000)`` is ``.buffer_shuffle(1000)``: see :mod:`wdspipes.webdataset.torch_names`).
    Every functional stage chains on it, as on any DataPipe (``unbatched``, ``batched``,
    ``map_samples``, ``to_tuple``, ``with_epoch``, ``with_length``, ...). The pipeline it
    ends cannot save its state (a :class:`~wdspipes.errors.ResumeError` says so).

    The loader collates (or, with ``batch_size=None``, converts) as torch's DataLoader does:
    a tuple of columns becomes a list of them, which ``unbatched`` reads as columns, as
    webdataset's does. As in webdataset, its ``shuffle=False`` leaves the pipeline's shuffles
    on (see :meth:`~wdspipes.samples.shuffle.BufferShuffler.set_shuffle`).

    Args:
        *args: the arguments of ``torch.utils.data.DataLoader``: the dataset first (a
            wdspipes pipeline; ``batch_size=None`` where it batches itself).
        **kwargs: the same.

    Attributes:
        loader: the ``DataLoader``.

    >>> import wdspipes as wds
    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> pipe = IterableWrapper([(n, n % 3) for n in range(10)]).batched(4)
    >>> loader = wds.WebLoader(pipe, batch_size=None).unbatched().shuffle(5).batched(5)
    >>> [len(numbers) for numbers, _ in loader]
    [5, 5]
    >>> sorted(n for numbers, _ in loader for n in numbers.tolist())
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    """

    def __new__(cls, /, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(cls.DataPipe)  # a DataPipe, on which stages chain

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(DataLoader(*args, **kwargs))

    @property
    def loader(self) -> DataLoader[Any]:
        return cast(DataLoader[Any], self.source)

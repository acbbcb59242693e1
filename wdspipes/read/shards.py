"""Shard lists: a shard spec's URLs (expanded by :mod:`wdspipes.read.specs`), drawn with
replacement, split among readers.

The shard lists yield shard items: URL strings. The stages after them (the split, shuffles,
the resampler, the opener) also take webdataset's dict items, ``{"url": ..., **fields}``, whose
other keys every sample of the shard carries (see :mod:`wdspipes.io.items`); a list given to
``ShardList`` may hold them, and ``list_shards`` expands a dict's URL as a spec.

>>> list(ShardList("a-{1..3}.tar"))
['a-1.tar', 'a-2.tar', 'a-3.tar']
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from torch.utils.data import IterDataPipe
from torch.utils.data.datapipes.iter.sharding import ShardingFilterIterDataPipe

from wdspipes.core.datapipe import StageDataPipe, functional_stage
from wdspipes.core.distributed import sharding_filter_of
from wdspipes.core.seeds import SeededStage, Seeding
from wdspipes.io.items import ShardItem, shard_url
from wdspipes.read.specs import ShardSpec, expand_urls, list_item_url

__all__ = [
    "ResampledShards",
    "ShardList",
    "ShardLister",
    "ShardResampler",
    "ShardSplit",
    "SimpleShardList",
    "is_split",
    "split_by_node",
    "split_by_worker",
]


class ShardList(StageDataPipe[ShardItem]):
    """The URLs of a shard spec, in order: the source of a pipeline.

    Args:
        urls: a shard spec (see :func:`expand_urls`), or a list of shard items: URLs, and
            dicts with a ``"url"`` as webdataset's shard lists yield, taken as they are.

    Yields:
        Each URL (or item), once per epoch.

    Raises:
        ShardItemError: a dict in the list has no string under ``"url"``.

    >>> len(ShardList(["b.tar", "a.tar"]))
    2
    >>> list(ShardList(["a.tar", {"url": "b.tar", "lang": "en"}]))
    ['a.tar', {'url': 'b.tar', 'lang': 'en'}]
    """

    restartable = True

    def __init__(self, urls: ShardSpec | Sequence[ShardItem]) -> None:
        super().__init__()
        self.urls: list[ShardItem] = _shard_items(urls)

    def __iter__(self) -> Iterator[ShardItem]:
        yield from self.urls

    def get_state(self) -> None:
        """Nothing: before the reader, the list is given again from its start."""
        return None

    def __len__(self) -> int:
        return len(self.urls)


SimpleShardList = ShardList
"""webdataset's name for :class:`ShardList`, for use in ``DataPipeline(...)``. It yields URL
strings where webdataset's yields ``{"url": ...}`` dicts (see :mod:`wdspipes.io.items`)."""


def _shard_items(urls: ShardSpec | Sequence[ShardItem]) -> list[ShardItem]:
    """The items of a shard spec, or of a list that holds dict items too (checked now)."""
    if not isinstance(urls, Sequence) or isinstance(urls, str):
        return list(expand_urls(urls))
    if not any(isinstance(item, Mapping) for item in urls):
        return list(expand_urls(urls))  # type: ignore[arg-type]
    items: list[ShardItem] = []
    for index, item in enumerate(urls):
        if isinstance(item, Mapping):
            shard_url(item)
            items.append(item)
        else:
            items.append(list_item_url(item, index))
    return items


@functional_stage("list_shards")
class ShardLister(StageDataPipe[ShardItem]):
    """Expand each shard spec of the source into URLs (functional name: ``list_shards``).

    Args:
        source_datapipe: yields shard specs (strings or lists), or dicts with a spec under
            ``"url"`` (webdataset's shard items), each expanded to one dict per URL with the
            other keys alike.

    Yields:
        The URLs (or dict items) of each spec in turn.

    Raises:
        ShardItemError: a dict has no string under ``"url"``.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper(["a-{1..2}.tar", ["b.tar"]]).list_shards())
    ['a-1.tar', 'a-2.tar', 'b.tar']
    >>> list(IterableWrapper([{"url": "c-{1..2}.tar", "lang": "en"}]).list_shards())
    [{'url': 'c-1.tar', 'lang': 'en'}, {'url': 'c-2.tar', 'lang': 'en'}]
    """

    restartable = True

    def __init__(self, source_datapipe: IterDataPipe[ShardSpec | Mapping[str, Any]]) -> None:
        super().__init__()
        self.source_datapipe = source_datapipe

    def __iter__(self) -> Iterator[ShardItem]:
        for spec in self.source_datapipe:
            if isinstance(spec, Mapping):
                for url in expand_urls(shard_url(spec)):
                    yield {**spec, "url": url}
            else:
                yield from expand_urls(spec)

    def get_state(self) -> None:
        """Nothing: before the reader, the specs are expanded again from the start."""
        return None


@functional_stage("resample_shards")
class ShardResampler(SeededStage, StageDataPipe[ShardItem]):
    """Draw shards with replacement from the source's URLs (functional name: ``resample_shards``).

    Each epoch collects the source's URLs and draws ``nshards`` of them (without end if None).
    With ``seed`` the draws depend only on the seed and the epoch; without it, on the seed the
    loader gives through ``set_seed``. Put it before ``sharding_filter`` so that every worker
    and rank draws the same stream and takes its own part of it.

    Args:
        source_datapipe: yields shard items (URLs, or dicts with a ``"url"``).
        nshards: how many shards to draw per epoch; None draws forever.
        seed: fixes the draws.

    Yields:
        Shard URLs drawn uniformly at random.

    Raises:
        ValueError: the source has no URLs.

    >>> draws = ShardList("s-{0..9}.tar").resample_shards(nshards=5, seed=1)
    >>> first, second = list(draws), list(draws)
    >>> len(first), first == second
    (5, False)
    """

    def __init__(
        self,
        source_datapipe: IterDataPipe[ShardItem],
        nshards: int | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        if nshards is not None and (not isinstance(nshards, int) or nshards < 1):
            raise ValueError(f"nshards must be a positive int or None, got {nshards!r}")
        self.source_datapipe = source_datapipe
        self.nshards = nshards
        self.seeding = Seeding(seed)

    def __iter__(self) -> Iterator[ShardItem]:
        urls = list(self.source_datapipe)
        if not urls:
            raise ValueError("resample_shards: the source yielded no shard URLs to draw from")
        rng = self.seeding.next_rng(self)
        drawn = 0
        while self.nshards is None or drawn < self.nshards:
            yield urls[rng.randrange(len(urls))]
            drawn += 1

    def __len__(self) -> int:
        if self.nshards is None:
            raise TypeError("resample_shards(nshards=None) has no length: it draws without end")
        return self.nshards


def ResampledShards(
    urls: ShardSpec | Sequence[ShardItem], nshards: int | None = None, seed: int | None = None
) -> IterDataPipe[ShardItem]:
    """Shards of ``urls`` drawn with replacement, split among ranks and workers:
    ``ShardList(urls).resample_shards(nshards, seed).sharding_filter()``.

    Every rank and worker draws the same stream (from ``seed``, or the loader's shared seed)
    and reads its own part of it, so readers never repeat one another's draws, and ``nshards``
    counts the draws of all readers together. This differs from webdataset, whose
    ``ResampledShards`` draws apart in each worker: see docs/distributed.md. Being split
    already, it needs no ``split_by_node``/``split_by_worker`` (a ``DataPipeline`` skips them).

    >>> sorted(set(ResampledShards("s-{0..1}.tar", nshards=50, seed=0)))
    ['s-0.tar', 's-1.tar']
    """
    return ShardingFilterIterDataPipe(ShardResampler(ShardList(urls), nshards=nshards, seed=seed))


class ShardSplit:
    """Marks where a pipeline splits its shards among ranks and workers.

    In ``DataPipeline(...)``, ``split_by_node`` and ``split_by_worker`` (one or both) become a
    single core ``sharding_filter`` at the first of them: DataLoader2 and plain DataLoader
    then give each rank and each worker its own shards. Called on a DataPipe, a marker
    returns ``source.sharding_filter()``. Where the source is split already (``ResampledShards``
    ends in a sharding filter), the marker changes nothing: two filters on one branch would
    make the loaders fail with "Sharding twice".
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, source: IterDataPipe[Any]) -> IterDataPipe[Any]:
        if not isinstance(source, IterDataPipe):
            raise TypeError(
                f"{self.name} splits an IterDataPipe of shard URLs; got {type(source).__name__}"
            )
        if is_split(source):
            return source
        return ShardingFilterIterDataPipe(source)

    def __repr__(self) -> str:
        return self.name


def is_split(datapipe: IterDataPipe[Any]) -> bool:
    """Whether ``datapipe`` is, or reads from, a core sharding filter."""
    return isinstance(datapipe, ShardingFilterIterDataPipe) or (
        sharding_filter_of(datapipe) is not None
    )


split_by_node = ShardSplit("split_by_node")
split_by_worker = ShardSplit("split_by_worker")

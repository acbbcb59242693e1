"""Shard lists: a shard spec's URLs (expanded by :mod:`wdspipes.read.specs`), drawn with
replacement (their split among readers: :mod:`wdspipes.pipes.read`).

The shard lists yield shard items: URL strings. The stages after them (the split, shuffles,
the resampler, the opener) also take webdataset's dict items, ``{"url": ..., **fields}``, whose
other keys every sample of the shard carries (see :mod:`wdspipes.io.items`); a list given to
``ShardList`` may hold them, and ``list_shards`` expands a dict's URL as a spec.

>>> list(ShardList("a-{1..3}.tar"))
['a-1.tar', 'a-2.tar', 'a-3.tar']
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from wdspipes.core.context import EpochContext
from wdspipes.core.protocol import Resumes, register
from wdspipes.core.stage import Stage
from wdspipes.io.items import ShardItem, shard_url
from wdspipes.read.specs import ShardSpec, expand_urls, list_item_url

__all__ = [
    "ShardList",
    "ShardLister",
    "ShardResampler",
]


class ShardList(Stage[ShardItem]):
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

    resumes = Resumes.FROM_START  # the list is given again from its start

    def __init__(self, urls: ShardSpec | Sequence[ShardItem]) -> None:
        super().__init__()
        self.urls: list[ShardItem] = _shard_items(urls)

    def open(self, source: None, context: EpochContext, part: Any = None) -> Iterator[ShardItem]:
        yield from self.urls

    def __len__(self) -> int:
        return len(self.urls)


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


@register("list_shards")
class ShardLister(Stage[ShardItem]):
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

    resumes = Resumes.FROM_START  # the specs are expanded again from the start

    def __init__(self, source_datapipe: Iterable[ShardSpec | Mapping[str, Any]]) -> None:
        super().__init__()
        self.source_datapipe = source_datapipe

    def open(
        self,
        source: Iterable[ShardSpec | Mapping[str, Any]],
        context: EpochContext,
        part: Any = None,
    ) -> Iterator[ShardItem]:
        for spec in source:
            if isinstance(spec, Mapping):
                for url in expand_urls(shard_url(spec)):
                    yield {**spec, "url": url}
            else:
                yield from expand_urls(spec)


@register("resample_shards")
class ShardResampler(Stage[ShardItem]):
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

    >>> draws = ShardResampler(ShardList("s-{0..9}.tar"), nshards=5, seed=1)
    >>> first, second = list(draws), list(draws)
    >>> len(first), first == second
    (5, False)
    """

    resumes = Resumes.FROM_START  # its seed gives the epoch's draws again

    def __init__(
        self,
        source_datapipe: Iterable[ShardItem],
        nshards: int | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        if nshards is not None and (not isinstance(nshards, int) or nshards < 1):
            raise ValueError(f"nshards must be a positive int or None, got {nshards!r}")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        self.source_datapipe = source_datapipe
        self.nshards = nshards
        self.seed = seed

    def open(
        self, source: Iterable[ShardItem], context: EpochContext, part: Any = None
    ) -> Iterator[ShardItem]:
        return self._draws(source, context.rng(self.seed))

    def _draws(self, source: Iterable[ShardItem], rng: random.Random) -> Iterator[ShardItem]:
        urls = list(source)
        if not urls:
            raise ValueError("resample_shards: the source yielded no shard URLs to draw from")
        drawn = 0
        while self.nshards is None or drawn < self.nshards:
            yield urls[rng.randrange(len(urls))]
            drawn += 1

    def __len__(self) -> int:
        if self.nshards is None:
            raise TypeError("resample_shards(nshards=None) has no length: it draws without end")
        return self.nshards

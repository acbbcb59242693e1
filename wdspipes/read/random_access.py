"""Indexed shards as a map-style dataset, compatible with wids: ``ds[i]`` is the ``i``-th sample
in shard order. A thin torch front end over :class:`~wdspipes.read.indexed.IndexedShards`
(where the reading happens: offsets, positioned reads, the cache) and the samplers of
:mod:`wdspipes.read.samplers`.

docs/guide/random-access.md shows it with DataLoader, StatefulDataLoader and DataLoader2.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from torch.utils.data import IterDataPipe, MapDataPipe

from wdspipes.io.cache import DEFAULT_CACHE_SIZE, CacheDir
from wdspipes.io.pipe import Commands
from wdspipes.read.index_file import Index
from wdspipes.read.indexed import IndexedShards

__all__ = ["IndexReader", "SamplerIndices", "ShardListDataset", "wids_sample"]

Sample = dict[str, Any]


class ShardListDataset(MapDataPipe[Sample]):
    """The samples of indexed shards by index, as wids' ``ShardListDataset``: a map-style
    DataPipe (``len(ds)``, ``ds[i]``) for true global shuffles, samplers and evaluation by
    index.

    Sample ``i`` is the ``i``-th in shard order (the shards in the index's order, the samples
    of each as the streaming readers give them): a dict with ``__key__``, ``__url__``,
    ``__index__`` (``i``), ``__shardindex__`` (its number in its shard), then its fields as
    bytes (decoded if ``decode`` is given), and ``__dataset__`` for the shards of a named
    sub-dataset of the index. wids keys fields with a leading dot and gives
    ``io.BytesIO`` values: ``ds.map(wids_sample)`` gives wids' form.

    Reading a sample is one positioned read of its bytes; remote shards are fetched into the
    shard cache on first use, or read by ranged requests with ``ranged=True``. See
    :mod:`wdspipes.read.indexed` for the offsets, their sidecar files, and how damaged shards
    and shards that do not match the index are reported.

    Args:
        index: the path or URL of a wids shard index (``wids-shard-index-v1`` JSON, as
            ``reshard``, ``create`` and ``wdspipes index`` write), or a list of ``{"url",
            "nsamples"}`` dicts; relative URLs resolve against the index's directory.
        base: resolve relative URLs against this instead.
        decode: a function applied to each sample, such as a :class:`~wdspipes.Decoder`
            (``decode=wds.Decoder("rgb8")`` decodes as the ``decode`` stage does).
        cache_dir: where remote shards are fetched (and offsets kept that cannot be written
            beside their local shard).
        cache_size: bytes the cache holds before the least recently used shards go.
        lru_size: shards kept open at once.
        ranged: read remote shards by ranged requests instead of fetching them.
        sidecars: read and write the offsets' sidecar files (``NAME.wdsidx``).
        ignore_zeros: read on past zero blocks (archives joined with ``cat``).
        storage_options: options for fsspec's stores (credentials, endpoint).
        commands: which ``pipe:`` URLs of the index run (an index is data: by default none;
            ``"any"`` for an index you trust; see :mod:`wdspipes.io.pipe`).

    Raises:
        ShardIndexError: the index cannot be used (not JSON, a malformed entry, ...).

    >>> import os, tempfile
    >>> from wdspipes import ShardWriter
    >>> directory = tempfile.mkdtemp()
    >>> pattern = os.path.join(directory, "s-%d.tar")
    >>> with ShardWriter(pattern, maxcount=2) as sink:
    ...     for i in range(5):
    ...         sink.write({"__key__": f"{i:03d}", "cls": i})
    >>> shards = [{"url": pattern % n, "nsamples": c} for n, c in enumerate([2, 2, 1])]
    >>> from wdspipes import Decoder
    >>> ds = ShardListDataset(shards, decode=Decoder(), sidecars=False)
    >>> len(ds), ds[3]["__key__"], ds[3]["cls"], ds[-1]["__shardindex__"]
    (5, '003', 3, 0)
    >>> ds[5]
    Traceback (most recent call last):
    ...
    IndexError: sample index 5 out of range: the shards hold 5

    In a sampler's order, as an IterDataPipe (for DataLoader2):

    >>> from wdspipes import ChunkedSampler
    >>> [s["__key__"] for s in ds.sampled(ChunkedSampler(ds, shuffle=False))]
    ['000', '001', '002', '003', '004']
    """

    def __init__(
        self,
        index: Index,
        *,
        base: str | None = None,
        decode: Callable[[Sample], Sample] | None = None,
        cache_dir: CacheDir | None = None,
        cache_size: int | None = DEFAULT_CACHE_SIZE,
        lru_size: int = 10,
        ranged: bool = False,
        sidecars: bool = True,
        ignore_zeros: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        commands: Commands | None = None,
    ) -> None:
        self.shards = IndexedShards(
            index,
            base=base,
            cache_dir=cache_dir,
            cache_size=cache_size,
            lru_size=lru_size,
            ranged=ranged,
            sidecars=sidecars,
            ignore_zeros=ignore_zeros,
            storage_options=storage_options,
            commands=commands,
        )
        if decode is not None and not callable(decode):
            raise TypeError(f"decode must be a function of a sample, such as a Decoder: {decode!r}")
        self.decoder = decode

    @property
    def lengths(self) -> list[int]:
        """The number of samples of each shard, in order (what wids' samplers read)."""
        return [entry.samples for entry in self.shards.entries]

    def __len__(self) -> int:
        return len(self.shards)

    def __getitem__(self, index: int) -> Sample:
        """Sample ``index`` (negative counts from the end).

        Raises:
            IndexError: past the end.
            WdsError: the sample cannot be read (its shard is damaged, or does not match
                the index); the error names the URL, the index and the byte offset.
            DecodeError: a field cannot be decoded.
        """
        sample = self.shards[index]
        decoder = self.decoder
        return sample if decoder is None else decoder(sample)

    def __repr__(self) -> str:
        return f"ShardListDataset({len(self.shards.entries)} shards, {len(self)} samples)"

    def sampled(self, sampler: Any) -> IterDataPipe[Sample]:
        """The samples in ``sampler``'s order as an IterDataPipe, for DataLoader2: the
        indices split among workers and ranks by a core ``sharding_filter``, each read by
        its worker (:class:`SamplerIndices`, :class:`IndexReader`)."""
        return IndexReader(SamplerIndices(sampler).sharding_filter(), self)

    def close(self) -> None:
        """Close the open shards (they open again when read)."""
        self.shards.close()


def wids_sample(sample: Sample) -> Sample:
    """A sample in wids' form: each field keyed with a leading dot and held in an
    ``io.BytesIO`` (as wids' ``ShardListDataset`` gives it without transformations), then
    ``__key__``, ``__dataset__``, ``__index__``, ``__shard__`` (the shard's URL) and
    ``__shardindex__``. Field names are lower-case (wids keeps the case of member names).

    >>> wids = wids_sample({"__key__": "a", "__url__": "s.tar", "__index__": 7,
    ...                     "__shardindex__": 2, "jpg": b"J"})
    >>> sorted(wids), wids[".jpg"].read()
    (['.jpg', '__dataset__', '__index__', '__key__', '__shard__', '__shardindex__'], b'J')
    """
    result: Sample = {
        f".{name}": io.BytesIO(value) if isinstance(value, bytes) else value
        for name, value in sample.items()
        if not name.startswith("__")
    }
    result["__key__"] = sample["__key__"]
    result["__dataset__"] = sample.get("__dataset__")
    result["__index__"] = sample.get("__index__")
    result["__shard__"] = sample.get("__url__")
    result["__shardindex__"] = sample.get("__shardindex__")
    return result


class SamplerIndices(IterDataPipe[int]):
    """The indices of a sampler: each iteration one epoch of the sampler itself (not of a
    copy, as ``IterableWrapper`` would make, so its epochs advance); its state is the
    sampler's.

    Args:
        sampler: an iterable of indices, such as a :class:`~wdspipes.ChunkedSampler`.
    """

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler

    def __iter__(self) -> Iterator[int]:
        yield from self.sampler

    def __len__(self) -> int:
        return len(self.sampler)

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state."""
        state: dict[str, Any] = self.sampler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Give the sampler its state back."""
        self.sampler.load_state_dict(state)


class IndexReader(IterDataPipe[Sample]):
    """``dataset[i]`` for each index ``i`` of ``source_datapipe``.

    Args:
        source_datapipe: yields indices.
        dataset: a map-style dataset, such as a :class:`ShardListDataset`.
    """

    def __init__(self, source_datapipe: IterDataPipe[int], dataset: Any) -> None:
        self.source_datapipe = source_datapipe
        self.dataset = dataset

    def __iter__(self) -> Iterator[Sample]:
        dataset = self.dataset
        for index in self.source_datapipe:
            yield dataset[index]

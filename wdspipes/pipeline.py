"""Composition: ``DataPipeline(...)`` and ``WebDataset(...)``, two of the three equal ways to
build a pipeline (the third is chaining functional names on a DataPipe).

Both build ordinary DataPipe graphs, the same objects functional chaining builds, so the
result runs under DataLoader2 (any reading service), plain DataLoader, StatefulDataLoader, or a
``for`` loop. ``DataPipeline`` takes the curried stages of webdataset's vocabulary
(``wds.decode(...)``, ``wds.shuffle(1000)``, ``wds.split_by_worker``, ...: see
:mod:`wdspipes.webdataset`, the layer on top that defines them), and any stage of one's own: a
:class:`PipelineStage` (as in ``webdataset.pipeline``), a function of an iterator, a DataPipe
class, a :class:`~wdspipes.core.curried.Curried`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, cast

from torch.utils.data import DataLoader, IterableDataset, IterDataPipe
from torch.utils.data.datapipes.iter.sharding import ShardingFilterIterDataPipe

from wdspipes.core.context import EpochContext
from wdspipes.core.curried import Curried, is_stage_factory
from wdspipes.core.engine import declares_per_worker, upstream_of
from wdspipes.core.protocol import Epoch, Resumes
from wdspipes.core.stage import Sample, Stage
from wdspipes.errors import Handler, ResumeError, reraise_exception
from wdspipes.io import ShardItem
from wdspipes.io.cache import DEFAULT_CACHE_SIZE, CacheDir, StorageOptions, opener_options
from wdspipes.io.pipe import Commands
from wdspipes.io.readahead import ReadAhead
from wdspipes.pipes.read import ShardList
from wdspipes.read.grouping import SampleGrouper
from wdspipes.read.opener import ShardOpener
from wdspipes.read.shards import ShardResampler
from wdspipes.read.specs import ShardSpec
from wdspipes.read.tar import TarLoader
from wdspipes.read.walk import MAX_MEMBER_SIZE
from wdspipes.samples.shuffle import BufferShuffler

__all__ = [
    "DataPipeline",
    "IterableSource",
    "IteratorStage",
    "PipelineStage",
    "ShardSplit",
    "WebDataset",
    "read_tar_samples",
]


class PipelineStage:
    """webdataset's base of a stage of your own: a class whose ``run(self, src)`` takes the
    iterator of the stage before it and returns an iterator, each epoch.

    In ``DataPipeline(...)`` an instance runs as ``IteratorStage(upstream, stage.run)``; as the
    source (the first stage), ``run()`` is called with no argument each epoch. Its attributes
    must pickle where a loader pickles the pipeline (DataLoader2, ``spawn`` workers).

    >>> import random
    >>> class Shuffle(PipelineStage):
    ...     def __init__(self, seed):
    ...         self.seed, self.epoch = seed, -1
    ...     def run(self, src):
    ...         self.epoch += 1
    ...         items = list(src)
    ...         random.Random(self.seed + self.epoch).shuffle(items)
    ...         return iter(items)
    >>> pipe = DataPipeline("s-{0..9}.tar", Shuffle(seed=1))
    >>> first, second = list(pipe), list(pipe)
    >>> sorted(first) == sorted(second), first == second
    (True, False)
    """

    def run(self, *src: Iterator[Any]) -> Iterable[Any]:
        """The stage's items: from ``src``, the iterator of the stage before; as a source,
        called with none."""
        raise NotImplementedError(f"{type(self).__name__} must define run(self, src)")

    def invoke(self, *args: Any, **kwargs: Any) -> Any:
        """webdataset's name of the same call."""
        return self.run(*args, **kwargs)


class IteratorStage(Stage[Any]):
    """Run a plain iterator-to-iterator function as a stage of ``DataPipeline(...)``.

    The function must be defined at module level (or be a ``functools.partial`` of one) for
    DataLoader2 and worker processes to pickle it.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> def evens(items):
    ...     return (x for x in items if x % 2 == 0)
    >>> list(IteratorStage(IterableWrapper(range(6)), evens))
    [0, 2, 4]
    """

    def __init__(
        self, source_datapipe: IterDataPipe[Any], fn: Callable[[Iterator[Any]], Iterable[Any]]
    ) -> None:
        super().__init__()
        self.source_datapipe = source_datapipe
        self.fn = fn

    def open(self, source: Iterable[Any], context: EpochContext, part: Any = None) -> Iterator[Any]:
        yield from self.fn(iter(source))

    @property
    def per_worker_shards(self) -> bool:
        """Whether the function declares that it gives each worker shards of its own (see
        :func:`~wdspipes.core.distributed.declares_per_worker`)."""
        return declares_per_worker(self.fn)

    def refusal(self) -> ResumeError:
        return ResumeError(
            f"IteratorStage ({getattr(self.fn, '__name__', self.fn)!r}, a plain function in "
            "DataPipeline) cannot save its position: write it as a stage (wds.map, wds.select, "
            "a wds.Stage subclass that declares how it resumes) to resume mid-epoch"
        )


Items = Iterable[Any] | Callable[[], Iterable[Any]]
"""What :class:`IterableSource` reads: an iterable, or a function that returns one."""


class IterableSource(Stage[Any]):
    """The items of any iterable, read anew each epoch, or of what a function returns, called
    anew each epoch: the first stage of ``DataPipeline(...)`` for a source that is not a
    DataPipe or a shard spec, as in webdataset (a torch ``DataLoader``, an ``IterableDataset``,
    a generator function, ...).

    Args:
        source: an iterable, iterated each epoch; or a function of no arguments that returns
            an iterable, called each epoch. A torch ``DataLoader`` or ``IterableDataset`` is
            iterated, as in webdataset, even where it can be called too.

    Yields:
        The source's items.

    Raises:
        TypeError: ``source`` is an iterator (it could be read only once: pass a function
            that returns a new one each epoch), or neither iterable nor callable.

    Its state: before a reader (a shard list, say), a source that is neither a function nor
    a loader gives the same items again from its start when the pipeline resumes, as torch's
    ``IterableWrapper``; a function or a loader is refused with a ResumeError, since nothing
    says that it gives the same items again.

    >>> def numbers():
    ...     return iter(range(3))
    >>> source = IterableSource(numbers)
    >>> list(source), list(source)
    ([0, 1, 2], [0, 1, 2])
    >>> IterableSource(iter(range(3)))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: the source range_iterator is an iterator, which can be read only once: ...
    """

    resumes = Resumes.FROM_START

    def __init__(self, source: Items) -> None:
        super().__init__()
        if isinstance(source, Iterator):
            raise TypeError(
                f"the source {type(source).__name__} is an iterator, which can be read only "
                "once: pass an iterable, or a function that returns a new iterator each epoch"
            )
        calls = callable(source) and not isinstance(source, IterableDataset | DataLoader)
        if not calls and not isinstance(source, Iterable):
            raise TypeError(
                "the source must be an iterable, or a function that returns one, got "
                f"{type(source).__name__}"
            )
        self.source = source
        self.calls = calls

    def open(self, source: None, context: EpochContext, part: Any = None) -> SourceEpoch:
        return SourceEpoch(self)

    def __len__(self) -> int:
        if self.calls:
            raise TypeError("an IterableSource of a function has no length")
        return len(self.source)  # type: ignore[arg-type]  # a TypeError where it has none

    @property
    def per_worker_shards(self) -> bool:
        """Whether the source declares that it gives each worker shards of its own (a true
        ``per_worker_shards`` attribute: see
        :func:`~wdspipes.core.distributed.declares_per_worker`), so that the opener after it
        does not warn that every worker reads every shard."""
        return declares_per_worker(self.source)


class SourceEpoch(Epoch[Any]):
    """An epoch of an :class:`IterableSource`."""

    def __init__(self, stage: IterableSource) -> None:
        self.stage = stage

    def __iter__(self) -> Iterator[Any]:
        stage = self.stage
        source = cast(Callable[[], Iterable[Any]], stage.source)() if stage.calls else stage.source
        yield from cast(Iterable[Any], source)

    def part(self) -> None:
        """Nothing: before a reader, it gives the same items again from its start.

        Raises:
            ResumeError: its source is a function or a loader, which may not.
        """
        if self.stage.calls or isinstance(self.stage.source, DataLoader):
            stage = self.stage
            what = "a function" if stage.calls else f"a loader ({type(stage.source).__name__})"
            raise ResumeError(
                f"IterableSource cannot give the same items again: its source is {what}, "
                "which may give other items when called or iterated again. Resume the "
                "pipeline inside the loader instead (a wdspipes pipeline under "
                "StatefulDataLoader), or read an iterable that gives the same items each time"
            )


class ShardSplit:
    """Where a ``DataPipeline`` splits its shards among ranks and workers: webdataset's
    ``split_by_node`` and ``split_by_worker`` are two of these (see
    :mod:`wdspipes.webdataset.shardlists`).

    In ``DataPipeline(...)``, the first of them becomes the pipeline's one core
    ``sharding_filter``: DataLoader2 and plain DataLoader then give each rank and each worker
    its own shards. Called on a DataPipe, a split returns ``source.sharding_filter()``. Where
    the source is split already (``ResampledShards`` ends in a sharding filter), it changes
    nothing: two filters on one branch would make the loaders fail with "Sharding twice".

    >>> split = ShardSplit("split_here")
    >>> once = split(ShardList(["a.tar", "b.tar"]))
    >>> type(once).__name__, split(once) is once, split
    ('ShardingFilterIterDataPipe', True, split_here)
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, source: IterDataPipe[Any]) -> IterDataPipe[Any]:
        if not isinstance(source, IterDataPipe):
            raise TypeError(
                f"{self.name} splits an IterDataPipe of shard URLs; got {type(source).__name__}"
            )
        if _is_split(source):
            return source
        return ShardingFilterIterDataPipe(source)

    def __repr__(self) -> str:
        return self.name


def _is_split(datapipe: IterDataPipe[Any]) -> bool:
    """Whether ``datapipe`` is, or reads from, a core sharding filter."""
    return any(
        isinstance(stage, ShardingFilterIterDataPipe)
        for stage in (datapipe, *upstream_of(datapipe))
    )


def DataPipeline(*stages: Any) -> IterDataPipe[Any]:
    """Chain stages into a DataPipe graph, webdataset style.

    The first stage is the source: an IterDataPipe; a shard spec (a string or a list of URLs,
    read through :class:`~wdspipes.read.shards.ShardList`); or, as in webdataset, any other
    iterable (a ``DataLoader``, webdataset's ``WebLoader``, ...), iterated each epoch, or a function
    returning one, called each epoch (see :class:`IterableSource`). Each later stage is one
    of:

    - a curried stage such as ``tarfile_to_samples()`` or ``shuffle(100)`` (a factory passed
      uncalled means "with its defaults");
    - ``split_by_node`` / ``split_by_worker``: the first of them becomes the pipeline's one
      core ``sharding_filter``, which splits shards among all ranks and workers (unless the
      pipeline has one already, as ``ResampledShards`` does);
    - an IterDataPipe class, called with the upstream DataPipe;
    - a plain function from an iterator to an iterator (see :class:`IteratorStage`).

    - a :class:`PipelineStage` (webdataset's), whose ``run(src)`` maps the upstream
      iterator; in first place, ``run()`` is the source, called each epoch;

    ``None`` stages are skipped and lists of stages are spliced in.

    Returns:
        The last stage: an IterDataPipe.

    Raises:
        ValueError: no stages.
        TypeError: a stage of a kind listed above it is not.

    >>> import wdspipes as wds
    >>> pipe = wds.DataPipeline(["a.tar", "b.tar"], wds.split_by_worker, wds.url_opener())
    >>> type(pipe).__name__
    'ShardOpener'
    """
    flat = _flatten(stages)
    if not flat:
        raise ValueError("DataPipeline needs at least a source stage")
    pipe = _source(flat[0])
    for position, stage in enumerate(flat[1:], start=1):
        pipe = stage(pipe) if isinstance(stage, ShardSplit) else _apply(stage, pipe, position)
    return pipe


def _flatten(stages: Iterable[Any]) -> list[Any]:
    flat: list[Any] = []
    for stage in stages:
        if isinstance(stage, list) and flat:  # a list in first place is a shard list
            flat.extend(_flatten(stage))
        elif stage is not None:
            flat.append(stage)
    return flat


def _source(stage: Any) -> IterDataPipe[Any]:
    if isinstance(stage, IterDataPipe):
        return stage
    if isinstance(stage, PipelineStage):
        return IterableSource.DataPipe(stage.run)  # type: ignore[no-any-return]
    if isinstance(stage, str | list | tuple):
        return cast(IterDataPipe[Any], ShardList(stage))
    if isinstance(stage, Curried | ShardSplit) or is_stage_factory(stage):
        raise TypeError(
            f"the first stage of DataPipeline is the source, and {stage!r} is a stage that "
            "reads one: put a shard spec, a DataPipe or another iterable before it"
        )
    if callable(stage) or isinstance(stage, Iterable):
        return IterableSource.DataPipe(stage)  # type: ignore[no-any-return]
    raise TypeError(
        "the first stage of DataPipeline must be an IterDataPipe, a shard spec (a string or "
        "a list of URLs), another iterable, or a function returning one, got "
        f"{type(stage).__name__}"
    )


def _apply(stage: Any, pipe: IterDataPipe[Any], position: int) -> IterDataPipe[Any]:
    if is_stage_factory(stage):
        stage = stage()
    if isinstance(stage, Curried) or (isinstance(stage, type) and issubclass(stage, IterDataPipe)):
        result = cast(Callable[[IterDataPipe[Any]], Any], stage)(pipe)
    elif isinstance(stage, PipelineStage):
        result = IteratorStage(pipe, stage.run)
    elif isinstance(stage, IterDataPipe):
        raise TypeError(
            f"stage {position} of DataPipeline is an IterDataPipe instance; only the first stage "
            "may be one (pass a class or a curried stage instead)"
        )
    elif callable(stage):
        result = IteratorStage(pipe, stage)
    else:
        raise TypeError(f"stage {position} of DataPipeline is not a stage: {stage!r}")
    if not isinstance(result, IterDataPipe):
        raise TypeError(
            f"stage {position} of DataPipeline ({stage!r}) did not return an IterDataPipe"
        )
    return result


def read_tar_samples(
    source: IterDataPipe[ShardItem],
    handler: Handler,
    ignore_zeros: bool = False,
    strict_end: bool = False,
    max_member_size: int = MAX_MEMBER_SIZE,
    **options: Any,
) -> IterDataPipe[Sample]:
    """Shard items of ``source`` to samples: ``open_shards().load_tar().group_samples()``, one
    ``handler`` for all; ``ignore_zeros``, ``strict_end`` and ``max_member_size`` for the tar
    loader (see :class:`~wdspipes.read.tar.TarLoader`), ``options`` for the opener (see
    :class:`~wdspipes.read.opener.ShardOpener`). ``WebDataset`` reads through it, and so does
    webdataset's ``tarfile_to_samples()`` in ``DataPipeline(...)``.

    >>> type(read_tar_samples(ShardList("a.tar"), reraise_exception)).__name__
    'SampleGrouper'
    """
    opener = ShardOpener(source, handler=handler, **options)
    walk = {"ignore_zeros": ignore_zeros, "strict_end": strict_end}
    loader = TarLoader(opener, handler=handler, max_member_size=max_member_size, **walk)
    return cast(IterDataPipe[Sample], SampleGrouper(loader, handler=handler))


def WebDataset(
    urls: ShardSpec | Sequence[ShardItem],
    shardshuffle: bool | int = False,
    resampled: bool = False,
    handler: Handler = reraise_exception,
    seed: int | None = None,
    nshards: int | None = None,
    cache_dir: CacheDir | None = None,
    cache_size: int | None = DEFAULT_CACHE_SIZE,
    storage_options: StorageOptions | None = None,
    ignore_zeros: bool = False,
    strict_end: bool = False,
    commands: Commands | None = None,
    max_member_size: int = MAX_MEMBER_SIZE,
    readahead: ReadAhead | bool = True,
) -> IterDataPipe[Sample]:
    """The usual pipeline from shard URLs to samples, split among ranks and workers.

    The shard list (shuffled or resampled, identically in every worker and rank) is split by
    one core ``sharding_filter``, then each reader opens its shards, reads them, and groups
    members into samples. Under DataLoader2 with any number of workers, and plain DataLoader,
    every sample is read exactly once per epoch (resampled: each drawn shard once).

    Args:
        urls: a shard spec (see :func:`~wdspipes.read.shards.expand_urls`), or a list of
            shard items (URLs, and dicts with a ``"url"`` as webdataset's shard lists yield,
            whose other keys the samples carry: see :mod:`wdspipes.io.items`).
        shardshuffle: shuffle the shard order each epoch: True for a full shuffle, an int for
            a shuffle buffer of that many shards, False (or 0) for none.
        resampled: draw shards with replacement instead, ``nshards`` per epoch (without end
            if None).
        handler: error policy for opening, reading and grouping (see :mod:`wdspipes.errors`).
        seed: fixes the shard order or draws; otherwise the loader's seeding decides.
        nshards: with ``resampled``, how many shards to draw per epoch, over all readers.
        cache_dir: cache remote shards (``pipe:`` URLs included; not local files) in this
            directory: each is fetched once, as it is first read, and read from the cache
            afterwards, by every worker and process. Samples then carry ``__local_path__``
            (the cached file); samples of local shards carry their path as
            ``__local_path__`` with or without it, as in webdataset's ``WebDataset``. See
            :mod:`wdspipes.io.cache`.
        cache_size: the most bytes the cache keeps, least recently used shards removed
            first (default 10 GB; None for no bound).
        storage_options: options of a remote store (credentials, ...), passed to
            ``open_url(url, storage_options=...)`` for every shard.
        ignore_zeros: read on past zero blocks in a shard, as GNU tar's ``--ignore-zeros``
            (archives joined with ``cat`` are read whole); by default, bytes other than
            zeros after the end-of-archive marker are a
            :class:`~wdspipes.errors.DataAfterEndError`.
        strict_end: a shard that ends after a member without the end-of-archive marker (a
            writer never closed) is a :class:`~wdspipes.errors.TruncatedShardError`; by
            default its samples are read and a :class:`~wdspipes.errors.NoEndMarkerWarning`
            names it, as GNU tar and webdataset read it.
        commands: which ``pipe:`` URLs run (see :mod:`wdspipes.io.pipe`): ``"program"``
            (the default, unless the environment variable ``WDSPIPES_COMMANDS`` says
            otherwise) runs URL strings of ``urls`` but not the ``"url"`` of dict items, which
            are data; ``"never"`` runs none; ``"any"`` runs those of dict items too.
        max_member_size: the most bytes a tar member may declare (default 4 GiB); more is a
            :class:`~wdspipes.errors.MemberTooLargeError`, through ``handler``.
        readahead: read remote shards ahead, in the background, within the bounds of a
            :class:`~wdspipes.io.readahead.ReadAhead` (True: the defaults, at most 64 MiB and
            32 connections per reader); False for none. See :mod:`wdspipes.io.readahead`.

    Returns:
        A DataPipe of sample dicts; chain further stages on it (``.decode(...)`` etc.).

    >>> pipe, stages = WebDataset("data-{000..009}.tar", shardshuffle=True), []
    >>> while pipe is not None:
    ...     stages.append(type(pipe).__name__)
    ...     pipe = getattr(pipe, "source_datapipe", None)
    >>> stages[::-1]  # doctest: +NORMALIZE_WHITESPACE
    ['ShardList', 'BufferShuffler', 'ShardingFilterIterDataPipe', 'ShardOpener', 'TarLoader',
     'SampleGrouper']
    """
    if nshards is not None and not resampled:
        raise ValueError("nshards applies only with resampled=True")
    shards: IterDataPipe[ShardItem] = ShardList(urls)
    if resampled:
        if shardshuffle:
            warnings.warn(
                "WebDataset: shardshuffle has no effect with resampled=True",
                UserWarning,
                stacklevel=2,
            )
        shards = cast(IterDataPipe[ShardItem], ShardResampler(shards, nshards=nshards, seed=seed))
    elif shardshuffle:
        bufsize = len(shards) if shardshuffle is True else int(shardshuffle)
        shuffled = BufferShuffler(shards, bufsize=bufsize, initial=bufsize, seed=seed)
        shards = cast(IterDataPipe[ShardItem], shuffled)
    options = opener_options(cache_dir, cache_size, storage_options, commands, readahead)
    options["local_path"] = True  # as webdataset's WebDataset, which tarfile_to_samples is not
    return read_tar_samples(
        ShardingFilterIterDataPipe(shards),
        handler,
        ignore_zeros=ignore_zeros,
        strict_end=strict_end,
        max_member_size=max_member_size,
        **options,
    )

"""The opener stage: shard URLs in, open byte streams out, every one closed in time."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from wdspipes.core.context import EpochContext, ShardLog
from wdspipes.core.distributed import check_split, warn_idle_reader
from wdspipes.core.elastic import ShardSet, owned
from wdspipes.core.protocol import AllReaders, Epoch, Resumes, register
from wdspipes.core.stage import Stage
from wdspipes.errors import (
    Handler,
    ResumeError,
    ShardItemError,
    ShardOpenError,
    WdsError,
    handle,
    reraise_exception,
)
from wdspipes.io.cache import (
    DEFAULT_CACHE_SIZE,
    CacheDir,
    Located,
    ShardCache,
    StorageOptions,
)
from wdspipes.io.items import ShardItem, shard_url, url_check
from wdspipes.io.local import reading_path
from wdspipes.io.pipe import Commands, commands_policy
from wdspipes.io.readahead import Lookahead, Prefetcher, ReadAhead, ReadStats, readahead_config
from wdspipes.io.urls import ByteStream, ShardStream, check_url, close_quietly, open_url
from wdspipes.redaction import RedactedOptions, redact

__all__ = ["ALL", "OpenEpoch", "OpenedShard", "ResumeTarget", "ShardOpener", "opened"]

log = logging.getLogger(__name__)


OpenedShard = ShardStream | dict[str, Any]
"""What the opener yields: a :class:`ShardStream` for a URL string; for a dict item
(webdataset's ``{"url": ...}``), a copy of the dict with the stream under ``"stream"``, as
webdataset's ``url_opener`` yields it. The readers take both."""


def opened(item: ShardItem, stream: ByteStream) -> OpenedShard:
    """Shard item ``item`` with its opened ``stream``, in the item's form (see
    :data:`OpenedShard`); its URL as errors and ``__url__`` show it, without secrets (see
    :func:`~wdspipes.redaction.redact`)."""
    if isinstance(item, str):
        return ShardStream(redact(item), stream)
    return {**item, "url": redact(shard_url(item)), "stream": stream}


@register("open_shards")
class ShardOpener(Stage[OpenedShard]):
    """Open each shard of the source (functional name: ``open_shards``).

    The source yields shard items: URL strings, or dicts with the URL under ``"url"`` as
    webdataset's shard lists yield them (see :mod:`wdspipes.io.items`). An item that is
    neither is a :class:`~wdspipes.errors.ShardItemError` through ``handler``.

    At most one stream is handed out at a time: the one yielded last is closed when the next is
    requested, and when iteration ends or is abandoned. Readers downstream may close it sooner.

    Remote shards are read ahead (see :mod:`wdspipes.io.readahead`): while a shard is read,
    the next shards of this reader's list are opened and their bytes received in the
    background, within ``readahead``'s bounds (by default at most 64 MiB and 32 connections per
    reader), on threads that end with the epoch. The order, the handler and saved states are
    as without it. :attr:`read_stats` tells how long this reader waited for the network.

    As each epoch begins it checks how the sharding filter upstream splits the shards among
    ranks and workers (see :func:`wdspipes.core.distributed.check_split`): a rank left without
    a shard is an error, an uneven split a warning.

    With ``cache_dir``, remote shards (every URL but local paths, ``file:`` URLs and ``-``;
    ``pipe:`` URLs included) are cached there: the first reader of a shard reads it from its
    URL and writes it to the cache as it goes, committing it once read to its end; later reads,
    in any process, open the cached copy. At most ``cache_size`` bytes are kept, the least
    recently used shards removed first. Streams then carry ``local_path``: the cache file, or a
    local shard's own path (samples get it as ``__local_path__``). See
    :mod:`wdspipes.io.cache`. With ``local_path=True`` and no cache, local shards' streams
    carry their path too (``WebDataset`` asks for it, as webdataset's ``WebDataset`` sets
    ``__local_path__`` on samples of local files).

    A ``pipe:`` URL runs as ``commands`` says (see :mod:`wdspipes.io.pipe`): by default a URL
    string of the source runs, the ``"url"`` of a dict item (data, as a shard list read from
    a file) does not. The URL it yields, which errors and the samples' ``__url__`` show, has
    the secrets of the URL (a password, query values) replaced by ``***``.

    Args:
        source_datapipe: yields shard items: URLs, or dicts with a ``"url"``.
        handler: what to do when a shard cannot be opened (see :mod:`wdspipes.errors`).
        cache_dir: cache remote shards in this directory (created if needed); None for no cache.
        cache_size: with ``cache_dir``, the most bytes the cache keeps (None: no bound).
        storage_options: passed to ``open_url(url, storage_options=...)`` for every shard
            (options of a remote store, such as credentials); None passes nothing.
        local_path: without ``cache_dir``, give the streams of local shards (paths and
            ``file:`` URLs) their file's path as ``local_path``.
        commands: which ``pipe:`` URLs run: ``"program"`` (URL strings, not the ``"url"`` of
            dict items), ``"never"`` or ``"any"``; None for the environment variable
            ``WDSPIPES_COMMANDS``, else ``"program"``.
        readahead: a :class:`~wdspipes.io.readahead.ReadAhead` with the bounds of the
            read-ahead; True for the defaults (remote shards only), False for none.

    Yields:
        A :class:`ShardStream` ``(url, stream)`` per URL string; per dict item, a copy of the
        dict with the stream under ``"stream"`` (see :data:`OpenedShard`).

    Raises:
        ShardOpenError: through ``handler``, for a shard that cannot be opened, or a
            ``pipe:`` URL that ``commands`` refuses.
        ShardItemError: through ``handler``, for an item that names no shard.
        ShardSplitError: some rank gets no shard.
        OSError: the cache directory cannot be made.

    >>> from wdspipes import ShardList  # the DataPipe, on which open_shards chains
    >>> [(url, stream.read()) for url, stream in ShardList(["pipe:printf hello"]).open_shards()]
    [('pipe:printf hello', b'hello')]
    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> items = IterableWrapper([{"url": "pipe:printf hi", "lang": "en"}], deepcopy=False)
    >>> opened = items.open_shards(commands="any")  # a command in a dict item: data
    >>> [(shard["url"], shard["lang"], shard["stream"].read()) for shard in opened]
    [('pipe:printf hi', 'en', b'hi')]
    """

    resumes = Resumes.FROM_START
    shares = True

    def __init__(
        self,
        source_datapipe: Iterable[ShardItem],
        handler: Handler = reraise_exception,
        *,
        cache_dir: CacheDir | None = None,
        cache_size: int | None = DEFAULT_CACHE_SIZE,
        storage_options: StorageOptions | None = None,
        local_path: bool = False,
        commands: Commands | None = None,
        readahead: ReadAhead | bool = True,
    ) -> None:
        super().__init__()
        if commands is not None:
            commands_policy(commands)  # a bad value fails now, not at the first shard
        self.source_datapipe = source_datapipe
        self.handler = handler
        self.cache = None if cache_dir is None else ShardCache(cache_dir, cache_size)
        self.storage_options = None if storage_options is None else RedactedOptions(storage_options)
        self.local_path = local_path
        self.commands = commands
        self.readahead = readahead_config(readahead)
        self.read_stats: ReadStats | None = None
        """What this opener read ahead in its last epoch opened in this process, and how long it
        waited for it (see :class:`~wdspipes.io.readahead.ReadStats`); None without
        read-ahead."""

    def open(
        self, source: Iterable[ShardItem], context: EpochContext, part: Any = None
    ) -> OpenEpoch:
        if isinstance(part, AllReaders):
            if context.split is not None and not context.reads_split:
                raise ResumeError(
                    f"{type(self).__name__} (open_shards) reads the sharding filter through "
                    f"{type(self.source_datapipe).__name__}: to resume with the shards split "
                    "among another number of readers it must read the filter directly (a shard "
                    "is known by its index in the filter's list)"
                )
            restored: _Restored | None = _Restored(None, began_by(part.parts))
        elif part is not None:
            restored = _Restored((part["taken"], part["digest"]), None)
            if part["began"] is not None:
                restored.began = ShardSet.from_state(part["began"])
        else:
            restored = None
        epoch = OpenEpoch(self, source, context, restored)
        self.read_stats = epoch.stats
        return epoch

    def open_again(self, item: ShardItem) -> ByteStream:
        """Open a shard read before (its item), to read some of its samples again."""
        try:
            return self._open(shard_url(item), _from_data(item))
        except ShardOpenError as exn:
            raise ResumeError(f"cannot open a shard again to resume: {exn}") from exn

    def _open_item(self, item: ShardItem) -> ByteStream:
        """Open the shard of ``item``; ShardItemError if it names none."""
        return self._open(shard_url(item), _from_data(item))

    def _open(self, url: str, from_data: bool) -> ByteStream:
        if self.cache is None:
            stream = self._open_url(url, from_data)
            path = reading_path(url) if self.local_path else None
            return stream if path is None else Located(stream, path)
        check_url(url, self.commands, from_data)  # a cached copy of a refused command too
        try:
            return self.cache.open(url, functools.partial(self._open_url, from_data=from_data))
        except WdsError:  # the shard's own failure (an OSError too)
            raise
        except OSError as exn:
            raise ShardOpenError(f"cannot open through the shard cache: {exn}", url=url) from exn

    def _open_url(self, url: str, from_data: bool) -> ByteStream:
        """``open_url``, given only the keywords that differ from its defaults."""
        options: dict[str, Any] = {}
        if self.storage_options is not None:
            options["storage_options"] = self.storage_options
        if self.commands is not None:
            options["commands"] = self.commands
        if from_data:
            options["from_data"] = True
        stream: ByteStream = open_url(url, **options)
        return stream


class OpenEpoch(Epoch[OpenedShard]):
    """An epoch of ``open_shards``: the shards it took (their count, the index of the last in
    the epoch's list and a checksum of their URLs), how the shards are split, and, restored,
    what it skips. It notes in its context's :class:`~wdspipes.core.context.ShardLog` the index
    of each shard it hands out, and the items of those a restored reader reads again.

    Restored, it reads the shard list again from its start and skips to the shard the reader
    after it asks for (the log's ``target``), checking that it skipped the same shards; from a
    merged state, it skips the shards begun."""

    def __init__(
        self,
        stage: ShardOpener,
        source: Iterable[ShardItem],
        context: EpochContext,
        restored: _Restored | None,
    ) -> None:
        self.stage = stage
        self.source = source
        self.context = context
        self.log = context.shards if context.shards is not None else ShardLog()
        self.log.open_again = stage.open_again
        split = context.split
        self.layout = (1, 0) if split is None else split.stream
        self.restored = restored
        self.began = None if restored is None else restored.began
        self.taken = self.digest = 0
        self.index = -1
        self.stats = None if stage.readahead is None else ReadStats()

    def __iter__(self) -> Iterator[OpenedShard]:
        stage, context = self.stage, self.context
        try:
            listed: int | None = len(stage.source_datapipe)
        except TypeError:  # a source that draws without end, or whose length is not known
            listed = None
        name = type(stage).__name__
        expected = check_split(context.split, context.per_worker, listed, name)
        if stage.cache is not None:
            stage.cache.make_directory()
        target, self.log.target = self.log.target, None
        if target is None and self.began is not None:
            target = ResumeTarget(None, set(), set(), {})
        items = Lookahead(self.source)
        if target is not None:
            self._note_replay_items(items, target)
        ahead = None
        if stage.readahead is not None:
            skipped = None if target is None else target.skipped_at(self.layout, self.began)
            ahead = Prefetcher(
                stage.readahead, stage._open_item, items, _url_or_none, skipped, self.stats
            )
        try:
            yield from self._open_each(items, ahead, target, expected)
        finally:
            if ahead is not None:
                ahead.close()  # stops and joins its threads

    def _open_each(
        self,
        items: Lookahead[ShardItem],
        ahead: Prefetcher | None,
        target: ResumeTarget | None,
        expected: int | None,
    ) -> Iterator[OpenedShard]:
        """The epoch: each shard of ``items`` opened in turn (through ``ahead`` if any), those
        that ``target`` skips passed by."""
        readers, reader = self.layout
        received = 0
        stage, log = self.stage, self.log
        open_shard = stage._open_item if ahead is None else ahead.open
        for item in items:
            received += 1
            self.index = log.index = reader + self.taken * readers
            self.taken += 1
            try:
                url: str | None = shard_url(item)
            except ShardItemError:
                url = None  # reported where the shard would have been opened
            if url is not None:
                self.digest = url_check(url, self.digest)
            if target is not None:
                if target.skips(self, item, url):
                    continue
                if target.done:
                    target = None
            try:
                stream = open_shard(item)
            except (ShardOpenError, ShardItemError) as exn:
                if handle(stage.handler, exn):
                    continue
                return
            try:
                yield opened(item, stream)
            finally:
                close_quietly(stream)
        if target is not None:
            target.ended(self)
        if expected is None and not received:
            warn_idle_reader(self.context.split)

    def _note_replay_items(self, items: Lookahead[ShardItem], target: ResumeTarget) -> None:
        """Note the items of the shards ``target`` reads again, ahead of the first shard opened
        (with the shards split another way, they may come after it): looked at in ``items``,
        not taken."""
        readers, reader = self.layout
        for taken, item in enumerate(items.upcoming(target.ahead(self.layout))):
            index = reader + taken * readers
            if index in target.wanted:
                self.log.replay_items[index] = item

    def part(self) -> dict[str, Any]:
        """How many shards this reader took this epoch, a checksum of their URLs, how the
        shards are split (``[readers, reader]``) and, in an epoch restored from a merged state,
        the shards its readers began."""
        return {
            "taken": self.taken,
            "digest": self.digest,
            "split": list(self.layout),
            "began": None if self.began is None else self.began.to_state(),
        }


def _from_data(item: ShardItem) -> bool:
    """Whether the URL of shard item ``item`` is data: a dict item's ``"url"`` (shard lists
    read from files come as such dicts), not a URL string of the program's shard list."""
    return not isinstance(item, str)


def _url_or_none(item: ShardItem) -> str | None:
    """The URL of a shard item, or None for one that names no shard (reported in its turn)."""
    try:
        return shard_url(item)
    except ShardItemError:
        return None


ALL = sys.maxsize
"""The ``start`` of a :class:`ResumeTarget` of a reader that had read all its shards."""


class _Restored:
    """What a restored state left for the opener's next epoch: the count and checksum of the
    shards its reader had taken, to check on the way; or the shards the readers of a merged
    state began."""

    __slots__ = ("began", "saved")

    def __init__(self, saved: tuple[int, int] | None, began: ShardSet | None) -> None:
        self.saved = saved
        self.began = began


def began_by(parts: list[dict[str, Any]]) -> ShardSet:
    """The shards that the readers whose opener parts these are began, together.

    Raises:
        ResumeError: the parts are of splits among different numbers of readers.
    """
    parts = [part for part in parts if part["taken"] or part["began"] is not None]
    splits = {part["split"][0] for part in parts}
    if len(splits) > 1:
        raise ResumeError(f"the readers' states are of splits among {sorted(splits)} readers")
    readers = splits.pop() if splits else 1
    counts = [0] * readers
    began = ShardSet()
    for part in parts:
        counts[part["split"][1]] = part["taken"]
        if part["began"] is not None:
            began = began.union(ShardSet.from_state(part["began"]))
    return began.union(ShardSet.taken(readers, counts))


class ResumeTarget:
    """What a restored reader asks of the opener's epoch, through their
    :class:`~wdspipes.core.context.ShardLog`: the reader goes on in the shard at index ``start``
    (:data:`ALL`: it had read all its shards), so the shards before it are skipped; in an epoch
    restored from a merged state (``start`` None), the shards some reader began are skipped,
    but those at ``reopen``. The items of the shards at ``wanted`` are noted in the log's
    ``replay_items`` (a restored buffer's samples are in them); the URL of a shard at an index
    in ``checks`` must have that checksum (CRC-32)."""

    __slots__ = ("checked", "checks", "done", "reopen", "start", "wanted")

    def __init__(
        self, start: int | None, wanted: set[int], reopen: set[int], checks: dict[int, int]
    ) -> None:
        self.start = start
        self.wanted = wanted
        self.reopen = reopen
        self.checks = checks
        self.done = False  # nothing is left to skip or note
        self.checked = False

    def ahead(self, layout: tuple[int, int]) -> int:
        """How many items to take ahead, so that the items to read again are noted before the
        first shard is opened: those up to the last wanted index this reader is dealt."""
        mine = [index for index in self.wanted if owned(index, layout)]
        readers, reader = layout
        return (max(mine) - reader) // readers + 1 if mine else 0

    def skips(self, opener: OpenEpoch, item: ShardItem, url: str | None) -> bool:
        """Whether the opener skips ``item``, the shard at ``opener.index``; notes it if it is
        to be read again, and checks its URL."""
        index = opener.index
        if index in self.wanted:
            opener.log.replay_items[index] = item
        check = self.checks.get(index)
        if check is not None and url_check(url or "") != check:
            raise ResumeError(
                f"the shard at index {index} of the epoch's list is {redact(url or '')!r}, not "
                "the one the state was saved with (a changed shard list, seed or split)"
            )
        if self.start is not None and index < self.start:
            return True
        if index == self.start:
            self.ended(opener)
        if opener.began is None:
            self.done = True
        return self.passes_by(index, opener.began)

    def passes_by(self, index: int, began: ShardSet | None) -> bool:
        """Whether the opener skips the shard at ``index`` of the epoch's list, given the
        shards a merged state's readers ``began``."""
        if self.start is not None and index < self.start:
            return True
        return began is not None and index in began and index not in self.reopen

    def skipped_at(self, layout: tuple[int, int], began: ShardSet | None) -> Callable[[int], bool]:
        """Whether the opener of the reader ``layout`` names skips the item it takes at
        ``position`` (counted from 1, as :attr:`~wdspipes.io.readahead.Lookahead.index`): so
        that the read-ahead opens only the shards the reader reads."""
        readers, reader = layout
        return lambda position: self.passes_by(reader + (position - 1) * readers, began)

    def ended(self, opener: OpenEpoch) -> None:
        """The opener reached the shard to go on at, or the end of its shards: check that it
        skipped the shards read before the state was saved (by count and by a checksum of
        their URLs)."""
        restored = opener.restored
        saved = None if restored is None else restored.saved
        if self.checked or saved is None or (opener.taken, opener.digest) == saved:
            self.checked = True
            return
        raise ResumeError(
            f"the shards differ from those the state was saved with: of this reader's first "
            f"{saved[0]} shard URLs then, {opener.taken} were found now, with other names or "
            "order (a changed shard list, seed or split)"
        )

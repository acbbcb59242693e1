"""The opener stage: shard URLs in, open byte streams out, every one closed in time."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterator
from typing import Any

from torch.utils.data import IterDataPipe

from wdspipes.core.curried import Stage, stage_factory
from wdspipes.core.datapipe import StageDataPipe, functional_stage
from wdspipes.core.distributed import check_split, warn_idle_reader
from wdspipes.errors import (
    Handler,
    ResumeError,
    ShardOpenError,
    WdsError,
    handle,
    reraise_exception,
)
from wdspipes.io.cache import (
    DEFAULT_CACHE_SIZE,
    CacheDir,
    ShardCache,
    StorageOptions,
    opener_options,
)
from wdspipes.io.urls import ByteStream, ShardStream, close_quietly, open_url

__all__ = ["ShardOpener", "url_opener"]

log = logging.getLogger(__name__)


@functional_stage("open_shards")
class ShardOpener(StageDataPipe[ShardStream]):
    """Open each shard URL of the source (functional name: ``open_shards``).

    At most one stream is open at a time: the one yielded last is closed when the next is
    requested, and when iteration ends or is abandoned. Readers downstream may close it sooner.

    As each epoch begins it checks how the sharding filter upstream splits the shards among
    ranks and workers (see :func:`wdspipes.distributed.check_split`): a rank left without a
    shard is an error, an uneven split a warning.

    With ``cache_dir``, remote shards (every URL but local paths, ``file:`` URLs and ``-``;
    ``pipe:`` URLs included) are cached there: the first reader of a shard reads it from its
    URL and writes it to the cache as it goes, committing it once read to its end; later reads,
    in any process, open the cached copy. At most ``cache_size`` bytes are kept, the least
    recently used shards removed first. Streams then carry ``local_path``: the cache file, or a
    local shard's own path (samples get it as ``__local_path__``). See
    :mod:`wdspipes.io.cache`.

    Args:
        source_datapipe: yields shard URLs.
        handler: what to do when a shard cannot be opened (see :mod:`wdspipes.errors`).
        cache_dir: cache remote shards in this directory (created if needed); None for no cache.
        cache_size: with ``cache_dir``, the most bytes the cache keeps (None: no bound).
        storage_options: passed to ``open_url(url, storage_options=...)`` for every shard
            (options of a remote store, such as credentials); None passes nothing.

    Yields:
        A :class:`ShardStream` ``(url, stream)`` per shard.

    Raises:
        ShardOpenError: through ``handler``, for a shard that cannot be opened.
        ShardSplitError: some rank gets no shard.
        OSError: the cache directory cannot be made.

    >>> from wdspipes.read.shards import ShardList
    >>> shards = ShardList(["pipe:printf hello"]).open_shards()
    >>> [(url, stream.read()) for url, stream in shards]
    [('pipe:printf hello', b'hello')]
    """

    def __init__(
        self,
        source_datapipe: IterDataPipe[str],
        handler: Handler = reraise_exception,
        *,
        cache_dir: CacheDir | None = None,
        cache_size: int | None = DEFAULT_CACHE_SIZE,
        storage_options: StorageOptions | None = None,
    ) -> None:
        super().__init__()
        self.source_datapipe = source_datapipe
        self.handler = handler
        self.cache = None if cache_dir is None else ShardCache(cache_dir, cache_size)
        self.storage_options = storage_options
        # Resume bookkeeping (see wdspipes.core.resume): shards taken this epoch and a checksum
        # of their URLs, what a restored state asks of the next iteration, and the URLs of
        # shards to read again.
        self.taken = 0
        self.digest = 0
        self._saved: tuple[int, int] | None = None
        self._target: tuple[int | None, set[int]] | None = None
        self.replay_urls: dict[int, str] = {}

    def __iter__(self) -> Iterator[ShardStream]:
        expected = check_split(self)
        received = 0
        if self.cache is not None:
            self.cache.make_directory()
        target, self._target = self._target, None
        saved, self._saved = self._saved, None
        self.taken = self.digest = 0
        self.replay_urls = {}
        for url in self.source_datapipe:
            received += 1
            self.taken += 1
            self.digest = zlib.crc32(url.encode("utf-8", "surrogatepass"), self.digest)
            if target is not None:
                number, wanted = target
                if self.taken in wanted:
                    self.replay_urls[self.taken] = url
                if number is None or self.taken < number:
                    continue
                self._check_resumed(saved)
                target = None
            try:
                stream = self._open(url)
            except ShardOpenError as exn:
                if handle(self.handler, exn):
                    continue
                return
            try:
                yield ShardStream(url, stream)
            finally:
                close_quietly(stream)
        if target is not None:
            self._check_resumed(saved)
        if expected is None and not received:
            warn_idle_reader(self)

    def replay_state(self) -> dict[str, Any]:
        """The number of shards taken this epoch and a checksum of their URLs: restored, the
        opener reads the shard list again from its start, skips to the shard the reader after
        it asks for (:meth:`resume_at`), and checks that it skipped the same shards."""
        return {"taken": self.taken, "digest": self.digest}

    def resume_from(self, state: dict[str, Any]) -> None:
        self._saved = (state["taken"], state["digest"])

    def resume_at(self, number: int | None, wanted: set[int]) -> None:
        """Next iteration, skip the shards before number ``number`` (all of them if None),
        noting the URLs of the numbers in ``wanted`` in :attr:`replay_urls`: the link a
        restored reader makes with the opener it reads."""
        self._target = (number, wanted)

    def set_seed(self, seed: int) -> None:
        """A loader begins an epoch: a state loaded before is dropped (see wdspipes.core.resume)."""
        self._saved = self._target = None

    def open_again(self, url: str) -> ByteStream:
        """Open a shard read before, to read some of its samples again."""
        try:
            return self._open(url)
        except ShardOpenError as exn:
            raise ResumeError(f"cannot open a shard again to resume: {exn}") from exn

    def _check_resumed(self, saved: tuple[int, int] | None) -> None:
        """Raise unless the shards skipped to resume are the ones read before the state was
        saved (by count and by a checksum of their URLs)."""
        if saved is None or (self.taken, self.digest) == saved:
            return
        raise ResumeError(
            f"the shards differ from those the state was saved with: of this reader's first "
            f"{saved[0]} shard URLs then, {self.taken} were found now, with other names or order "
            "(a changed shard list, seed or split)"
        )

    def _open(self, url: str) -> ByteStream:
        if self.cache is None:
            return self._open_url(url)
        try:
            return self.cache.open(url, self._open_url)
        except WdsError:  # the shard's own failure (an OSError too)
            raise
        except OSError as exn:
            raise ShardOpenError(f"cannot open through the shard cache: {exn}", url=url) from exn

    def _open_url(self, url: str) -> ByteStream:
        if self.storage_options is None:
            return open_url(url)
        return open_url(url, storage_options=self.storage_options)


@stage_factory
def url_opener(
    handler: Handler = reraise_exception,
    *,
    cache_dir: CacheDir | None = None,
    cache_size: int | None = DEFAULT_CACHE_SIZE,
    storage_options: StorageOptions | None = None,
) -> Stage:
    """The opener stage for ``DataPipeline(...)``: ``open_shards(handler=handler, ...)``.

    >>> url_opener(cache_dir="/tmp/shards")
    ShardOpener(handler=<function reraise_exception at ...>, cache_dir='/tmp/shards')
    """
    return Stage(
        ShardOpener, handler=handler, **opener_options(cache_dir, cache_size, storage_options)
    )

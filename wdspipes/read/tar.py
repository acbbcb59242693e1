"""The ``load_tar`` stage: the regular files of each opened tar shard, with their places for
resume. The tar format itself (headers, compression, the end-of-archive marker, damage) is read
by :mod:`wdspipes.read.walk`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from wdspipes.core.context import EpochContext
from wdspipes.core.protocol import Epoch, Resumes, register
from wdspipes.core.stage import Stage
from wdspipes.errors import (
    Handler,
    reraise_exception,
)
from wdspipes.io.urls import ByteStream
from wdspipes.read.opener import OpenedShard
from wdspipes.read.positions import ShardCursor, read_shards
from wdspipes.read.walk import (
    MAX_MEMBER_SIZE,
    Member,
    TarMember,
    TarWalk,
    check_member_size,
    warn_unmarked,
)

__all__ = ["TarEpoch", "TarLoader"]


@register("load_tar")
class TarLoader(Stage[TarMember]):
    """Read the regular files of each opened tar shard (functional name: ``load_tar``).

    Each stream is read to its end and closed; a ``pipe:`` command that failed is reported
    then, in preference to the damage it did to the archive. A shard found bad is not kept in
    the shard cache (see :mod:`wdspipes.io.cache`).

    Args:
        source_datapipe: yields opened shards as ``open_shards`` does:
            :class:`~wdspipes.io.ShardStream` ``(url, stream)`` pairs, or dicts with ``"url"``
            and ``"stream"`` as webdataset's ``url_opener`` yields (their other keys go to
            ``group_samples``' samples: see :mod:`wdspipes.io.items`).
        handler: what to do when a shard is bad; continuing moves on to the next shard
            (the members before the damage have been yielded already; ``group_samples``
            drops the sample it was assembling from them, which may lack members).
        ignore_zeros: read on past zero blocks, as GNU tar's ``--ignore-zeros``: archives
            joined with ``cat`` are read whole. By default, bytes other than zeros after the
            end-of-archive marker are a :class:`~wdspipes.errors.DataAfterEndError`.
        strict_end: a shard ending after a member without the end-of-archive marker is a
            :class:`~wdspipes.errors.TruncatedShardError` (through ``handler``); by default
            its members are read and a :class:`~wdspipes.errors.NoEndMarkerWarning` names it.
        max_member_size: the most bytes a member may declare; more is a
            :class:`~wdspipes.errors.MemberTooLargeError` (through ``handler``) before it is
            read. A member read takes about its size in memory. Default 4 GiB
            (:data:`~wdspipes.read.walk.MAX_MEMBER_SIZE`).

    Yields:
        :class:`TarMember` ``(name, data, offset, url)`` for each regular file.

    Raises:
        ShardError: through ``handler``, for a truncated, corrupt or unreadable shard, or one
            with a member over ``max_member_size``.
        ValueError: ``max_member_size`` is not an int of at least 1.

    >>> import io, tarfile
    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> from wdspipes.io import ShardStream
    >>> buf = io.BytesIO()
    >>> with tarfile.open(fileobj=buf, mode="w") as tf:
    ...     for name in ("a.txt", "a.cls"):
    ...         info = tarfile.TarInfo(name); info.size = 1
    ...         tf.addfile(info, io.BytesIO(b"1"))
    >>> shards = IterableWrapper([ShardStream("mem.tar", io.BytesIO(buf.getvalue()))])
    >>> [(m.name, m.offset) for m in shards.load_tar()]
    [('a.txt', 0), ('a.cls', 1024)]
    """

    resumes = Resumes.FROM_START  # the reader after it keeps each sample's place

    def __init__(
        self,
        source_datapipe: Iterable[OpenedShard],
        handler: Handler = reraise_exception,
        *,
        ignore_zeros: bool = False,
        strict_end: bool = False,
        max_member_size: int = MAX_MEMBER_SIZE,
    ) -> None:
        super().__init__()
        self.source_datapipe = source_datapipe
        self.handler = handler
        self.ignore_zeros = ignore_zeros
        self.strict_end = strict_end
        self.max_member_size = check_member_size(max_member_size)

    def open(
        self, source: Iterable[OpenedShard], context: EpochContext, part: Any = None
    ) -> TarEpoch:
        return TarEpoch(self, source, context)

    def walk_options(self) -> dict[str, Any]:
        """How each shard is walked: the ``ignore_zeros``, ``strict_end`` and
        ``max_member_size`` options (the reader after it reads parts of shards again with them
        when resuming)."""
        return {
            "ignore_zeros": self.ignore_zeros,
            "strict_end": self.strict_end,
            "max_member_size": self.max_member_size,
        }


class TarEpoch(Epoch[TarMember]):
    """An epoch of ``load_tar``: its members as :class:`TarMember` records, or, to the reader
    after it (``group_samples``, which is handed this epoch as its source), as plain tuples
    (:meth:`members`). Bare members cannot resume: the reader keeps each sample's place."""

    read_by_next = True  # group_samples reads its members through members()

    def __init__(self, stage: TarLoader, source: Iterable[OpenedShard], context: EpochContext):
        self.stage = stage
        self.source = source
        self.log = context.shards

    def __iter__(self) -> Iterator[TarMember]:
        for member in self.members():
            yield TarMember._make(member)

    def members(
        self, cursor: ShardCursor | None = None, starts: Mapping[int, int] | None = None
    ) -> Iterator[Member]:
        """The members as plain tuples (not :class:`TarMember`), the failures of shards told.

        ``group_samples`` reads a ``load_tar`` right before it through this: members are the
        finest grain of the pipeline, and making a named tuple of each would cost more than
        parsing it.

        Args:
            cursor: if given, set to each shard's number and local file before its first
                member is yielded. When a shard fails, the member it failed in is noted there
                and :data:`FAILED` is yielded before the handler decides: the reader then
                drops the sample it was assembling unless it is known to be whole, naming it
                in ``cursor.dropped`` for the error. A shard that ends without the
                end-of-archive marker is noted there too, for the reader to judge its last
                sample; without a cursor, it is warned of.
            starts: shard index -> byte offset: the shards and the members' first headers to
                go on from, when resuming (see :func:`~wdspipes.read.positions.read_shards`).
        """
        handler, log = self.stage.handler, self.log
        if cursor is None:
            walk = self._walker(warn_unmarked)
            return read_shards(self.source, walk, handler, ShardCursor(), starts, log=log)
        walk = self._walker(cursor.note_unmarked_end)
        return read_shards(self.source, walk, handler, cursor, starts, FAILED, log)

    def _walker(
        self, unmarked_end: Callable[[str], None]
    ) -> Callable[[str, ByteStream, int], Iterator[Member]]:
        """How each shard is read: walked with the loader's options from byte ``start``,
        telling ``unmarked_end`` of a shard that ends without the end-of-archive marker."""
        options = self.stage.walk_options()

        def walk(url: str, stream: ByteStream, start: int) -> Iterator[Member]:
            return TarWalk(stream, url, start, unmarked_end=unmarked_end, **options).members()

        return walk


FAILED: Member = ("", b"", -1, "")
"""The member :meth:`TarEpoch.members` yields, given a cursor, when a shard fails."""

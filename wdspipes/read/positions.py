"""The reader base: the loop over opened shards that the readers share
(:func:`read_shards`), and where samples live: how the readers (``group_samples``,
``load_cbor``, ``load_msgpack``) keep their place in a shard and read samples again, for
mid-epoch resume (see :mod:`wdspipes.core.engine`).

A sample's place is its shard's index in the epoch's list of shards (as ``open_shards`` numbers
them: the same in every reader, see :mod:`wdspipes.core.elastic`) and the byte offset where it
starts. A reader saves the place of the next sample; a shuffle buffer saves the places of the
samples it holds, and on restore asks the reader to read those again before it goes on.

A reader is the stage a pipeline resumes around (it resumes
:attr:`~wdspipes.core.protocol.Resumes.AS_READER`). Its context hands it the links it shares
with the stages it works with: the :class:`~wdspipes.core.context.ShardLog` of the opener
before it, which numbers the shards and, restored, is told what to skip and opens shards
again; and the :class:`~wdspipes.core.context.SamplePlaces` it keeps up to date for a shuffle
buffer after it.
"""

from __future__ import annotations

import itertools
import reprlib
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import Any, NamedTuple, TypeVar

from wdspipes.core.context import EpochContext, Place, SamplePlaces, ShardLog
from wdspipes.core.elastic import owned
from wdspipes.core.protocol import AllReaders, Epoch, Resumes
from wdspipes.core.stage import Sample, Stage
from wdspipes.errors import Handler, ResumeError, ShardItemError, WdsError, handle
from wdspipes.io.items import ShardItem, shard_fields, shard_url, url_check
from wdspipes.io.urls import ByteStream, close_quietly, shard_failure
from wdspipes.read.opener import ALL, OpenedShard, ResumeTarget

__all__ = [
    "END",
    "START",
    "ReaderEpoch",
    "SampleReader",
    "ShardCursor",
    "read_shards",
    "sample_entries",
]

T = TypeVar("T")
_NONE: Any = object()

START, END = "start", "end"
"""A reader's position before the first sample of its epoch, and after the last."""

CHECKED = 32
"""How many of the last shards it entered a reader keeps a checksum of the URL of, in its state:
in a job resumed with another number of readers, the shards the readers go on in, and those the
samples of their shuffle buffers are in, are checked to be the same ones."""


class ShardCursor:
    """Which shard a reader is in: its index in the epoch's list of shards (as ``open_shards``
    numbers them; without an opener, its number among those read, from 0), its local file if
    any, and the entries every sample of it gets after ``__url__`` (:func:`sample_entries`), if
    any. Given a dict in ``checks``, it notes there a checksum of the URL of each of the last
    :data:`CHECKED` shards, by index.

    When the shard fails, the loader notes the member it failed in and where, if known
    (``failed_member``, ``failed_offset``), and the reader the key of the sample it dropped
    because it may lack members (``dropped``). When a shard ends after a member without the
    end-of-archive marker, the loader says so in ``unmarked_end``.
    """

    __slots__ = (
        "checks",
        "dropped",
        "entries",
        "failed_member",
        "failed_offset",
        "local_path",
        "number",
        "unmarked_end",
    )

    def __init__(self, checks: dict[int, int] | None = None) -> None:
        self.number = 0
        self.checks = checks
        self.local_path: str | None = None
        self.entries: dict[str, Any] | None = None
        self.failed_member: str | None = None
        self.failed_offset: int | None = None
        self.dropped: str | None = None
        self.unmarked_end: str | None = None

    def note_unmarked_end(self, problem: str) -> None:
        """The shard just read ended after a member without the end-of-archive marker: the
        reader judges its last sample (see ``group_samples``) and warns."""
        self.unmarked_end = problem

    def enter(self, stream: ByteStream, fields: dict[str, Any] | None) -> None:
        """A new shard begins: note its local file and the entries of its samples."""
        self.local_path = getattr(stream, "local_path", None)
        self.entries = sample_entries(fields, self.local_path)
        self.dropped = None


def sample_entries(fields: dict[str, Any] | None, local_path: str | None) -> dict[str, Any] | None:
    """The entries every sample of a shard gets after ``__url__``: the fields its dict item
    carries (see :mod:`wdspipes.io.items`), then ``__local_path__``, the local file it was
    read from (the stream's, else the item's ``local_path``); None if there are none.

    >>> sample_entries({"__lang__": "en"}, "/cache/a.tar")
    {'__lang__': 'en', '__local_path__': '/cache/a.tar'}
    >>> sample_entries(None, None) is None
    True
    """
    if local_path is not None:
        return {**(fields or {}), "__local_path__": local_path}
    return fields or None


def _shard_parts(shard: object) -> tuple[str, ByteStream, dict[str, Any] | None]:
    """The URL, stream and sample fields of an opened shard: a ``(url, stream)`` pair, or a
    dict with ``"url"`` and ``"stream"`` as webdataset's ``url_opener`` yields (see
    :data:`~wdspipes.read.opener.OpenedShard`).

    Raises:
        ShardItemError: it is neither.
    """
    if isinstance(shard, tuple) and len(shard) == 2:
        url, stream = shard
        return url, stream, None
    if not isinstance(shard, Mapping) or shard.get("stream") is None:
        raise ShardItemError(
            'an opened shard must be a (url, stream) pair or a dict with "url" and '
            '"stream" (as webdataset\'s url_opener yields), got '
            f"{type(shard).__name__} {reprlib.repr(shard)}"
        )
    return shard_url(shard), shard["stream"], shard_fields(shard)


def read_shards(
    source: Iterable[OpenedShard],
    read: Callable[[str, ByteStream, int], Iterator[T]],
    handler: Handler,
    cursor: ShardCursor,
    starts: Mapping[int, int] | None = None,
    failed: T | None = None,
    log: ShardLog | None = None,
) -> Iterator[T]:
    """The items of every shard ``source`` opens, shard after shard: the loop that every reader
    of opened shards runs (``load_tar``, ``load_cbor``, ``load_msgpack``).

    Each stream is read to its end with ``read(url, stream, offset)`` and then closed, so that
    a ``pipe:`` command that failed is reported, in preference to the damage it did to the
    shard; a failure of either goes through ``handler`` as a located error (see
    :func:`~wdspipes.io.urls.shard_failure`), and the stream is closed whatever happens.

    Args:
        source: yields opened shards, as ``open_shards`` does: ``(url, stream)`` pairs, or
            dicts with ``"url"`` and ``"stream"`` whose other keys every item of the shard
            carries (a :class:`~wdspipes.errors.ShardItemError` through ``handler`` if neither).
        read: the items of one shard, ``stream`` (named ``url``), from byte ``offset``: 0 but
            in the shards that ``starts`` names.
        handler: what to do when a shard fails: continuing goes on with the next shard.
        cursor: set to each shard's index (as ``open_shards`` numbers them in ``log``, if
            given; else its number among those read), local file and sample entries before
            its first item; when a shard fails, the member and offset that its error names
            are noted there.
        starts: shard index -> byte offset: where to go on from when resuming. Only the
            shards with those indexes begin there: if one cannot be opened any more, the one
            after it begins at its start.
        failed: if given, yielded when a shard fails, before ``handler`` decides: the reader
            after it may drop the sample it was assembling, naming it in ``cursor.dropped``
            for the error.
        log: the opener's shard log (the reader's context's), by which shards are numbered.

    >>> import io
    >>> from wdspipes.errors import reraise_exception
    >>> from wdspipes.io.urls import ShardStream
    >>> shards = [ShardStream("a", io.BytesIO(b"xyz")),
    ...           ShardStream("b", io.BytesIO(b"uvw"))]
    >>> def read(url, stream, offset):
    ...     stream.seek(offset)
    ...     return iter([(url, stream.read())])
    >>> cursor = ShardCursor()
    >>> list(read_shards(shards, read, reraise_exception, cursor, starts={0: 2}))
    [('a', b'z'), ('b', b'uvw')]
    >>> cursor.number
    1
    """
    numbered = log is not None and log.open_again is not None  # an opener writes it
    checks = cursor.checks
    for number, shard in enumerate(source):
        cursor.number = log.index if numbered else number  # type: ignore[union-attr]
        try:
            url, stream, fields = _shard_parts(shard)
        except ShardItemError as exn:
            if not handle(handler, exn):
                return
            continue
        cursor.enter(stream, fields)
        if checks is not None:
            checks[cursor.number] = url_check(url)
            if len(checks) > CHECKED:
                del checks[next(iter(checks))]
        offset = starts.get(cursor.number, 0) if starts else 0
        try:
            yield from read(url, stream, offset)
            stream.close()  # a pipe: command's failure is raised here
        except Exception as exn:
            cursor.failed_member = getattr(exn, "member", None)
            cursor.failed_offset = getattr(exn, "offset", None)
            if failed is not None:
                yield failed
            # No local holds the error: a frame of its traceback holding it would make a
            # cycle that keeps the files of the pipeline open until garbage collection.
            if not handle(handler, _dropping(shard_failure(exn, url, stream), cursor)):
                return
        finally:
            close_quietly(stream)


def _dropping(error: Exception, cursor: ShardCursor) -> Exception:
    """``error``, saying which sample the reader dropped, if it did."""
    if cursor.dropped is not None and isinstance(error, WdsError):
        error.add_detail(f"sample {cursor.dropped!r}, read in part, was dropped")
    return error


class Partials(NamedTuple):
    """Where the readers of a merged state were in the shards they had begun: shard index ->
    the reader's place in it (byte offset, and for a stream shard the item's number); and the
    checksums of the URLs of the last shards they entered, by index."""

    places: dict[int, list[int]]
    checks: dict[int, int]


class SampleReader(Stage[Sample]):
    """A stage that makes samples of opened shards and knows where each one lives: a reader.

    A subclass's :meth:`open` returns its :class:`ReaderEpoch` subclass, made with
    :meth:`resume_of` the part it was given.
    """

    resumes = Resumes.AS_READER
    shares = True

    @staticmethod
    def resume_of(part: Any) -> list[int] | str | Partials | None:
        """What a restored part leaves to do: the place to go on from (``[shard index, byte
        offset, ...]``, or ``"end"``), None for the epoch's start; for the parts of every
        reader of a job split another way, where each was (:class:`Partials`)."""
        if not isinstance(part, AllReaders):
            resume = None if part is None else part["next"]
            return None if resume == START else resume
        places: dict[int, list[int]] = {}
        checks: dict[int, int] = {}
        for each in part.parts:
            if isinstance(each["next"], list):
                index, *place = each["next"]
                places[index] = place
            checks.update((int(index), check) for index, check in each["checks"].items())
        return Partials(places, checks)


class ReaderEpoch(Epoch[Sample]):
    """An epoch of a reader: the shard it is in (:attr:`cursor`), where the next sample starts
    in it (:attr:`next_offset`), checksums of the last shards' URLs, and the place of the sample
    yielded last (``places.last``), for a shuffle buffer after it.

    A subclass reads its shards through :func:`read_shards` with :attr:`cursor`, keeps
    :attr:`next_offset` and ``places.last`` up to date, calls :meth:`_begin` as its iteration
    starts and :meth:`_replay_first` with what it returns, and implements :meth:`_collect`
    (and :meth:`_refusal`, where it cannot resume).
    """

    def __init__(
        self,
        source: Iterable[Any],
        context: EpochContext,
        resume: list[int] | str | Partials | None,
    ) -> None:
        self.source = source
        self.context = context
        self.log = context.shards
        self.places = context.places or SamplePlaces()
        self.checks: dict[int, int] = {}  # of the last shards' URLs (see read_shards)
        self.cursor = ShardCursor(self.checks)
        self.next_offset: int | str = START
        self.resume = resume

    def _refusal(self) -> ResumeError | None:
        """Why this reader cannot resume, or None: it must read the shards of an opener."""
        if self.log is None or self.log.open_again is None:
            return ResumeError(f"{self.name} can resume only when it reads open_shards directly")
        return None

    @property
    def name(self) -> str:
        return "the reader"

    def _collect(
        self, stream: ByteStream, url: str, offsets: list[int], cursor: ShardCursor
    ) -> dict[int, Sample]:
        """The samples of shard ``url`` (opened as ``stream``, entered in ``cursor``) that
        start at ``offsets`` (sorted), by offset."""
        raise NotImplementedError

    def _begin(self) -> tuple[dict[int, list[int]], list[Place]]:
        """Begin the epoch: take what a restored state left to do, and tell the opener what to
        skip. Returns the places to go on from in the shards begun (shard index -> byte offset
        and, for stream shards, the item's number), and the places of samples to read again
        first (a restored shuffle buffer's, through :attr:`places`)."""
        resume, replay = self.resume, self.places.replay()
        self.resume = None
        self.places.clear()
        if resume is None:
            if replay:
                raise ResumeError("a shuffle buffer holds samples, but the reader has not begun")
            return {}, []
        refusal = self._refusal()
        if refusal is not None:
            raise refusal
        log = self.log
        assert log is not None
        wanted = {shard for shard, _ in replay}
        if isinstance(resume, Partials):  # a merged state: this reader's shards of it
            split = self.context.split
            layout = (1, 0) if split is None else split.stream
            starts = {index: at for index, at in resume.places.items() if owned(index, layout)}
            log.target = ResumeTarget(None, wanted, set(starts), dict(resume.checks))
            return starts, replay
        if not isinstance(resume, list):  # the end of its epoch
            log.target = ResumeTarget(ALL, wanted, set(), {})
            return {}, replay
        index, *place = resume
        log.target = ResumeTarget(index, wanted, set(), {})
        return {index: place}, replay

    def _replay_first(
        self, items: Iterator[T], replay: list[Place]
    ) -> Generator[Sample, None, Iterator[T]]:
        """Yield the samples at ``replay`` (a restored shuffle buffer's) before reading on;
        returns ``items`` to read on from. The first item is taken before: it makes the opener
        go through the shards to the one to resume at, noting the items of those to read again.
        Where it is a sample, its place is the last again once the others are yielded."""
        if not replay:
            return items
        first = next(items, _NONE)
        places = self.places
        last = places.last
        yield from self._read_again(replay)
        places.last = last
        return iter(()) if first is _NONE else itertools.chain((first,), items)

    def _read_again(self, refs: list[Place]) -> Iterator[Sample]:
        """The samples at ``refs`` (shard index, offset), in that order: each shard they are
        in is opened once."""
        log = self.log
        assert log is not None
        found: dict[Place, Sample] = {}
        by_shard: dict[int, list[int]] = {}
        for shard, offset in refs:
            by_shard.setdefault(shard, []).append(offset)
        for shard, offsets in sorted(by_shard.items()):
            item = log.replay_items.get(shard)
            if item is None:
                raise ResumeError(
                    f"the shard at index {shard} of the epoch's list, which a saved shuffle "
                    "buffer's samples are in, is not in the shard list any more"
                )
            offsets.sort()
            for offset, sample in self._samples_at(item, offsets).items():
                found[shard, offset] = sample
        places = self.places
        for ref in refs:
            places.last = ref
            yield found[ref]

    def _samples_at(self, item: ShardItem, offsets: list[int]) -> dict[int, Sample]:
        log = self.log
        assert log is not None and log.open_again is not None
        stream = log.open_again(item)  # a ResumeError if it cannot be opened
        url = shard_url(item)
        cursor = ShardCursor()
        cursor.enter(stream, None if isinstance(item, str) else shard_fields(item))
        try:
            samples = self._collect(stream, url, offsets, cursor)
        except Exception as exn:
            raise ResumeError(
                f"{url}: cannot read again the samples of a saved shuffle buffer: {exn}"
            ) from exn
        finally:
            close_quietly(stream)
        missing = sorted(set(offsets) - samples.keys())
        if missing:
            raise ResumeError(
                f"{url}: no sample starts at byte {missing[0]}, where the saved state has one"
            )
        return samples

    def part(self) -> dict[str, Any]:
        """The place of the next sample: ``[shard index, byte offset]``, or ``"start"`` or
        ``"end"`` of the epoch; and checksums of the URLs of the last shards entered.

        Raises:
            ResumeError: the reader does not read ``open_shards`` as it must to resume.
        """
        refusal = self._refusal()
        if refusal is not None:
            raise refusal
        offset = self.next_offset
        place = [self.cursor.number, offset] if isinstance(offset, int) else offset
        return {"next": place, "checks": dict(self.checks)}

"""Stream shards: files of concatenated CBOR or msgpack items, each item one sample.

A stream shard has no tar framing: item follows item to the end of the file. Each item must be
a map (a sample dict). The loaders add ``__url__`` (the shard) and, where the item has none,
``__key__`` (the item's number in its shard, ``"000000"``, ``"000001"``, ...), and the fields
of a dict shard item and ``__local_path__`` (with a shard cache), as tar samples get them.
Values keep the types the encoding gives them: bytes stay bytes for ``decode`` to decode by
extension, numbers and strings arrive decoded already (``decode(..., partial=True)`` lets them
through).

A truncated last item, bytes that are no item (whatever the CBOR or msgpack library raises on
them), an item that is not a map, an item with a key that is not a string (keys name fields),
or, in msgpack, a map anywhere in an item with an array or a map as a key (Python cannot hold
it) is a :class:`~wdspipes.errors.StreamFormatError` naming the URL and the item's byte
offset. Items have no framing to resynchronise on, so a handler that continues skips the rest
of that shard and goes on with the next. A shard cut exactly between two items cannot be told
from a shorter one: it reads without an error, which is why the writers put a file under its
name only once it is complete (:mod:`wdspipes.write.stream_shards`).

The loaders save their place for mid-epoch resume (:mod:`wdspipes.read.positions`): the next item's
shard, byte offset and number in its shard.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import cbor2
import msgpack

from wdspipes.core.context import EpochContext
from wdspipes.core.protocol import register
from wdspipes.core.stage import Sample
from wdspipes.errors import Handler, StreamFormatError, reraise_exception
from wdspipes.io.urls import ByteStream, RawShard, discard
from wdspipes.read.opener import OpenedShard
from wdspipes.read.positions import (
    END,
    Partials,
    ReaderEpoch,
    SampleReader,
    ShardCursor,
    read_shards,
)

__all__ = [
    "CborLoader",
    "MsgpackLoader",
]

CHUNK_SIZE = 1 << 16


class _Decoder(Protocol):
    def __call__(
        self, url: str, stream: ByteStream, start: int = 0
    ) -> Iterator[tuple[int, int, Any]]: ...


_MALFORMED = (ValueError, TypeError, OverflowError, RecursionError)
"""What the decoders may raise on bytes they cannot decode, besides cbor2's CBORDecodeError:
msgpack's errors (ValueError: FormatError, StackError, ExtraData), UnicodeDecodeError, a map
key msgpack cannot hash (TypeError), and what other versions or pure-Python builds raise."""


def _cbor_items(url: str, stream: ByteStream, start: int = 0) -> Iterator[tuple[int, int, Any]]:
    """``(offset, end, item)`` for each CBOR item of the stream, which is at byte ``start``."""
    counting = RawShard(stream, start=start)
    reader = io.BufferedReader(counting, CHUNK_SIZE)
    decoder = cbor2.CBORDecoder(reader)
    while True:
        offset = reader.tell()
        if not reader.peek(1):
            return
        try:
            item = decoder.decode()
        except cbor2.CBORDecodeEOF as exn:
            raise StreamFormatError(
                "the stream ends inside a CBOR item (a truncated shard?)", url=url, offset=offset
            ) from exn
        except (cbor2.CBORDecodeError, *_MALFORMED) as exn:
            failure = counting.failure  # the stream failed, not the bytes: cbor2 may wrap
            if failure is not None:  # the error of a read in a CBORDecodeError
                raise failure from failure.__cause__
            raise StreamFormatError(
                f"not a CBOR item ({_describe(exn)})", url=url, offset=offset
            ) from exn
        yield offset, reader.tell(), item


def _msgpack_items(url: str, stream: ByteStream, start: int = 0) -> Iterator[tuple[int, int, Any]]:
    """``(offset, end, item)`` for each msgpack item of the stream, which is at byte
    ``start``."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=0)
    received = offset = start  # ``offset``: where the next item begins (tell() counts partial)
    while chunk := stream.read(CHUNK_SIZE):
        unpacker.feed(chunk)
        received += len(chunk)
        while True:
            try:
                item = unpacker.unpack()
            except msgpack.OutOfData:
                break
            except TypeError as exn:  # {[1]: 2}: a list or dict cannot be a dict key
                raise StreamFormatError(
                    f"a msgpack map has a key that is an array or a map ({_describe(exn)})",
                    url=url,
                    offset=offset,
                ) from exn
            except _MALFORMED as exn:
                raise StreamFormatError(
                    f"not a msgpack item ({_describe(exn)})", url=url, offset=offset
                ) from exn
            end = start + unpacker.tell()
            yield offset, end, item
            offset = end
    if offset != received:
        raise StreamFormatError(
            "the stream ends inside a msgpack item (a truncated shard?)", url=url, offset=offset
        )


def _skip_to(stream: ByteStream, url: str, start: int) -> None:
    """Go to byte ``start`` of a shard: by seeking a local file, else by reading up to it."""
    if getattr(stream, "seekable", lambda: False)():
        stream.seek(start)  # type: ignore[attr-defined]
    elif not discard(stream.read, start):
        raise StreamFormatError(f"the stream ends before byte {start}", url=url, offset=start)


def _describe(exn: Exception) -> str:
    return f"{type(exn).__name__}: {exn}" if str(exn) else type(exn).__name__


class StreamLoader(SampleReader):
    """Samples from opened stream shards, one per item; see the module docstring. The base of
    ``load_cbor`` and ``load_msgpack``."""

    kind = ""
    items: _Decoder

    def __init__(
        self, source_datapipe: Iterable[OpenedShard], handler: Handler = reraise_exception
    ) -> None:
        super().__init__()
        self.source_datapipe = source_datapipe
        self.handler = handler

    def open(
        self, source: Iterable[OpenedShard], context: EpochContext, part: Any = None
    ) -> StreamEpoch:
        return StreamEpoch(self, source, context, self.resume_of(part))


class StreamEpoch(ReaderEpoch):
    """An epoch of ``load_cbor`` or ``load_msgpack`` (see
    :class:`~wdspipes.read.positions.ReaderEpoch`); it also keeps the number, in its shard, of
    the next item (its default ``__key__``)."""

    def __init__(
        self,
        stage: StreamLoader,
        source: Iterable[OpenedShard],
        context: EpochContext,
        resume: list[int] | str | Partials | None,
    ) -> None:
        super().__init__(source, context, resume)
        self.stage = stage
        self.next_index = 0  # the next item's number in its shard (its default __key__)
        self._first_index: dict[int, int] = {}  # of the shards resumed mid-way, by index

    @property
    def name(self) -> str:
        return type(self.stage).__name__

    def __iter__(self) -> Iterator[Sample]:
        starts, replay = self._begin()
        self._first_index = {index: place[1] for index, place in starts.items()}
        offsets = {index: place[0] for index, place in starts.items()}
        handler = self.stage.handler
        samples = read_shards(
            self.source, self._samples, handler, self.cursor, offsets, log=self.log
        )
        samples = yield from self._replay_first(samples, replay)
        yield from samples
        self.next_offset = END

    def _samples(self, url: str, stream: ByteStream, start: int) -> Iterator[Sample]:
        """The samples of one shard from byte ``start``, where the item whose number a restored
        state gave begins when ``start`` is not 0."""
        _skip_to(stream, url, start)
        number, entries = self.cursor.number, self.cursor.entries
        places, kind = self.places, self.stage.kind
        items = type(self.stage).items(url, stream, start)
        first = self._first_index.get(number, 0) if start else 0
        for index, (offset, end, item) in enumerate(items, start=first):
            sample = _sample(item, url, entries, index, offset, kind)
            places.last = (number, offset)
            self.next_offset, self.next_index = end, index + 1
            yield sample

    def _collect(
        self, stream: ByteStream, url: str, offsets: list[int], cursor: ShardCursor
    ) -> dict[int, Sample]:
        # Read from the start: an item without a __key__ is keyed by its number in the shard.
        entries = cursor.entries
        wanted, samples = set(offsets), {}
        kind = self.stage.kind
        for index, (offset, _end, item) in enumerate(type(self.stage).items(url, stream)):
            if offset in wanted:
                samples[offset] = _sample(item, url, entries, index, offset, kind)
                if len(samples) == len(wanted):
                    break
        return samples

    def part(self) -> dict[str, Any]:
        state = super().part()
        if isinstance(state["next"], list):
            state["next"].append(self.next_index)
        return state


def _sample(
    item: Any, url: str, entries: dict[str, Any] | None, index: int, offset: int, kind: str
) -> Sample:
    if not isinstance(item, dict):
        raise StreamFormatError(
            f"a {kind} item must be a map (a sample), got {type(item).__name__}",
            url=url,
            offset=offset,
        )
    for name in item:
        if not isinstance(name, str):
            raise StreamFormatError(
                f"a {kind} item's keys must be strings (field names), not {type(name).__name__}",
                url=url,
                offset=offset,
            )
    key = item.setdefault("__key__", f"{index:06d}")
    if not isinstance(key, str):
        raise StreamFormatError(
            f"a {kind} item's __key__ must be a string, not {type(key).__name__}",
            url=url,
            offset=offset,
        )
    item["__url__"] = url
    if entries is not None:
        item.update(entries)
    return item


@register("load_cbor")
class CborLoader(StreamLoader):
    """Samples from shards of concatenated CBOR items (functional name: ``load_cbor``).

    Args:
        source_datapipe: yields opened shards (``open_shards``).
        handler: what to do with a damaged shard: continuing skips the rest of it.

    Yields:
        One sample dict per item, with ``__url__`` (and ``__key__`` if it had none).

    Raises:
        StreamFormatError: through ``handler``, naming the URL and byte offset.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> from wdspipes.io import ShardStream
    >>> data = cbor2.dumps({"__key__": "a", "cls": 0}) + cbor2.dumps({"cls": 1})
    >>> shards = IterableWrapper([ShardStream("mem.cbor", io.BytesIO(data))],
    ...                          deepcopy=False)
    >>> list(shards.load_cbor())  # doctest: +NORMALIZE_WHITESPACE
    [{'__key__': 'a', 'cls': 0, '__url__': 'mem.cbor'},
     {'cls': 1, '__key__': '000001', '__url__': 'mem.cbor'}]
    """

    kind = "CBOR"
    items = staticmethod(_cbor_items)


@register("load_msgpack")
class MsgpackLoader(StreamLoader):
    """Samples from shards of concatenated msgpack items (functional name: ``load_msgpack``).

    Args:
        source_datapipe: yields opened shards (``open_shards``).
        handler: what to do with a damaged shard: continuing skips the rest of it.

    Yields:
        One sample dict per item, with ``__url__`` (and ``__key__`` if it had none).

    Raises:
        StreamFormatError: through ``handler``, naming the URL and byte offset.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> from wdspipes.io import ShardStream
    >>> data = msgpack.packb({"__key__": "a", "cls": 0}) + b"\\xc1"  # 0xc1 is never used
    >>> shards = IterableWrapper([ShardStream("mem.mp", io.BytesIO(data))], deepcopy=False)
    >>> list(shards.load_msgpack())
    Traceback (most recent call last):
    ...
    wdspipes.errors.StreamFormatError: mem.mp, at byte 16: not a msgpack item (FormatError)...
    """

    kind = "msgpack"
    items = staticmethod(_msgpack_items)

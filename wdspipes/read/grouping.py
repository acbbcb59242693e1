"""The webdataset grouper: tar members to samples, by key (FORMAT.md sections 3 and 4).

A member name splits into a *key* and a *field* (:func:`~wdspipes.core.names.split_name`).
Consecutive members with the same key form one sample; a sample never spans two shards. Meta
files (:func:`~wdspipes.core.names.is_meta`) are skipped.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from wdspipes.core.context import EpochContext
from wdspipes.core.names import is_meta, split_name
from wdspipes.core.protocol import register
from wdspipes.core.stage import Sample
from wdspipes.errors import (
    DuplicateFieldError,
    Handler,
    NoEndMarkerWarning,
    ResumeError,
    handle,
    reraise_exception,
)
from wdspipes.io.items import ShardItem
from wdspipes.io.urls import ByteStream
from wdspipes.read.opener import ShardOpener
from wdspipes.read.positions import END, Partials, ReaderEpoch, SampleReader, ShardCursor
from wdspipes.read.shards import ShardList
from wdspipes.read.tar import TarEpoch, TarLoader
from wdspipes.read.walk import Member, TarMember, TarWalk

__all__ = ["GroupEpoch", "SampleGrouper", "tar_samples"]


@register("group_samples")
class SampleGrouper(SampleReader):
    """Group consecutive members with one key into a sample (functional name: ``group_samples``).

    Meta files and names without a field are skipped. A new shard (a new URL, or an offset
    that does not increase) always starts a new sample.

    Args:
        source_datapipe: yields :class:`~wdspipes.read.walk.TarMember` records, as ``load_tar``
            does.
        handler: what to do with a duplicate field; continuing drops the duplicate member
            and goes on with the sample, stopping yields the sample so far and ends.

    Yields:
        Dicts with ``__key__``, ``__url__`` and one ``bytes`` value per field, in tar order.
        Reading ``load_tar`` directly, the fields a dict shard item carries (``{"url": ...,
        "lang": "en"}`` gives ``__lang__``: see :mod:`wdspipes.io.items`) and, for a shard
        opened with a local file (``open_shards`` with a ``cache_dir`` or ``local_path``),
        ``__local_path__`` come after ``__url__``.

    Raises:
        DuplicateFieldError: through ``handler``, for a field seen twice in one sample
            (``__key__``, ``__url__``, ``__local_path__`` and fields of the shard item
            included).

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> members = [TarMember("0.jpg", b"J", 0, "s.tar"),
    ...            TarMember("0.cls", b"1", 1024, "s.tar"),
    ...            TarMember("1.jpg", b"K", 2048, "s.tar")]
    >>> list(IterableWrapper(members).group_samples())  # doctest: +NORMALIZE_WHITESPACE
    [{'__key__': '0', '__url__': 's.tar', 'jpg': b'J', 'cls': b'1'},
     {'__key__': '1', '__url__': 's.tar', 'jpg': b'K'}]
    """

    def __init__(
        self, source_datapipe: Iterable[TarMember], handler: Handler = reraise_exception
    ) -> None:
        super().__init__()
        self.source_datapipe = source_datapipe
        self.handler = handler

    def open(
        self, source: Iterable[TarMember], context: EpochContext, part: Any = None
    ) -> GroupEpoch:
        return GroupEpoch(self, source, context, self.resume_of(part))


class GroupEpoch(ReaderEpoch):
    """An epoch of ``group_samples`` (see :class:`~wdspipes.read.positions.ReaderEpoch`). The
    members of a ``load_tar`` right before it are read as plain tuples (its epoch's
    ``members``), which also tells it of shards that fail; it resumes only so."""

    name = "SampleGrouper (group_samples)"

    def __init__(
        self,
        stage: SampleGrouper,
        source: Iterable[TarMember],
        context: EpochContext,
        resume: list[int] | str | Partials | None,
    ) -> None:
        super().__init__(source, context, resume)
        self.handler = stage.handler
        self.loader = source if type(source) is TarEpoch else None

    def _refusal(self) -> ResumeError | None:
        if self.loader is None or self.log is None or self.log.open_again is None:
            return ResumeError(
                f"{self.name} can resume only when it reads load_tar right after open_shards"
            )
        return None

    def __iter__(self) -> Iterator[Sample]:
        starts, replay = self._begin()
        cursor = self.cursor
        if self.loader is not None:
            # Members as plain tuples, straight from the tar loader, which also tells of failed
            # shards.
            offsets = {index: place[0] for index, place in starts.items()}
            upstream: Iterator[Member] = self.loader.members(cursor, offsets)
        else:
            upstream = iter(self.source)
        try:
            members = yield from self._replay_first(upstream, replay)
            yield from self._grouped(members, cursor)
        finally:
            # Ended, abandoned or failed: the shard open upstream is closed now, not when the
            # error that ended the iteration is collected.
            close = getattr(upstream, "close", None)
            if close is not None:
                close()

    def _grouped(self, members: Iterator[Member], cursor: ShardCursor) -> Iterator[Sample]:
        """The samples of ``members``, noting where each lives and where the next begins."""
        sample: Sample | None = None
        last_url = None
        last_offset = -1
        entries = None
        ref = (0, 0)
        places = self.places
        width = 0  # the entries of the sample yielded last from this shard (0: none yet)
        for name, data, offset, url in members:
            if offset <= last_offset or url != last_url:
                if cursor.unmarked_end is not None and sample is not None:
                    sample = self._last_of_unmarked(sample, width, cursor)
                width = 0
                if offset < 0:  # FAILED: the shard broke off
                    if sample is not None and ref[0] == cursor.number:
                        end = self._whole_until(cursor, sample["__key__"])
                        if end is not None:
                            self.next_offset = end
                            places.last = ref
                            yield sample
                        else:
                            cursor.dropped = sample["__key__"]
                        sample = None
                    last_url = None
                    continue
                if sample is not None:
                    self.next_offset = offset
                    places.last = ref
                    yield sample
                    sample = None
                last_url = url
                entries = cursor.entries
            last_offset = offset
            if name.startswith("__") and is_meta(name):
                continue
            # split_name, inlined: this loop runs once per member
            slash = name.rfind("/")
            dot = name.find(".", slash + 1)
            if dot > slash + 1 and "\n" not in name:
                key = name[:dot]
                field = name[dot + 1 :].lower()
            else:
                parts = split_name(name)
                if parts is None:
                    continue
                key, field = parts
            if sample is None or key != sample["__key__"]:
                if sample is not None:
                    self.next_offset = offset
                    places.last = ref
                    width = len(sample)
                    yield sample
                ref = (cursor.number, offset)
                if entries is None:
                    sample = {"__key__": key, "__url__": url}
                else:
                    sample = {"__key__": key, "__url__": url, **entries}
            if field in sample:
                if self._skip_duplicate(name, key, field, offset, url):
                    continue
                self.next_offset = END
                places.last = ref
                yield sample
                return
            sample[field] = data
        self.next_offset = END
        if cursor.unmarked_end is not None and sample is not None:
            sample = self._last_of_unmarked(sample, width, cursor)
        if sample is not None:
            places.last = ref
            yield sample

    @staticmethod
    def _last_of_unmarked(sample: Sample, width: int, cursor: ShardCursor) -> Sample | None:
        """The last sample of a shard that ended after a member without the end-of-archive
        marker, if it is known whole: it has as many fields as the sample before it in the
        shard. Warns either way; None (dropped) if it may lack members."""
        problem, cursor.unmarked_end = cursor.unmarked_end, None
        whole = width > 0 and len(sample) >= width
        why = (
            "has fewer fields than the sample before it"
            if width
            else "cannot be checked against another sample (it is the only one)"
        )
        verdict = (
            "its samples were read"
            if whole
            else f"its last sample {sample['__key__']!r} was dropped: it may lack members "
            f"(it {why})"
        )
        warnings.warn(
            NoEndMarkerWarning(f"{problem}: {verdict}; strict_end=True refuses it"), stacklevel=3
        )
        return sample if whole else None

    @staticmethod
    def _whole_until(cursor: ShardCursor, key: str) -> int | None:
        """Where the sample ``key``, being assembled when its shard failed, is known to end:
        at the member the shard failed in, if that has another key (its name was read);
        None if it may lack members."""
        name, offset = cursor.failed_member, cursor.failed_offset
        parts = None if name is None else split_name(name)
        return offset if parts is not None and parts[0] != key else None

    def _collect(
        self, stream: ByteStream, url: str, offsets: list[int], cursor: ShardCursor
    ) -> dict[int, Sample]:
        assert self.loader is not None  # it resumes only so
        options = self.loader.stage.walk_options()
        samples: dict[int, Sample] = {}
        if getattr(stream, "seekable", lambda: False)():
            for offset in offsets:
                stream.seek(0)  # type: ignore[attr-defined]
                walk = _quiet_walk(stream, url, offset, options)
                samples[offset] = next(self._grouped(walk, cursor))
            return samples
        wanted = set(offsets)
        walk = _quiet_walk(stream, url, offsets[0], options)
        for sample in self._grouped(walk, cursor):
            offset = self.places.last[1]
            if offset in wanted:
                samples[offset] = sample
                if len(samples) == len(wanted):
                    break
        return samples

    def _skip_duplicate(self, name: str, key: str, field: str, offset: int, url: str) -> bool:
        """Route a duplicate field through the handler: True to drop it and go on."""
        # No local holds the error: see TarLoader.iter_members.
        return handle(
            self.handler,
            DuplicateFieldError(
                f"duplicate field {field!r}", url=url, member=name, key=key, offset=offset
            ),
        )


def tar_samples(
    urls: Sequence[ShardItem], *, ignore_zeros: bool = False, handler: Handler = reraise_exception
) -> SampleGrouper:
    """The samples of the tar shards at ``urls``, in order, through the core stages (no
    torch): ``group_samples`` over ``load_tar`` over ``open_shards`` over the list. What the
    ``wdspipes`` commands that read shards use.

    >>> import io, tarfile, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "s.tar")
    >>> with tarfile.open(path, "w") as archive:
    ...     info = tarfile.TarInfo("k.txt"); info.size = 2
    ...     archive.addfile(info, io.BytesIO(b"hi"))
    >>> [(sample["__key__"], sample["txt"]) for sample in tar_samples([path])]
    [('k', b'hi')]
    """
    opened = ShardOpener(ShardList(list(urls)), handler=handler)
    return SampleGrouper(TarLoader(opened, handler=handler, ignore_zeros=ignore_zeros), handler)


def _quiet_walk(stream: ByteStream, url: str, start: int, options: dict[str, Any]) -> Any:
    """The members of a shard from ``start``, read again to restore samples delivered before:
    a missing end-of-archive marker was reported then, and is not again."""
    return TarWalk(stream, url, start, unmarked_end=_already_reported, **options).members()


def _already_reported(problem: str) -> None:
    return None

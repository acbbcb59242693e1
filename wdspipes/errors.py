"""Errors that say where the data is bad, and the handler policies every stage routes them through.

Each error names the shard URL and, where known, the tar member, the sample key and the byte
offset; the underlying exception is chained as ``__cause__``. A *handler* decides what a stage
does with an error: return True to skip the bad item and go on, False to end the stage's
stream, or raise. Every stage applies a handler through :func:`handle`.

>>> err = TruncatedShardError("expected 512 bytes of header, got 100",
...                           url="a.tar", member="0001.jpg", offset=1024)
>>> str(err)
"a.tar, member '0001.jpg', at byte 1024: expected 512 bytes of header, got 100"
>>> handle(ignore_and_continue, err), handle(ignore_and_stop, err)
(True, False)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

__all__ = [
    "CollationError",
    "CommandError",
    "DataAfterEndError",
    "DataWarning",
    "DecodeError",
    "DuplicateFieldError",
    "EncodeError",
    "Handler",
    "MissingFieldError",
    "NoEndMarkerWarning",
    "ResumeError",
    "SampleError",
    "ShardError",
    "ShardOpenError",
    "StreamFormatError",
    "TarFormatError",
    "TruncatedShardError",
    "WdsError",
    "handle",
    "ignore_and_continue",
    "ignore_and_stop",
    "reraise_exception",
    "sample_location",
    "warn_and_continue",
    "warn_and_stop",
]

Handler = Callable[[Exception], object]
"""A handler takes the exception and returns True (continue), False (stop), or raises."""


class WdsError(Exception):
    """A problem with the data, located by URL, member, key, field and byte offset where known.

    The message passed in describes the problem; the location is prefixed to it. An instance
    can be rebuilt from its message alone, as pickling and worker processes require.
    """

    def __init__(
        self,
        problem: str,
        *,
        url: str | None = None,
        member: str | None = None,
        key: str | None = None,
        field: str | None = None,
        offset: int | None = None,
    ) -> None:
        self.url = url
        self.member = member
        self.key = key
        self.field = field
        self.offset = offset
        where = [url] if url is not None else []
        if member is not None:
            where.append(f"member {member!r}")
        if key is not None:
            where.append(f"key {key!r}")
        if field is not None:
            where.append(f"field {field!r}")
        if offset is not None:
            where.append(f"at byte {offset}")
        super().__init__(f"{', '.join(where)}: {problem}" if where else problem)

    def add_detail(self, detail: str) -> None:
        """Append ``detail`` to the message (what became of the data around the problem)."""
        self.args = (f"{self.args[0]}; {detail}", *self.args[1:])


class ShardError(WdsError):
    """A shard as a whole cannot be read."""


class ShardOpenError(ShardError):
    """A shard cannot be opened: missing file, unreadable path, unsupported URL scheme."""


class CommandError(ShardError):
    """The command of a ``pipe:`` URL exited with a failure status."""

    def __init__(
        self,
        problem: str,
        *,
        command: str | None = None,
        status: int | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(problem, url=url)
        self.command = command
        self.status = status


class TarFormatError(ShardError):
    """A shard's bytes are not a valid tar archive (bad checksum, unsupported member, ...)."""


class TruncatedShardError(TarFormatError):
    """A shard ends early: in a header or in a member (or, with ``strict_end=True``, with no
    end-of-archive marker after its last member)."""


class DataAfterEndError(TarFormatError):
    """Bytes other than zeros follow a shard's end-of-archive marker: archives joined with
    ``cat``, or a header zeroed by damage. ``ignore_zeros=True`` reads on past zero blocks."""


class ResumeError(ValueError):
    """A pipeline's state cannot be saved or loaded: the message names the stage and why."""


class StreamFormatError(ShardError):
    """A CBOR or msgpack stream shard holds a truncated item or bytes that are no item."""


class SampleError(WdsError):
    """A sample is malformed."""


class DuplicateFieldError(SampleError):
    """A field occurs twice in one sample; the later member is the duplicate."""


class DecodeError(SampleError):
    """A field cannot be decoded; the decoder's own error is the ``__cause__``."""


class MissingFieldError(SampleError):
    """A sample lacks a field that a stage asked for."""


class CollationError(SampleError):
    """The values of a field cannot be put into one batch (unequal shapes or types)."""


class EncodeError(SampleError):
    """A sample cannot be written: no key, a key that would read back differently, or a value
    with no encoder for its field's extension; the encoder's own error is the ``__cause__``."""


def sample_location(sample: object) -> dict[str, Any]:
    """The ``url`` and ``key`` keywords locating an error about ``sample`` (none for a sample
    that is not a dict)."""
    if isinstance(sample, dict):
        return {"url": sample.get("__url__"), "key": sample.get("__key__")}
    return {}


class DataWarning(UserWarning):
    """Category of the warnings issued by ``warn_and_continue`` and ``warn_and_stop``."""


class NoEndMarkerWarning(DataWarning):
    """A tar shard ends right after a member, without the end-of-archive marker (a writer that
    was never closed, or a cut that fell at a member's end): its members were all read. Once
    per shard, naming it; ``strict_end=True`` makes it a :class:`TruncatedShardError`."""


def reraise_exception(exn: Exception) -> bool:
    """Raise the error: the default, so that no bad data passes unnoticed."""
    raise exn


def ignore_and_continue(exn: Exception) -> bool:
    """Skip the bad item silently and go on."""
    return True


def warn_and_continue(exn: Exception) -> bool:
    """Issue a :class:`DataWarning` naming the error, skip the bad item and go on."""
    warnings.warn(_describe(exn), DataWarning, stacklevel=3)
    return True


def ignore_and_stop(exn: Exception) -> bool:
    """End the stage's stream silently."""
    return False


def warn_and_stop(exn: Exception) -> bool:
    """Issue a :class:`DataWarning` naming the error and end the stage's stream."""
    warnings.warn(_describe(exn), DataWarning, stacklevel=3)
    return False


def handle(handler: Handler, exn: Exception) -> bool:
    """Apply ``handler`` to ``exn``: True means skip and continue, False means stop.

    A handler may also raise, or return an exception instance to have it raised.

    An error raised from here holds no reference to itself through the frames of its
    traceback (the handler's frame, which has it as an argument, is left out). Such a cycle
    would keep every stage's frame, and the shard file a reader has open, alive until the
    garbage collector runs, long after the caller dropped the error.
    """
    before, verdict = exn.__traceback__, None
    try:
        verdict = handler(exn)
        if isinstance(verdict, BaseException):
            raise verdict
        return bool(verdict)
    except BaseException as raised:
        if raised is exn:
            raised.__traceback__ = before
        raise
    finally:
        del exn, before, verdict  # the error leaves without this frame holding it


def _describe(exn: Exception) -> str:
    return f"{type(exn).__name__}: {exn}"

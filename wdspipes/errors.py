"""Errors that say where the data is bad, and the handler policies every stage routes them through.

Every error class of wdspipes is here, under :class:`WdsError`; the warnings' categories too.

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

Each error is also an instance of the built-in exception that webdataset 1.0.2 raised in the
same case, so that code written for webdataset keeps catching it: a missing field is a
``KeyError`` and a ``ValueError``, a shard that cannot be opened an ``OSError`` (a missing file
a ``FileNotFoundError``), a function of ``map_dict`` that raised ``ValueError`` a ``SampleError``
that is a ``ValueError`` too (see :meth:`WdsError.like`).

>>> isinstance(MissingFieldError("no field 'cls'"), KeyError)
True
>>> error = SampleError.like(ValueError("bad literal"))("int failed", key="0001")
>>> isinstance(error, SampleError), isinstance(error, ValueError), str(error)
(True, True, "key '0001': int failed")
"""

from __future__ import annotations

import builtins
import copyreg
import importlib
import warnings
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, TypeVar

from wdspipes.redaction import printable, redact

__all__ = [
    "CollationError",
    "CommandError",
    "DataAfterEndError",
    "DataLimitError",
    "DataWarning",
    "DecodeError",
    "DuplicateFieldError",
    "EncodeError",
    "Handler",
    "HttpStatusError",
    "ImageFormatError",
    "ImageTooLargeError",
    "IndexMismatchError",
    "MemberTooLargeError",
    "MissingFieldError",
    "NoEndMarkerWarning",
    "ResumeError",
    "SampleError",
    "ShardError",
    "ShardIndexError",
    "ShardItemError",
    "ShardOpenError",
    "ShardSplitError",
    "ShardWriteError",
    "StreamFormatError",
    "TarFormatError",
    "TorchNameWarning",
    "TorchdataVersionError",
    "TruncatedShardError",
    "UntrustedDataError",
    "WdsError",
    "WorkerError",
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

E = TypeVar("E", bound="WdsError")


class WdsError(Exception):
    """A problem with the data, located by URL, member, key, field and byte offset where known;
    the base of every error wdspipes raises of its own (also of those about how data is read:
    a state that cannot be loaded, shards that cannot be split among ranks).

    The message passed in describes the problem; the location is prefixed to it. An instance
    can be rebuilt from its message alone, as pickling and worker processes require. Secrets
    of URLs (passwords, query values) are left out of the message and of ``url``, wherever
    they occur (see :func:`~wdspipes.redaction.redact`).
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
        self.url = url = None if url is None else redact(url)
        self.member = member
        self.key = key
        self.field = field
        self.offset = offset
        where = [printable(url)] if url is not None else []  # a URL from the data: no controls
        if member is not None:
            where.append(f"member {member!r}")
        if key is not None:
            where.append(f"key {key!r}")
        if field is not None:
            where.append(f"field {field!r}")
        if offset is not None:
            where.append(f"at byte {offset}")
        # Exception's own __init__: a built-in class the error is also (see like()) may want
        # other arguments (UnicodeDecodeError takes five).
        message = f"{', '.join(where)}: {problem}" if where else problem
        Exception.__init__(self, redact(message))

    def __str__(self) -> str:
        # The message as given, whatever built-in exception the error is also (a KeyError
        # would quote it, an OSError with an errno would format its own).
        return str(self.args[0]) if self.args else ""

    def add_detail(self, detail: str) -> None:
        """Append ``detail`` to the message (what became of the data around the problem)."""
        self.args = (f"{self.args[0]}; {detail}", *self.args[1:])

    @classmethod
    def like(cls: type[E], cause: BaseException | type[BaseException]) -> type[E]:
        """This class, made also a subclass of the built-in exception class of ``cause`` (an
        exception or a class; its nearest built-in class other than ``Exception``), so that
        code catching what webdataset let through in that case catches this error too. The
        class itself where there is none, or it cannot be combined.

        The combined class has this class's name, and pickles (with its instances) across
        processes.

        >>> missing = ShardOpenError.like(FileNotFoundError(2, "No such file"))("no such file")
        >>> isinstance(missing, ShardOpenError), isinstance(missing, FileNotFoundError)
        (True, True)
        >>> type(missing).__name__
        'ShardOpenError'
        >>> ShardOpenError.like(KeyError) is ShardOpenError.like(KeyError)
        True
        >>> SampleError.like(RuntimeError) is SampleError.like(RuntimeError("again"))
        True
        """
        builtin = _builtin_class(cause if isinstance(cause, type) else type(cause))
        if builtin is None or issubclass(cls, builtin):
            return cls
        return _combined(cls, builtin)


class ShardError(WdsError):
    """A shard as a whole cannot be read."""


class ShardOpenError(ShardError, OSError):
    """A shard cannot be opened: missing file, unreadable path, unsupported URL scheme.

    An ``OSError``, as webdataset's failures to open were: for a missing file also a
    ``FileNotFoundError`` (and so on, by the cause), for an unknown scheme also a
    ``ValueError``."""


class ShardItemError(ShardError, AssertionError):
    """A shard list gave an item that names no shard: neither a URL string nor a dict with a
    string under ``"url"`` (webdataset's shard items), or a dict whose other keys cannot be
    carried into samples. An ``AssertionError``, as webdataset's ``url_opener`` asserted."""


class CommandError(ShardError, OSError):
    """The command of a ``pipe:`` URL exited with a failure status (an ``OSError``, as in
    webdataset)."""

    def __init__(
        self,
        problem: str,
        *,
        command: str | None = None,
        status: int | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(problem, url=url)
        self.command = None if command is None else redact(command)
        self.status = status


class ShardWriteError(ShardError, OSError):
    """A shard cannot be written: the target failed while it was written or completed (a
    full disk, a refused upload). An ``OSError``, as what webdataset's writers let through."""


class HttpStatusError(WdsError):
    """An HTTP(S) answer with a failure status (``status``, ``reason``): chained as the
    ``__cause__`` of the error that says which shard could not be read or written.

    >>> error = HttpStatusError(503)
    >>> str(error), error.status, error.reason
    ('HTTP 503 Service Unavailable', 503, 'Service Unavailable')
    """

    def __init__(self, status: int, reason: str | None = None, *, url: str | None = None) -> None:
        self.status = status
        self.reason = reason or _phrase(status)
        super().__init__(f"HTTP {status} {self.reason}".rstrip(), url=url)

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its message and fields as they are: ``__init__`` takes a status.
        return _rebuilt, (type(self), self.args), self.__dict__


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:  # a status of no standard
        return ""


def _rebuilt(cls: type[BaseException], args: tuple[Any, ...]) -> BaseException:
    """An instance of ``cls`` with ``args``, not made by its ``__init__``."""
    error = cls.__new__(cls, *args)
    error.args = args
    return error


class TarFormatError(ShardError):
    """A shard's bytes are not a valid tar archive (bad checksum, unsupported member, ...)."""


class TruncatedShardError(TarFormatError):
    """A shard ends early: in a header or in a member (or, with ``strict_end=True``, with no
    end-of-archive marker after its last member)."""


class MemberTooLargeError(TarFormatError):
    """A tar member (or an extension header) declares more bytes than the reader allows
    (``max_member_size``): refused before any of it is read, so that a forged header cannot
    make a reader allocate without bound. A damaged header, or a limit to raise."""


class DataAfterEndError(TarFormatError):
    """Bytes other than zeros follow a shard's end-of-archive marker: archives joined with
    ``cat``, or a header zeroed by damage. ``ignore_zeros=True`` reads on past zero blocks."""


class ShardIndexError(ShardError, ValueError):
    """The shards' index (wids' ``wids-shard-index-v1`` JSON, or a list of ``{"url",
    "nsamples"}`` dicts) cannot be used: not JSON, a missing or malformed entry, a URL that
    would run a command. A ``ValueError``, as the arguments of a dataset are."""


class IndexMismatchError(ShardIndexError):
    """A shard is not what its entry in the shards' index says: another size in bytes or
    another number of samples. Reading by index would give other samples than the index
    numbers; the message names both values."""


class ResumeError(WdsError, ValueError):
    """A pipeline's state cannot be saved or loaded: the message names the stage and why. A
    ``ValueError``, as a state that does not fit is a bad argument."""


class ShardSplitError(WdsError, ValueError):
    """The shards cannot be split so that every rank reads some: the message names the counts.
    A ``ValueError``, as a shard list too short for the ranks is a bad argument."""


class WorkerError(WdsError, RuntimeError):
    """A loader's worker process exited while the loader was waiting for it (killed by the
    out-of-memory killer, say): the message names the worker and how it ended."""


class TorchdataVersionError(WdsError, ImportError):
    """The torchdata installed (or its absence) lacks what was asked for: DataLoader2 and its
    reading services exist in torchdata 0.8 and 0.9 only, ``torchdata.nodes`` from 0.10 on.
    The message names the version found and what to use instead."""

    @classmethod
    def lacking(cls, needs: str, instead: str) -> TorchdataVersionError:
        """The error for a program that ``needs`` (what, in which torchdata versions) where
        the torchdata installed has it not, saying what to do ``instead``.

        >>> str(TorchdataVersionError.lacking("X needs torchdata 9", "use Y"))[:24]
        'X needs torchdata 9, and'
        """
        try:
            version = str(importlib.import_module("torchdata").__version__)
            found = f"this is torchdata {version}"
        except ImportError:
            found = "torchdata is not installed"
        return cls(f"{needs}, and {found}: {instead}")


class StreamFormatError(ShardError):
    """A CBOR or msgpack stream shard holds a truncated item or bytes that are no item."""


class SampleError(WdsError):
    """A sample is malformed."""


class DuplicateFieldError(SampleError, ValueError):
    """A field occurs twice in one sample; the later member is the duplicate (a
    ``ValueError``, as in webdataset)."""


class DecodeError(SampleError):
    """A field cannot be decoded; the decoder's own error is the ``__cause__``."""


class MissingFieldError(SampleError, KeyError, ValueError):
    """A sample lacks a field that a stage asked for: a ``KeyError`` (as webdataset's
    ``map_dict`` raised) and a ``ValueError`` (as its ``to_tuple`` and ``rename`` raised)."""


class CollationError(SampleError, AssertionError):
    """The values of a field cannot be put into one batch (unequal shapes or types); an
    ``AssertionError``, as webdataset's collation raised."""


class EncodeError(SampleError, ValueError):
    """A sample cannot be written: no key, a key that would read back differently, or a value
    with no encoder for its field's extension; the encoder's own error is the ``__cause__``.
    A ``ValueError``, as webdataset's writer raised in those cases."""


class UntrustedDataError(WdsError, ValueError):
    """A field holds data that would run code when decoded (a pickle, ``torch.load``), and the
    decoder was not trusted. Raised by the field's decoder; a ``decode`` stage chains it as
    the ``__cause__`` of its :class:`DecodeError`."""


class DataLimitError(WdsError, ValueError):
    """A field would decompress to more bytes than the decoder's ``max_size`` allows (a
    decompression bomb, or a limit to raise). Raised by the field's decoder; a ``decode``
    stage chains it as the ``__cause__`` of its :class:`DecodeError`."""


class ImageFormatError(WdsError, ValueError):
    """An image field holds data of a format its extension does not name (or no image).
    Raised by the image decoder; a ``decode`` stage chains it as the ``__cause__`` of its
    :class:`DecodeError`."""


class ImageTooLargeError(WdsError, ValueError):
    """An image has more pixels than the decoder's ``max_pixels``. Raised by the image
    decoder; a ``decode`` stage chains it as the ``__cause__`` of its :class:`DecodeError`."""


class _Combined(type):
    """The metaclass of the classes :meth:`WdsError.like` makes: pickled as the call that
    makes them again, so that they cross to other processes (a worker's error reaches the
    main process with its class)."""


def _reduce_combined(cls: _Combined) -> tuple[Any, ...]:
    error_class, builtin = cls.__bases__
    return _combined, (error_class, builtin)


copyreg.pickle(_Combined, _reduce_combined)

_COMBINED: dict[tuple[type, type], type] = {}
_NOT_COMBINED = tuple(
    getattr(builtins, name)
    for name in ("StopIteration", "StopAsyncIteration", "BaseExceptionGroup")  # 3.11 and later
    if hasattr(builtins, name)
)
"""Built-in classes an error is never made: they change how Python treats the exception (or,
for exception groups, how it is built)."""


def _builtin_class(cls: type[BaseException]) -> type[Exception] | None:
    """The nearest built-in ancestor of ``cls`` (itself included) other than Exception."""
    for ancestor in cls.__mro__:
        if ancestor is Exception or not issubclass(ancestor, Exception):
            return None
        if ancestor.__module__ == "builtins" and not issubclass(ancestor, _NOT_COMBINED):
            return ancestor
    return None


def _combined(cls: type[E], builtin: type[Exception]) -> type[E]:
    made = _COMBINED.get((cls, builtin))
    if made is None:
        namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
        try:
            made = _Combined(cls.__name__, (cls, builtin), namespace)
        except TypeError:  # two built-in layouts (an OSError and a UnicodeError, say)
            made = cls
        _COMBINED[(cls, builtin)] = made
    return made


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


class TorchNameWarning(UserWarning):
    """A webdataset-style call of a name torch or torchdata owns (``map``, ``slice``,
    ``repeat``) ran torch's or torchdata's stage, which does something else than webdataset's
    here; the message names the wdspipes method that does what webdataset's does."""


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
    return redact(f"{type(exn).__name__}: {exn}")

"""The ``decode`` stage: each field of a sample through a chain of handlers.

A handler is called as ``handler(key, data)`` with the field name behind a dot (``".jpg"``,
``".seg.png"``) and the field's bytes. It returns the decoded value, None to leave the field to
the next handler, or ``Continue(key, data)`` to pass a new key and data on. The chain is: the
gzip pre-handler, the user's handlers (image specs as strings become image handlers), then the
basic handlers. A field nobody decodes stays bytes; fields starting with ``__`` are UTF-8 text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from torch.utils.data import IterDataPipe

from wdspipes.curried import Stage, stage_factory
from wdspipes.datapipe import Sample, StageDataPipe, functional_stage
from wdspipes.decoders.basic import BasicDecoder, Continue, gunzip
from wdspipes.decoders.images import ImageDecoder
from wdspipes.errors import DecodeError, Handler, handle, reraise_exception, sample_location

__all__ = ["ExtensionHandler", "SampleDecoder", "decode", "decode_field", "handle_extension"]

FieldHandler = Callable[[str, bytes], Any]


class ExtensionHandler:
    """A handler that calls ``fn(data)`` for fields whose name ends with one of ``extensions``
    (space-separated, case-insensitive; ``"seg.png"`` needs both of the last two parts)."""

    def __init__(self, extensions: str, fn: Callable[[bytes], Any]) -> None:
        self.extensions = [tuple(ext.split(".")) for ext in extensions.lower().split()]
        self.fn = fn

    def __call__(self, key: str, data: bytes) -> Any:
        parts = tuple(key.lower().split("."))
        for ext in self.extensions:
            if len(ext) <= len(parts) and parts[len(parts) - len(ext) :] == ext:
                return self.fn(data)
        return None

    def __repr__(self) -> str:
        extensions = " ".join(".".join(ext) for ext in self.extensions)
        return f"handle_extension({extensions!r}, {self.fn!r})"


def handle_extension(extensions: str, fn: Callable[[bytes], Any]) -> ExtensionHandler:
    """A decode handler running ``fn`` on the fields with these extensions.

    >>> handler = handle_extension("seg.png", len)
    >>> handler(".seg.png", b"abc"), handler(".png", b"abc")
    (3, None)
    """
    return ExtensionHandler(extensions, fn)


def decode_field(handlers: Sequence[FieldHandler], key: str, data: bytes) -> Any:
    """Run ``data`` of field ``key`` (with its leading dot) through ``handlers``."""
    for handler in handlers:
        result = handler(key, data)
        if result is None:
            continue
        if isinstance(result, Continue):
            key, data = result
            continue
        return result
    return data


@functional_stage("decode")
class SampleDecoder(StageDataPipe[Sample]):
    """Decode the fields of each sample (functional name: ``decode``).

    Args:
        source_datapipe: yields sample dicts of bytes.
        *handlers: image specs (``"rgb8"``, ``"torchrgb"``, ...; see
            :mod:`wdspipes.decoders.images`) and ``(key, data)`` handlers, tried in order after
            the gzip pre-handler and before the basic decoders.
        only: field names (a list, or one string of space-separated names) to decode; the
            others pass through untouched.
        partial: let fields that are not bytes (decoded already) pass; without it they are an
            error.
        handler: what to do with a sample that fails to decode (see :mod:`wdspipes.errors`).
        trusted: allow pickle fields and a full ``torch.load``, which run code from the data.

    Yields:
        Sample dicts with decoded values, fields in the same order.

    Raises:
        ValueError: an unknown image spec.
        DecodeError: through ``handler``, naming URL, key and field, the cause chained.

    >>> import json
    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> sample = {"__key__": "0", "json": json.dumps([1, 2]).encode(), "cls": b"3", "x": b"?"}
    >>> list(IterableWrapper([sample]).decode())
    [{'__key__': '0', 'json': [1, 2], 'cls': 3, 'x': b'?'}]
    """

    def __init__(
        self,
        source_datapipe: IterDataPipe[Sample],
        *handlers: str | FieldHandler,
        only: str | Iterable[str] | None = None,
        partial: bool = False,
        handler: Handler = reraise_exception,
        trusted: bool = False,
    ) -> None:
        super().__init__()
        self.source_datapipe = source_datapipe
        self.handlers = tuple(_as_handler(h, i) for i, h in enumerate(handlers))
        self.only = (
            None if only is None else frozenset(only.split() if isinstance(only, str) else only)
        )
        self.partial = partial
        self.handler = handler
        self.trusted = trusted

    def __iter__(self) -> Iterator[Sample]:
        chain: tuple[FieldHandler, ...] = (gunzip, *self.handlers, BasicDecoder(self.trusted))
        for sample in self.source_datapipe:
            try:
                yield {
                    field: self._decode(chain, sample, field, value)
                    for field, value in sample.items()
                }
            except DecodeError as exn:
                if not handle(self.handler, exn):
                    return

    def _decode(self, chain: Sequence[FieldHandler], sample: Sample, field: str, value: Any) -> Any:
        try:
            if field.startswith("__"):
                return value.decode("utf-8") if isinstance(value, bytes) else value
            if self.only is not None and field not in self.only:
                return value
            if not isinstance(value, bytes):
                if self.partial:
                    return value
                raise TypeError(
                    f"the value is a {type(value).__name__}, not bytes: decoded already? "
                    "(decode(..., partial=True) passes such fields through)"
                )
            return decode_field(chain, "." + field, value)
        except Exception as exn:
            raise DecodeError(
                f"cannot decode: {type(exn).__name__}: {exn}",
                field=field,
                **sample_location(sample),
            ) from exn


def _as_handler(handler: str | FieldHandler, position: int) -> FieldHandler:
    if isinstance(handler, str):
        return ImageDecoder(handler)
    if not callable(handler):
        raise TypeError(
            f"decode handler {position} must be an image spec or a (key, data) function, "
            f"got {handler!r}"
        )
    return handler


@stage_factory
def decode(
    *handlers: str | FieldHandler,
    only: str | Iterable[str] | None = None,
    partial: bool = False,
    handler: Handler = reraise_exception,
    trusted: bool = False,
) -> Stage:
    """The decoder stage for ``DataPipeline(...)``: ``decode(*handlers, ...)``."""
    return Stage(
        SampleDecoder, *handlers, only=only, partial=partial, handler=handler, trusted=trusted
    )

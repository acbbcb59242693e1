"""The ``decode`` stage: each field of a sample through a chain of handlers.

A handler is called as ``handler(key, data)`` with the field name behind a dot (``".jpg"``,
``".seg.png"``) and the field's bytes. It returns the decoded value, None to leave the field to
the next handler, or ``Continue(key, data)`` to pass a new key and data on. The chain is: the
gzip pre-handler, the user's handlers (image specs as strings become image handlers), then the
basic handlers. A field nobody decodes stays bytes; fields starting with ``__`` are UTF-8 text.

A handler with a true ``takes_rng`` attribute (an image decoder with ``crop=``) is called as
``handler(key, data, rng)``: ``rng`` is a ``random.Random`` seeded from the stage's seed for the
epoch (see :mod:`wdspipes.core.context`) and the sample's ``__url__`` and ``__key__``, so its
draws do not depend on the order samples come in (a resumed epoch draws the same), and each
field of a sample gets a generator in the same state (an image and its mask of one size crop
alike).
"""

from __future__ import annotations

import functools
import os
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from wdspipes.core.context import EpochContext
from wdspipes.core.protocol import Resumes, register, stage_name
from wdspipes.core.stage import Sample, Stage
from wdspipes.errors import DecodeError, Handler, reraise_exception, sample_location
from wdspipes.samples.decoders.basic import (
    MAX_DECODED_SIZE,
    BasicDecoder,
    Continue,
    Gunzip,
    check_size,
)
from wdspipes.samples.decoders.images import MAX_PIXELS, ImageDecoder
from wdspipes.samples.threads import check_threads, opened

__all__ = [
    "Decoder",
    "ExtensionHandler",
    "SampleDecoder",
    "decode_field",
    "handle_extension",
]

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


def decode_field(
    handlers: Sequence[FieldHandler], key: str, data: bytes, seed: str | None = None
) -> Any:
    """Run ``data`` of field ``key`` (with its leading dot) through ``handlers``.

    A handler whose ``takes_rng`` attribute is true gets a third argument, a
    ``random.Random(seed)`` of its own (fresh entropy if ``seed`` is None).

    >>> class Noisy:
    ...     takes_rng = True
    ...     def __call__(self, key, data, rng):
    ...         return rng.randint(0, 9)
    >>> first = decode_field([Noisy()], ".x", b"", "a seed")
    >>> first == decode_field([Noisy()], ".x", b"", "a seed")
    True
    """
    return _run_chain(_with_rng(handlers, seed), key, data)


def _run_chain(handlers: Sequence[FieldHandler], key: str, data: bytes) -> Any:
    """The first answer of ``handlers`` (``(key, data)`` functions all) for the field."""
    for handler in handlers:
        result = handler(key, data)
        if result is None:
            continue
        if isinstance(result, Continue):
            key, data = result
            continue
        return result
    return data


def _takes_rng(handler: FieldHandler) -> bool:
    return bool(getattr(handler, "takes_rng", False))


def _with_rng(handlers: Sequence[FieldHandler], seed: str | None) -> tuple[FieldHandler, ...]:
    """``handlers``, those that take a generator bound to a new ``random.Random(seed)`` for
    every call."""
    return tuple(_Drawing(h, seed) if _takes_rng(h) else h for h in handlers)


class _Drawing:
    """A handler that takes a generator, called with a new ``random.Random(seed)``."""

    __slots__ = ("handler", "seed")

    def __init__(self, handler: FieldHandler, seed: str | None) -> None:
        self.handler = handler
        self.seed = seed

    def __call__(self, key: str, data: bytes) -> Any:
        return self.handler(key, data, random.Random(self.seed))  # type: ignore[call-arg]


class Decoder:
    """Decode the fields of one sample: what the ``decode`` stage does to each sample, as a
    function of the sample, for map-style datasets (``ds.map(Decoder("rgb8"))``, or
    ``ShardListDataset(index, decode=...)``). One vocabulary: the stage decodes through one.

    Args:
        *handlers: as ``decode``'s: image specs and ``(key, data)`` handlers (one list of
            them, as webdataset's ``Decoder([...])`` takes, is the same).
        only: field names to decode; the others pass through untouched.
        partial: let fields that are not bytes (decoded already) pass.
        trusted: allow pickle fields and a full ``torch.load``.
        seed: fixes the generators of random handlers (an ``ImageDecoder`` with ``crop=``):
            each sample's draws then depend on the seed, the epoch (:meth:`set_epoch`), its
            ``__url__`` and its ``__key__``; without a seed they are fresh each call.
        pre: the handlers tried before ``handlers`` (None: the gzip handler), as webdataset's
            ``Decoder(handlers, pre=, post=)``.
        post: the handlers tried after them (None: the basic decoders, which refuse pickle
            and a full ``torch.load`` unless ``trusted``).
        max_size: the most bytes a ``.gz`` field decompresses to, and the members of an
            ``.npz`` field hold together (as ``decode``'s).
        max_pixels: the most pixels of an image decoded by an image spec given as a string;
            None for no limit (as ``decode``'s).

    Raises:
        ValueError: an unknown image spec.
        DecodeError: (when called) a field cannot be decoded; it names URL, key and field.

    >>> decoder = Decoder()
    >>> decoder({"__key__": "0", "cls": b"3", "txt": b"hi", "x": b"?"})
    {'__key__': '0', 'cls': 3, 'txt': 'hi', 'x': b'?'}
    """

    def __init__(
        self,
        *handlers: str | FieldHandler | Sequence[str | FieldHandler],
        only: str | Iterable[str] | None = None,
        partial: bool = False,
        trusted: bool = False,
        seed: int | None = None,
        pre: Sequence[FieldHandler] | None = None,
        post: Sequence[FieldHandler] | None = None,
        max_size: int = MAX_DECODED_SIZE,
        max_pixels: int | None = MAX_PIXELS,
    ) -> None:
        if len(handlers) == 1 and isinstance(handlers[0], list | tuple):
            handlers = tuple(handlers[0])
        if seed is not None and type(seed) is not int:
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        self.max_size = check_size(max_size)
        self.handlers = tuple(
            _as_handler(h, i, max_pixels)  # type: ignore[arg-type]
            for i, h in enumerate(handlers)
        )
        self.only = (
            None if only is None else frozenset(only.split() if isinstance(only, str) else only)
        )
        self.partial = partial
        self.trusted = trusted
        self.seed = seed
        self.epoch = 0
        self.chain: tuple[FieldHandler, ...] = (
            *((Gunzip(self.max_size),) if pre is None else pre),
            *self.handlers,
            *((BasicDecoder(trusted, self.max_size),) if post is None else post),
        )
        self.draws = any(map(_takes_rng, self.chain))

    def __repr__(self) -> str:
        return f"Decoder({', '.join(map(repr, self.handlers))})"

    def set_epoch(self, epoch: int) -> None:
        """Make the draws of random handlers those of epoch ``epoch`` (with a ``seed``)."""
        self.epoch = epoch

    def __call__(self, sample: Sample) -> Sample:
        material: tuple[object, ...] | None = None
        if self.draws:
            material = (
                ("seed", self.seed, self.epoch)
                if self.seed is not None
                else ("entropy", os.urandom(16).hex())
            )
        return self.decode(sample, material)

    def decode(self, sample: Sample, material: tuple[object, ...] | None) -> Sample:
        """The sample decoded; random handlers draw from generators seeded with
        ``material`` and the sample's URL and key (see :func:`sample_seed`)."""
        chain = (
            self.chain if material is None else _with_rng(self.chain, sample_seed(material, sample))
        )
        # Meta entries that are text already (__key__, __url__, __local_path__) pass
        # without a call: half the entries of a small sample.
        return {
            field: value
            if field.startswith("__") and not isinstance(value, bytes)
            else self._decode(chain, sample, field, value)
            for field, value in sample.items()
        }

    def _decode(
        self,
        chain: Sequence[FieldHandler],
        sample: Sample,
        field: str,
        value: Any,
    ) -> Any:
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
            return _run_chain(chain, "." + field, value)
        except Exception as exn:
            raise DecodeError(
                f"cannot decode: {type(exn).__name__}: {exn}",
                field=field,
                **sample_location(sample),
            ) from exn


@register("decode")
class SampleDecoder(Stage[Sample]):
    """Decode the fields of each sample (functional name: ``decode``).

    Each sample goes through a :class:`Decoder` made of the arguments.

    Args:
        source_datapipe: yields sample dicts of bytes.
        *handlers: image specs (``"rgb8"``, ``"torchrgb"``, ...; see
            :mod:`wdspipes.samples.decoders.images`) and ``(key, data)`` handlers
            (``(key, data, rng)`` for those with a true ``takes_rng``, such as an
            ``ImageDecoder`` with ``crop=``), tried in order after the gzip pre-handler and
            before the basic decoders.
        only: field names (a list, or one string of space-separated names) to decode; the
            others pass through untouched.
        partial: let fields that are not bytes (decoded already) pass; without it they are an
            error.
        handler: what to do with a sample that fails to decode (see :mod:`wdspipes.errors`).
        trusted: allow pickle fields and a full ``torch.load``, which run code from the data.
        seed: fixes the generators handed to random handlers (such as an image decoder with
            ``crop=``), with the epoch; otherwise the loader's ``set_seed`` or fresh entropy
            decides (see :mod:`wdspipes.core.context`).
        max_size: the most bytes a ``.gz`` field decompresses to, and the members of an
            ``.npz`` field hold together (default 256 MiB,
            :data:`~wdspipes.samples.decoders.basic.MAX_DECODED_SIZE`).
        max_pixels: the most pixels of an image decoded by an image spec given as a string
            (default :data:`~wdspipes.samples.decoders.images.MAX_PIXELS`; an
            ``ImageDecoder`` given keeps its own); None for no limit.
        threads: decode this many samples at once in threads of the process the stage runs in
            (see :mod:`wdspipes.samples.threads`), yielding them in the order read; 0 for none.
            libjpeg-turbo, Pillow and zlib release the GIL: threads decode on every core.

    Each image field opens only in the formats its extension names (see
    :mod:`wdspipes.samples.decoders.images`); a field of another format, an image over
    ``max_pixels`` and a field over ``max_size`` are a
    :class:`~wdspipes.errors.DecodeError`, through ``handler``, that says so.

    Yields:
        Sample dicts with decoded values, fields in the same order.

    Raises:
        ValueError: an unknown image spec.
        DecodeError: through ``handler``, naming URL, key and field, the cause chained.

    >>> import json
    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> sample = {"__key__": "0", "json": json.dumps([1, 2]).encode(), "cls": b"3",
    ...           "x": b"?"}
    >>> list(IterableWrapper([sample]).decode())
    [{'__key__': '0', 'json': [1, 2], 'cls': 3, 'x': b'?'}]

    With a random crop, each sample's crop depends on the seed, the epoch and the sample:

    >>> import io, PIL.Image
    >>> from wdspipes import ImageDecoder, RandomResizedCrop
    >>> jpeg = io.BytesIO(); PIL.Image.new("RGB", (64, 48)).save(jpeg, format="JPEG")
    >>> images = [{"__key__": str(i), "jpg": jpeg.getvalue()} for i in range(3)]
    >>> crops = IterableWrapper(images).decode(
    ...     ImageDecoder("torchrgb8", crop=RandomResizedCrop(16)), seed=0)
    >>> [sample["jpg"].shape for sample in crops]
    [torch.Size([3, 16, 16]), torch.Size([3, 16, 16]), torch.Size([3, 16, 16])]
    """

    resumes = Resumes.ITEM_BY_ITEM  # a sample's draws depend on the epoch and the sample alone
    shares = True  # the samples in flight in its threads, in this reader's shards

    def __init__(
        self,
        source_datapipe: Iterable[Sample],
        *handlers: str | FieldHandler,
        only: str | Iterable[str] | None = None,
        partial: bool = False,
        handler: Handler = reraise_exception,
        trusted: bool = False,
        seed: int | None = None,
        max_size: int = MAX_DECODED_SIZE,
        max_pixels: int | None = MAX_PIXELS,
        threads: int = 0,
    ) -> None:
        super().__init__()
        self.source_datapipe = source_datapipe
        self.max_size = check_size(max_size)
        self.handlers = tuple(_as_handler(h, i, max_pixels) for i, h in enumerate(handlers))
        self.only = only if only is None or isinstance(only, str) else tuple(only)  # each epoch
        self.partial = partial
        self.handler = handler
        self.trusted = trusted
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        self.seed = seed
        self.threads = check_threads(threads)

    def open(
        self, source: Iterable[Sample], context: EpochContext, part: Any = None
    ) -> Iterable[Sample]:
        decoder = Decoder(
            *self.handlers,
            only=self.only,
            partial=self.partial,
            trusted=self.trusted,
            max_size=self.max_size,
        )
        # a sample's draws depend on the epoch's seed material and on the sample alone, so
        # going on mid-epoch needs nothing of its own (but the samples in flight in threads)
        material = context.material(self.seed) if decoder.draws else None
        work = functools.partial(decoder.decode, material=material)
        name, threads, handler = stage_name(self), self.threads, self.handler
        return opened(name, source, work, threads, DecodeError, handler, context, part)


def sample_seed(material: tuple[object, ...], sample: Sample) -> str:
    """The seed of a sample's generators: the epoch's seed material, ``__url__`` and ``__key__``
    (as text), whatever the order samples come in."""
    url, key = (_text(sample.get(name)) for name in ("__url__", "__key__"))
    return repr((material, url, key))


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _as_handler(handler: str | FieldHandler, position: int, max_pixels: int | None) -> FieldHandler:
    if isinstance(handler, str):
        return ImageDecoder(handler, max_pixels=max_pixels)
    if not callable(handler):
        raise TypeError(
            f"decode handler {position} must be an image spec or a (key, data) function, "
            f"got {handler!r}"
        )
    return handler

"""webdataset's ``webdataset.autodecode`` (``wdspipes.autodecode``): decode handlers and
``Decoder``, a callable that decodes one sample, all wdspipes' own (see
:mod:`wdspipes.samples.decoders`).

The handlers are called as webdataset's, ``handler(key, data)`` with the field behind a dot
(``".jpg"``), and return the value, None to pass, or ``Continue(key, data)``. Pickle fields
and a full ``torch.load`` need ``trusted=True`` (see docs/coming-from-webdataset.md).

>>> Decoder([])({"__key__": "a", "cls": b"3", "txt": b"hi"})
{'__key__': 'a', 'cls': 3, 'txt': 'hi'}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from wdspipes.errors import DecodeError
from wdspipes.samples.decoders import (
    BasicDecoder,
    Continue,
    ImageDecoder,
    gunzip,
    handle_extension,
)
from wdspipes.samples.decoders import Decoder as _Decoder
from wdspipes.webdataset.missing import no_counterpart

__all__ = [
    "Continue",
    "Decoder",
    "DecodingError",
    "ImageHandler",
    "basichandlers",
    "default_post_handlers",
    "default_pre_handlers",
    "gzfilter",
    "handle_extension",
    "imagehandler",
]

FieldHandler = Callable[[str, bytes], Any]

DecodingError = DecodeError
"""webdataset's name of the error a field that cannot be decoded raises."""

ImageHandler = ImageDecoder
"""webdataset's name of the image handler class: ``ImageHandler(spec, extensions)``."""

gzfilter = gunzip
"""The gzip pre-handler: ``x.gz`` fields decompressed, then decoded as ``x``."""

basichandlers = BasicDecoder()
"""The basic decoders as one handler (pickle and full ``torch.load`` refused: see
:class:`~wdspipes.samples.decoders.BasicDecoder`)."""


default_pre_handlers: list[FieldHandler] = [gzfilter]
"""The handlers a ``Decoder`` runs first, unless given ``pre=``."""

default_post_handlers: list[FieldHandler] = [basichandlers]
"""The handlers a ``Decoder`` runs last, unless given ``post=``."""


def imagehandler(imagespec: str, extensions: Iterable[str] | None = None) -> ImageDecoder:
    """An image handler for ``imagespec`` (``"rgb8"``, ``"torchrgb"``, ...), for fields of
    ``extensions`` (by default every image extension Pillow opens)."""
    chosen = None if extensions is None else frozenset(ext.lower() for ext in extensions)
    return ImageDecoder(imagespec, chosen)


Decoder = _Decoder
"""webdataset's ``Decoder(handlers, pre=None, post=None, only=None, partial=False)``: called
with a sample, returns it decoded, field by field, through ``pre`` (the gzip handler by
default), ``handlers`` and ``post`` (the basic decoders by default), as the ``decode`` stage
does; it is :class:`wds.Decoder <wdspipes.samples.decoders.Decoder>`."""


MISSING = {
    "decoders": 'decode(handle_extension("ext", fn)) adds a decoder, in one pipeline',
    "default_decoder": "Decoder([])",
    "torch_loads": ".pth fields load with torch.load(weights_only=True), in full with "
    "decode(trusted=True)",
    "torch_audio": 'handle_extension("flac mp3 wav", fn), fn calling torchaudio',
    "torch_video": 'handle_extension("mp4", fn), fn calling torchvision',
    "IMAGE_EXTENSIONS": "wdspipes.samples.decoders.image_extensions(): every one Pillow opens",
    "imagespecs": "wdspipes.samples.decoders.IMAGE_SPECS",
    "call_extension_handler": 'handle_extension("ext", fn)',
    "tenbin_loads": "the basic decoders read .ten fields",
    "msgpack_loads": "the basic decoders read .mp, .msg and .msgpack fields",
    "npy_loads": "the basic decoders read .npy fields",
    "npz_loads": "the basic decoders read .npz fields",
    "cbor_loads": "the basic decoders read .cbor fields",
    "unpickle_loads": "decode(trusted=True) reads pickle fields",
    "pytorch_weights_only": ".pth fields load with weights_only=True unless decode(trusted=True)",
}
"""webdataset's names that wdspipes does not provide here, and what to use instead."""


def __getattr__(name: str) -> Any:
    raise no_counterpart("wdspipes.autodecode", name, MISSING)

"""The decoders every ``decode`` stage ends with, chosen by a field's last extension, and the
gzip pre-handler that comes first.

| extensions | decoded to |
|---|---|
| ``txt text transcript`` | ``str`` (UTF-8) |
| ``cls cls2 index inx id`` | ``int`` |
| ``json jsn`` | JSON value |
| ``npy`` | numpy array (no pickled objects) |
| ``npz`` | dict of numpy arrays (no pickled objects) |
| ``mp msg msgpack`` | msgpack value |
| ``cbor`` | CBOR value (cbor2) |
| ``ten tb`` | list of numpy arrays (tenbin) |
| ``pyd pkl pickle`` | unpickled object, with ``trusted=True`` only |
| ``pth`` | ``torch.load``: full with ``trusted=True``, else ``weights_only=True`` |

Pickle and a full ``torch.load`` run code chosen by whoever wrote the shards. They run only with
``trusted=True``; otherwise a pickle field is an error that says so, and ``.pth`` loads through
torch's restricted ``weights_only`` unpickler (tensors, numbers, containers).

What a field decompresses to is bounded: a ``.gz`` field (:class:`Gunzip`) and the members of
an ``.npz`` field together may hold at most ``max_size`` bytes (:data:`MAX_DECODED_SIZE`,
256 MiB, by default); more is a :class:`DataLimitError`, found before more than that is held
(a gzip bomb of 1 GiB of zeros stops at the limit; an ``.npz`` field's members are checked by
the sizes its index declares, which its reader does not exceed). An ``.npy`` field, and each
``.npz`` member, declares no more bytes of array in its header than follow it: numpy allocates
what the header declares before it reads the data.

>>> BasicDecoder()(".json", b'{"a": 1}'), BasicDecoder()(".seg.cls", b"7")
({'a': 1}, 7)
>>> gunzip(".txt.gz", __import__("gzip").compress(b"hi"))
Continue(key='.txt', data=b'hi')
>>> Gunzip(max_size=1000)(".txt.gz", __import__("gzip").compress(bytes(2000)))
Traceback (most recent call last):
...
wdspipes.errors.DataLimitError: the .gz field decompresses to more than \
1,000 bytes, the limit (max_size)
"""

from __future__ import annotations

import functools
import gzip
import io
import json
import math
import pickle
import zlib
from collections.abc import Callable, Iterator
from typing import IO, Any, NamedTuple

import cbor2
import msgpack
import numpy as np

from wdspipes.core.arguments import int_at_least
from wdspipes.errors import DataLimitError, UntrustedDataError
from wdspipes.samples.decoders.tenbin import decode_buffer

__all__ = [
    "MAX_DECODED_SIZE",
    "BasicDecoder",
    "Continue",
    "DataLimitError",
    "Gunzip",
    "UntrustedDataError",
    "check_size",
    "gunzip",
    "last_extension",
]

MAX_DECODED_SIZE = 256 << 20
"""The most bytes a ``.gz`` field decompresses to, and the members of an ``.npz`` field hold
together, by default (256 MiB)."""

_PIECE = 1 << 24  # a .gz field larger than this is decompressed in pieces of this size


class Continue(NamedTuple):
    """A handler's answer meaning "decode on, with this key and data" (as gunzip does)."""

    key: str
    data: bytes


def check_size(size: int) -> int:
    """``size`` as a decoder's ``max_size``.

    Raises:
        ValueError: not an int of at least 1.
    """
    return int_at_least("max_size", size)


def last_extension(key: str) -> str:
    """The part of a handler key after its last dot: ``".seg.JPG"`` -> ``"JPG"``."""
    return key.rpartition(".")[2]


class Gunzip:
    """The pre-handler that decompresses a ``.gz`` field (one or more gzip members, as
    ``gzip.decompress`` takes them) and decodes on by its inner extension, to at most
    ``max_size`` bytes.

    Raises (called):
        DataLimitError: the field decompresses to more than ``max_size`` bytes.
        EOFError, gzip.BadGzipFile, zlib.error: the data is cut short or no gzip data.
    """

    def __init__(self, max_size: int = MAX_DECODED_SIZE) -> None:
        self.max_size = check_size(max_size)

    def __call__(self, key: str, data: bytes) -> Continue | None:
        if not key.endswith(".gz"):
            return None
        return Continue(key[:-3], _gunzipped(data, self.max_size))

    def __repr__(self) -> str:
        return f"Gunzip(max_size={self.max_size})"


def _gunzipped(data: bytes, max_size: int) -> bytes:
    """``gzip.decompress(data)`` making at most ``max_size`` bytes (then raising), into one
    buffer: the data of a small field as zlib gives it, that of a large one in pieces written
    into a buffer that grows in place (zlib joins the blocks of each piece it makes: pieces
    keep that copy small)."""
    pieces = _gzip_pieces(data, max_size)
    first = next(pieces, b"")
    second = next(pieces, None)
    if second is None:
        return first
    buffer = io.BytesIO()
    buffer.write(first)
    buffer.write(second)
    del first, second
    for piece in pieces:
        buffer.write(piece)
    return buffer.getvalue()  # the buffer itself, not a copy


def _gzip_pieces(data: bytes, max_size: int) -> Iterator[bytes]:
    """The decompressed data of the gzip members in ``data``, in pieces of at most
    :data:`_PIECE` bytes, checked (CRC, length) and bounded by ``max_size`` as they come."""
    made = 0
    while True:
        if not data.startswith(b"\x1f\x8b"):
            raise gzip.BadGzipFile(f"Not a gzipped file ({data[:2]!r})")
        decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip: checks CRC and length
        while not decompressor.eof:
            piece = decompressor.decompress(data, min(_PIECE, max_size - made + 1))
            made += len(piece)
            if made > max_size:
                raise DataLimitError(
                    f"the .gz field decompresses to more than {max_size:,} bytes, the limit "
                    "(max_size)"
                )
            data = decompressor.unconsumed_tail
            if piece:
                yield piece
            elif not data and not decompressor.eof:
                raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        data = decompressor.unused_data.lstrip(b"\0")  # zeros between members, as gzip skips
        if not data:
            return


gunzip = Gunzip()
"""The pre-handler with the default limit (:data:`MAX_DECODED_SIZE`)."""


def _text(data: bytes) -> str:
    return data.decode("utf-8")


def _npy(data: bytes) -> np.ndarray:
    stream = io.BytesIO(data)
    shape, fortran, dtype = _npy_header(stream, len(data), "the .npy field")
    if dtype.hasobject or dtype.itemsize == 0:  # refused (no pickles), or numpy's special case
        stream.seek(0)
        loaded: np.ndarray = np.load(stream, allow_pickle=False)
        return loaded
    flat = np.frombuffer(data, dtype, math.prod(shape), stream.tell())
    array = flat.reshape(shape[::-1]).transpose() if fortran else flat.reshape(shape)
    owned: np.ndarray = array.copy(order="K")  # writable and its own, as np.load gives it
    return owned


def _npz(data: bytes, max_size: int = MAX_DECODED_SIZE) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        members = archive.zip.infolist()
        held = sum(member.file_size for member in members)
        if held > max_size:
            raise DataLimitError(
                f"the .npz field's members hold {held:,} bytes, over the limit of "
                f"{max_size:,} (max_size)"
            )
        for member in members:
            with archive.zip.open(member) as stream:
                _npy_header(stream, member.file_size, f"the .npz member {member.filename!r}")
        return dict(archive)


def _npy_header(
    stream: IO[bytes], size: int, what: str
) -> tuple[tuple[int, ...], bool, np.dtype[Any]]:
    """The shape, Fortran order and dtype an .npy header at the start of ``stream`` declares,
    refused where they take more than the ``size`` bytes of ``stream`` hold after it: numpy
    allocates the whole array from the header before it reads any of it, so 100 bytes of data
    could ask for a terabyte.

    Raises:
        ValueError: the header declares more than the data holds (or is not an array's).
    """
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    else:  # 2.0, and 3.0, whose header differs only in its text's encoding
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    declared = math.prod(shape) * dtype.itemsize
    held = size - stream.tell()
    if declared > held:
        raise ValueError(
            f"{what} declares {declared:,} bytes of array in its header, but holds {held:,}"
        )
    return shape, fortran, dtype


def _msgpack(data: bytes) -> Any:
    return msgpack.unpackb(data)


_SAFE: dict[str, Callable[[bytes], Any]] = {
    **dict.fromkeys(["txt", "text", "transcript"], _text),
    **dict.fromkeys(["cls", "cls2", "index", "inx", "id"], int),
    **dict.fromkeys(["json", "jsn"], json.loads),
    "npy": _npy,
    "npz": _npz,
    **dict.fromkeys(["mp", "msg", "msgpack"], _msgpack),
    "cbor": cbor2.loads,
    **dict.fromkeys(["ten", "tb"], decode_buffer),
}
_PICKLE = frozenset(["pyd", "pkl", "pickle"])


class BasicDecoder:
    """The basic decoders as one handler; ``trusted`` allows pickle and full ``torch.load``;
    ``max_size`` bounds what an ``.npz`` field's members hold together."""

    def __init__(self, trusted: bool = False, max_size: int = MAX_DECODED_SIZE) -> None:
        self.trusted = trusted
        self.max_size = check_size(max_size)
        self._decoders: dict[str, Callable[[bytes], Any]] = {
            **_SAFE,
            "npz": functools.partial(_npz, max_size=max_size),
        }

    def __call__(self, key: str, data: bytes) -> Any:
        extension = last_extension(key)
        decoder = self._decoders.get(extension)
        if decoder is not None:
            return decoder(data)
        if extension in _PICKLE:
            if not self.trusted:
                raise UntrustedDataError(
                    "a pickle runs code from the data when loaded; decode it only from shards "
                    "you trust, with decode(..., trusted=True)"
                )
            return pickle.loads(data)
        if extension == "pth":
            return self._torch_load(data)
        return None

    def _torch_load(self, data: bytes) -> Any:
        import torch

        try:
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=not self.trusted)
        except pickle.UnpicklingError as exn:
            if self.trusted:
                raise
            raise UntrustedDataError(
                f"torch.load(weights_only=True) refused it ({str(exn).splitlines()[0]}); a full "
                "load runs code from the data: decode with trusted=True only for shards you trust"
            ) from exn

    def __repr__(self) -> str:
        limit = "" if self.max_size == MAX_DECODED_SIZE else f", max_size={self.max_size}"
        return f"BasicDecoder(trusted={self.trusted}{limit})"

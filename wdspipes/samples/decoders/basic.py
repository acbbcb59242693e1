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

>>> BasicDecoder()(".json", b'{"a": 1}'), BasicDecoder()(".seg.cls", b"7")
({'a': 1}, 7)
>>> gunzip(".txt.gz", __import__("gzip").compress(b"hi"))
Continue(key='.txt', data=b'hi')
"""

from __future__ import annotations

import gzip
import io
import json
import pickle
from collections.abc import Callable
from typing import Any, NamedTuple

import cbor2
import msgpack
import numpy as np

from wdspipes.samples.decoders.tenbin import decode_buffer

__all__ = ["BasicDecoder", "Continue", "UntrustedDataError", "gunzip", "last_extension"]


class Continue(NamedTuple):
    """A handler's answer meaning "decode on, with this key and data" (as gunzip does)."""

    key: str
    data: bytes


class UntrustedDataError(ValueError):
    """A field holds data that would run code when decoded, and the decoder was not trusted."""


def last_extension(key: str) -> str:
    """The part of a handler key after its last dot: ``".seg.JPG"`` -> ``"JPG"``."""
    return key.rpartition(".")[2]


def gunzip(key: str, data: bytes) -> Continue | None:
    """Decompress a ``.gz`` field and decode on by its inner extension."""
    if not key.endswith(".gz"):
        return None
    return Continue(key[:-3], gzip.decompress(data))


def _text(data: bytes) -> str:
    return data.decode("utf-8")


def _npy(data: bytes) -> np.ndarray:
    array: np.ndarray = np.load(io.BytesIO(data), allow_pickle=False)
    return array


def _npz(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        return dict(archive)


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
    """The basic decoders as one handler; ``trusted`` allows pickle and full ``torch.load``."""

    def __init__(self, trusted: bool = False) -> None:
        self.trusted = trusted

    def __call__(self, key: str, data: bytes) -> Any:
        extension = last_extension(key)
        decoder = _SAFE.get(extension)
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
        return f"BasicDecoder(trusted={self.trusted})"

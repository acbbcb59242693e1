"""The tenbin tensor format (``.ten``, ``.tb``): a list of numpy arrays in 64-byte aligned chunks.

A buffer is a sequence of chunks, each the 8 magic bytes ``~TenBin~``, the data length as a
native int64, and the data padded to a multiple of 64 bytes. Each array takes two chunks: a
header of native int64 values (dtype code, 8-byte info string, rank, then the dimensions), and
the array's bytes.

>>> import numpy as np
>>> arrays = decode_buffer(encode_buffer([np.arange(6, dtype="int16").reshape(2, 3)]))
>>> arrays[0].tolist(), arrays[0].dtype
([[0, 1, 2], [3, 4, 5]], dtype('int16'))
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["decode_buffer", "encode_buffer"]

MAGIC = b"~TenBin~"
_ALIGN = 64
_CODES = {
    "float16": "f2",
    "float32": "f4",
    "float64": "f8",
    "int8": "i1",
    "int16": "i2",
    "int32": "i4",
    "int64": "i8",
    "uint8": "u1",
    "uint16": "u2",
    "uint32": "u4",
    "uint64": "u8",
}
_DTYPES = {code: np.dtype("<" + code) for code in _CODES.values()}


def decode_buffer(buffer: bytes) -> list[np.ndarray]:
    """The arrays of a tenbin buffer, as read-only views of it.

    Raises:
        ValueError: bad magic bytes, a truncated chunk, an unknown dtype, or a size mismatch.
    """
    chunks = _chunks(buffer)
    if len(chunks) % 2:
        raise ValueError("tenbin: an array header without its data")
    return [_array(header, data) for header, data in zip(chunks[::2], chunks[1::2], strict=True)]


def encode_buffer(arrays: list[np.ndarray]) -> bytes:
    """A tenbin buffer holding ``arrays`` (the dtypes listed in the module)."""
    parts = []
    for array in arrays:
        if np.dtype(array.dtype).name not in _CODES:
            raise ValueError(f"tenbin: unsupported dtype {array.dtype}")
        # little-endian and C order, keeping the rank (ascontiguousarray would make 0-d 1-d)
        array = np.require(array, dtype=_DTYPES[_CODES[array.dtype.name]], requirements="C")
        header = [_str64(_CODES[array.dtype.name]), 0, array.ndim, *array.shape]
        parts += [np.array(header, dtype="<i8").tobytes(), array.tobytes()]
    return b"".join(_chunk(part) for part in parts)


def _chunks(buffer: bytes) -> list[memoryview]:
    view = memoryview(buffer)
    chunks = []
    offset = 0
    while offset < len(view):
        if view[offset : offset + 8] != MAGIC:
            raise ValueError(f"tenbin: no magic bytes at offset {offset}")
        if offset + 16 > len(view):
            raise ValueError(f"tenbin: chunk header cut short at offset {offset}")
        (size,) = struct.unpack_from("<q", view, offset + 8)
        start = offset + 16
        if size < 0 or start + size > len(view):
            raise ValueError(f"tenbin: chunk of {size} bytes at offset {offset} is cut short")
        chunks.append(view[start : start + size])
        offset = start + size + (-size % _ALIGN)
    return chunks


def _array(header: memoryview, data: memoryview) -> np.ndarray:
    fields = np.frombuffer(header, dtype="<i8")
    code = _unstr64(int(fields[0]))
    if code not in _DTYPES:
        raise ValueError(f"tenbin: unknown dtype code {code!r}")
    rank = int(fields[2])
    shape = tuple(int(n) for n in fields[3 : 3 + rank])
    dtype = _DTYPES[code]
    count = int(np.prod(shape, dtype=np.int64))
    if count * dtype.itemsize != len(data):
        raise ValueError(f"tenbin: {len(data)} bytes of data for shape {shape} of {dtype}")
    return np.frombuffer(data, dtype=dtype, count=count).reshape(shape)


def _chunk(data: bytes) -> bytes:
    return MAGIC + struct.pack("<q", len(data)) + data + bytes(-len(data) % _ALIGN)


def _str64(text: str) -> int:
    return int.from_bytes(text.encode("ascii").ljust(8, b"\0"), "little", signed=True)


def _unstr64(value: int) -> str:
    return value.to_bytes(8, "little", signed=True).rstrip(b"\0").decode("ascii", "replace")

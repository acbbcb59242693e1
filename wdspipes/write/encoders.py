"""Encoding sample values to member bytes, by field extension: the mirror of the decoders.

| extensions | values | written as |
|---|---|---|
| ``txt text transcript`` | ``str`` | UTF-8 |
| ``cls cls2 index inx id`` | ``int`` (not ``bool``), ``str`` | ASCII decimal, UTF-8 |
| ``json jsn`` | any JSON value (a ``str`` too) | compact JSON, UTF-8 |
| ``npy`` | numpy array | ``.npy``, no pickled objects |
| ``npz`` | dict of str -> numpy array | ``.npz`` (stored, not deflated), no pickled objects |
| ``mp msg msgpack`` | msgpack value | msgpack, ``bytes`` as bin |
| ``cbor`` | CBOR value | CBOR (cbor2) |
| ``ten tb`` | list or tuple of numpy arrays | tenbin |
| ``jpg jpeg png ppm pgm pbm tif tiff webp bmp`` | image: numpy, torch or PIL | by Pillow |
| ``pyd pkl pickle`` | anything, with ``trusted=True`` only | pickle |
| ``pth`` | anything, with ``trusted=True`` only | ``torch.save`` |
| any other | ``str`` | UTF-8 |

``bytes``, ``bytearray`` and ``memoryview`` values are written unchanged whatever the field,
even under ``.gz``. A field ending in ``.gz`` is encoded by its inner extension and then
gzipped (mtime 0): ``{"txt.gz": "hi"}`` reads back, decoded, as ``{"txt.gz": "hi"}``.

Images are numpy arrays (``uint8``, or floats in [0, 1] scaled to ``uint8`` with rounding;
height x width, or height x width x channels with 1, 3 or 4 channels), torch tensors (the same
values, channels first) and PIL images. JPEG is written at ``jpeg_quality``; WebP losslessly;
PNG, PPM, TIFF and BMP are lossless anyway.

Pickle and ``torch.save`` data runs code when read, so readers must decode it with
``trusted=True``; writing it takes ``trusted=True`` too.

>>> sample = {"__key__": "0001", "cls": 3, "json": {"a": [1, 2]}, "__url__": "x"}
>>> SampleEncoder()(sample)
[('cls', b'3'), ('json', b'{"a":[1,2]}')]
>>> encode_value("seg.txt", "été")
b'\\xc3\\xa9t\\xc3\\xa9'
>>> encode_value("cls", 2.5)
Traceback (most recent call last):
...
wdspipes.errors.EncodeError: field 'cls': a .cls field takes an int (not bool) or a str, \
not float
"""

from __future__ import annotations

import gzip
import io
import json
import numbers
import pickle
import zipfile
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import cbor2
import msgpack
import numpy as np

from wdspipes.core.names import is_meta, split_name
from wdspipes.errors import EncodeError

__all__ = ["SampleEncoder", "check_fields", "check_key", "encode_value", "escaping"]

BYTES_TYPES = (bytes, bytearray, memoryview)


class SampleEncoder:
    """Encode a sample dict to its members' fields and bytes, by extension (see the module).

    Args:
        trusted: allow pickle and ``torch.save`` fields, which run code when read.
        jpeg_quality: the quality of JPEG images, 1 to 100 (Pillow advises at most 95).
        unsafe_names: allow keys whose member names escape the directory a tar tool extracts
            them into (a ``..`` component, a leading ``/``; see :func:`escaping`).

    Returns, called on a sample: ``(field, data)`` pairs sorted by field, for the fields that
    do not start with ``__``.

    Raises:
        EncodeError: naming key and field: no ``__key__``, a key or field that would read
            back differently from the tar member name, a key that escapes (unless
            ``unsafe_names``), or a value with no encoder.

    >>> SampleEncoder()({"__key__": "a.b", "txt": "x"})
    Traceback (most recent call last):
    ...
    wdspipes.errors.EncodeError: key 'a.b', field 'txt': a key cannot have a dot in its last \
path component: member 'a.b.txt' would read back as key 'a', field 'b.txt'
    """

    def __init__(
        self, trusted: bool = False, jpeg_quality: int = 90, *, unsafe_names: bool = False
    ) -> None:
        if not 1 <= jpeg_quality <= 100:
            raise ValueError(f"jpeg_quality must be in 1..100, got {jpeg_quality}")
        self.trusted = trusted
        self.jpeg_quality = jpeg_quality
        self.unsafe_names = unsafe_names

    def __call__(self, sample: Mapping[str, Any]) -> list[tuple[str, bytes]]:
        key = check_key(sample)
        return [
            (field, self.encode_field(field, sample[field], key))
            for field in check_fields(key, sample, self.unsafe_names)
        ]

    def encode_field(self, field: str, value: Any, key: str | None = None) -> bytes:
        """The bytes of one field's value; ``key`` only locates errors."""
        if isinstance(value, bytes):
            return value
        if isinstance(value, BYTES_TYPES):
            return bytes(value)
        inner, _, extension = field.rpartition(".")
        if extension.lower() == "gz":
            return gzip.compress(self._encode(inner, value, key, field), mtime=0)
        return self._encode(field, value, key, field)

    def _encode(self, by: str, value: Any, key: str | None, field: str) -> bytes:
        """Encode ``value`` by the last extension of ``by`` (``field`` without a ``.gz``)."""
        extension = by.rpartition(".")[2].lower()
        rule = _RULES.get(extension)
        if rule is None:
            if isinstance(value, str):
                return value.encode("utf-8")
            raise EncodeError(
                f"no encoder for a {type(value).__name__} value with extension {extension!r}: "
                f"any field takes str and bytes, others need one of the extensions "
                f"{' '.join(_RULES)}",
                key=key,
                field=field,
            )
        try:
            data = rule.encode(value, extension, self)
        except _RefusedError as exn:
            raise EncodeError(str(exn), key=key, field=field) from None
        except Exception as exn:
            raise EncodeError(
                f"cannot encode a {type(value).__name__} value as .{extension}: "
                f"{type(exn).__name__}: {exn}",
                key=key,
                field=field,
            ) from exn
        if data is None:
            raise EncodeError(
                f"a .{extension} field takes {rule.takes}, not {type(value).__name__}",
                key=key,
                field=field,
            )
        return data

    def __repr__(self) -> str:
        unsafe = ", unsafe_names=True" if self.unsafe_names else ""
        return f"SampleEncoder(trusted={self.trusted}, jpeg_quality={self.jpeg_quality}{unsafe})"


def encode_value(field: str, value: Any, trusted: bool = False, jpeg_quality: int = 90) -> bytes:
    """The bytes of one field's value, encoded by the field's extension (see the module).

    Raises:
        EncodeError: naming the field, for a value with no encoder.
    """
    return SampleEncoder(trusted, jpeg_quality).encode_field(field, value)


# --- Names ------------------------------------------------------------------------------------


def check_key(sample: Mapping[str, Any]) -> str:
    """The sample's ``__key__``, checked to make member names that read back as this key.

    The key's path components are checked with each field, by :func:`check_fields`.

    Raises:
        EncodeError: no key, or a key that is not a non-empty str.
    """
    if "__key__" not in sample:
        raise EncodeError("sample without __key__")
    key = sample["__key__"]
    if not isinstance(key, str) or not key:
        raise EncodeError(f"__key__ must be a non-empty str, got {key!r}")
    return key


def check_fields(key: str, sample: Mapping[str, Any], unsafe_names: bool = False) -> list[str]:
    """The fields of ``sample`` to write, sorted: those not starting with ``__``, each
    checked to make a member name that reads back as ``key`` and this field, and that stays
    in the directory a tar tool extracts it into (unless ``unsafe_names``).

    Raises:
        EncodeError: naming key and field, and how the member name would read back, or how it
            escapes.
    """
    fields = [field for field in sample if not _is_private(field)]
    for field in fields:
        if not isinstance(field, str):
            raise EncodeError(f"field names must be str, got {field!r}", key=key)
    fields.sort()
    if not fields:
        raise EncodeError(
            "a sample with no fields (besides __key__ and other __ entries) makes no tar "
            "member, so it would not be read back",
            key=key,
        )
    seen: dict[str, str] = {}
    for field in fields:
        _check_name(key, field, unsafe_names)
        folded = field.lower()
        if folded in seen:
            raise EncodeError(
                f"fields {seen[folded]!r} and {field!r} would read back as one field "
                f"{folded!r} (readers lower-case fields)",
                key=key,
                field=field,
            )
        seen[folded] = field
    return fields


def _is_private(field: object) -> bool:
    return isinstance(field, str) and field.startswith("__")


def escaping(name: str) -> str | None:
    """How member name ``name`` would leave the directory a tar tool extracts it into (as
    Python's ``tarfile.extractall`` without a filter does): a leading ``/`` or a ``..``
    component; None if it stays inside.

    >>> escaping("a/../../evil.txt"), escaping("/etc/x.txt"), escaping("a/b..c.txt")
    ("a '..' component", "a leading '/'", None)
    """
    if name.startswith("/"):
        return "a leading '/'"
    if ".." in name.split("/"):
        return "a '..' component"
    return None


UNSAFE_NAMES = "unsafe_names=True (wdspipes cat, create and reshard: --unsafe-names)"
"""How to write names that escape, for the errors that refuse them."""


def escape_error(name: str, why: str, **location: Any) -> EncodeError:
    """The error refusing member ``name``, which escapes as ``why`` says."""
    return EncodeError(
        f"member {name!r} escapes the directory it is extracted into ({why}): refused; "
        f"writers take such names with {UNSAFE_NAMES}",
        **location,
    )


def _check_name(key: str, field: str, unsafe_names: bool = False) -> None:
    name = f"{key}.{field}"
    if not unsafe_names and (why := escaping(key)) is not None:
        raise escape_error(name, why, key=key, field=field)
    problem = None
    if not field:
        problem = "an empty field name"
    elif "/" in field:
        problem = "a field cannot contain '/'"
    elif "\0" in name:
        problem = "a member name cannot hold a NUL character (it ends tar names)"
    elif "." in key.rpartition("/")[2]:
        problem = "a key cannot have a dot in its last path component"
    elif "" in key.removeprefix("/").split("/"):  # a leading "/" escapes (see above)
        problem = (
            "a key cannot have an empty path component (a trailing or doubled '/'): tar tools "
            "extract such a name elsewhere or as a hidden file"
        )
    elif split_name(name) != (key, field.lower()) or is_meta(name):
        problem = "the name does not split back into this key and field"
    elif not name.isascii() and not _encodable(name):
        problem = "a member name must encode as UTF-8 (lone surrogates do not)"
    if problem is not None:
        raise EncodeError(f"{problem}: {_reads_back(name)}", key=key, field=field)


def _encodable(name: str) -> bool:
    """Whether the tar writer can encode ``name`` (as the reader decodes: surrogate escapes
    stand for the bytes of names that are not UTF-8)."""
    try:
        name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return False
    return True


def _reads_back(name: str) -> str:
    parts = split_name(name)
    if parts is None:
        return f"member {name!r} would be skipped by readers (no key and field)"
    if is_meta(name):
        return f"member {name!r} would be skipped by readers as a meta file"
    return f"member {name!r} would read back as key {parts[0]!r}, field {parts[1]!r}"


# --- Encoders by extension --------------------------------------------------------------------


class _RefusedError(Exception):
    """A value this encoder does not take, with the reason (raised without a cause)."""


class _Rule(NamedTuple):
    takes: str  # the values it encodes, for error messages
    encode: Callable[[Any, str, SampleEncoder], bytes | None]  # None: not a value it takes


def _text(value: Any, extension: str, options: SampleEncoder) -> bytes | None:
    return value.encode("utf-8") if isinstance(value, str) else None


def _integer(value: Any, extension: str, options: SampleEncoder) -> bytes | None:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return b"%d" % int(value)
    return None


def _json(value: Any, extension: str, options: SampleEncoder) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _npy(value: Any, extension: str, options: SampleEncoder) -> bytes | None:
    if not isinstance(value, np.ndarray):
        return None
    buffer = io.BytesIO()
    np.save(buffer, value, allow_pickle=False)
    return buffer.getvalue()


def _npz(value: Any, extension: str, options: SampleEncoder) -> bytes | None:
    if not isinstance(value, Mapping):
        return None
    for name, array in value.items():
        if not isinstance(name, str) or not isinstance(array, np.ndarray):
            raise _RefusedError(
                f"a .npz field takes a dict of str -> numpy array; entry {name!r} "
                f"holds a {type(array).__name__}"
            )
    # np.savez's layout, written here: its keyword arguments clash with names like "file".
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, array in value.items():
            with archive.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, array, allow_pickle=False)
    return buffer.getvalue()


def _msgpack(value: Any, extension: str, options: SampleEncoder) -> bytes:
    data: bytes = msgpack.packb(value, use_bin_type=True)
    return data


def _cbor(value: Any, extension: str, options: SampleEncoder) -> bytes:
    return cbor2.dumps(value)


def _tenbin(value: Any, extension: str, options: SampleEncoder) -> bytes | None:
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(array, np.ndarray) for array in value
    ):
        return None
    # here, not at the top: the decoders' package loads torch, which writing needs not
    from wdspipes.samples.decoders.tenbin import encode_buffer

    return encode_buffer(list(value))


def _pickle(value: Any, extension: str, options: SampleEncoder) -> bytes:
    _require_trust(extension, options, "pickle")
    return pickle.dumps(value)


def _torch(value: Any, extension: str, options: SampleEncoder) -> bytes:
    _require_trust(extension, options, "torch.save")
    import torch

    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _require_trust(extension: str, options: SampleEncoder, what: str) -> None:
    if not options.trusted:
        raise _RefusedError(
            f"{what} data runs code when it is loaded, so readers can decode a .{extension} "
            "field only with decode(..., trusted=True) from writers they trust; pass "
            "trusted=True to write it (or store the values in a format that runs no code: "
            "npy, json, msgpack, cbor)"
        )


IMAGE_FORMATS = {
    "jpg": "JPEG",
    "jpeg": "JPEG",
    "png": "PNG",
    "ppm": "PPM",
    "pgm": "PPM",
    "pbm": "PPM",
    "tif": "TIFF",
    "tiff": "TIFF",
    "webp": "WEBP",
    "bmp": "BMP",
}
"""Image extension -> Pillow format. Pillow's PPM writer picks the variant by the image's
mode (grey P5, colour P6), whatever the extension of the three."""


_NO_ALPHA = frozenset(["JPEG", "PPM", "BMP"])


def _image(value: Any, extension: str, options: SampleEncoder) -> bytes | None:
    image = _as_image(value)
    if image is None:
        return None
    image_format = IMAGE_FORMATS[extension]
    if image_format in _NO_ALPHA and "A" in image.getbands():
        raise _RefusedError(
            f"a .{extension} image has no alpha channel, and Pillow would drop it or fail: "
            f"drop it yourself, or use png, tif or webp (image mode {image.mode})"
        )
    settings: dict[str, Any] = {}
    if image_format == "JPEG":
        settings["quality"] = options.jpeg_quality
    elif image_format == "WEBP":
        settings["lossless"] = True
    buffer = io.BytesIO()
    image.save(buffer, format=image_format, **settings)
    return buffer.getvalue()


def _as_image(value: Any) -> Any:
    """A PIL image of ``value`` (a PIL image, numpy array or torch tensor); None for others."""
    from PIL import Image

    if isinstance(value, Image.Image):
        return value
    import torch

    if isinstance(value, torch.Tensor):
        array = value.detach().cpu().numpy()
        if array.ndim == 3:
            if array.shape[0] not in (1, 3, 4):
                raise _RefusedError(
                    f"an image tensor is (C, H, W) with C in 1, 3, 4: got {value.shape}"
                )
            array = array.transpose(1, 2, 0)
        value = array
    if not isinstance(value, np.ndarray):
        return None
    return Image.fromarray(_pixels(value))


def _pixels(array: np.ndarray) -> np.ndarray:
    """The array as ``uint8`` pixels, height x width (x 3 or 4 channels)."""
    if not (array.ndim == 2 or (array.ndim == 3 and array.shape[2] in (1, 3, 4))):
        raise _RefusedError(
            f"an image array is (H, W) or (H, W, C) with C in 1, 3, 4: got {array.shape}"
        )
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.dtype == np.uint8:
        return array
    if not np.issubdtype(array.dtype, np.floating):
        raise _RefusedError(f"image values must be uint8, or floats in [0, 1]: got {array.dtype}")
    if array.size and not (array.min() >= 0 and array.max() <= 1):  # False for NaN too
        raise _RefusedError(
            f"float image values must be in [0, 1]: got {array.min()} to {array.max()}"
        )
    scaled: np.ndarray = np.rint(array.astype(np.float64) * 255).astype(np.uint8)
    return scaled


_RULES: dict[str, _Rule] = {
    **dict.fromkeys(["txt", "text", "transcript"], _Rule("a str", _text)),
    **dict.fromkeys(
        ["cls", "cls2", "index", "inx", "id"], _Rule("an int (not bool) or a str", _integer)
    ),
    **dict.fromkeys(["json", "jsn"], _Rule("a JSON value", _json)),
    "npy": _Rule("a numpy array", _npy),
    "npz": _Rule("a dict of str -> numpy array", _npz),
    **dict.fromkeys(["mp", "msg", "msgpack"], _Rule("a msgpack value", _msgpack)),
    "cbor": _Rule("a CBOR value", _cbor),
    **dict.fromkeys(["ten", "tb"], _Rule("a list or tuple of numpy arrays", _tenbin)),
    **dict.fromkeys(
        IMAGE_FORMATS, _Rule("an image: a numpy array, a torch tensor or a PIL image", _image)
    ),
    **dict.fromkeys(["pyd", "pkl", "pickle"], _Rule("any value (trusted=True)", _pickle)),
    "pth": _Rule("any value (trusted=True)", _torch),
}

"""The ``decode`` stage decodes every field as webdataset 1.0.2 does, and its documented extras.

Differential part: shards hold real images written by Pillow (PNG in modes L, RGB, RGBA, P, P with
transparency, LA, I;16 and 1; JPEG in L, RGB and CMYK; WebP, BMP, GIF and TIFF; 7x5 pixels, so a
transposed axis shows), a field for every basic decoder, upper-case extensions (``JPG``, ``JPEG``,
``TXT``), compound fields (``seg.png``, ``txt.gz``, ``json.gz``, ``png.gz``) and a ``__`` meta
field. For the default decoders and every one of the 17 image specs, wdspipes and webdataset read
the same shard bytes, and every field must agree: same kind of value (numpy, torch, PIL or plain
Python), dtype, shape and values, bit for bit. Agreement alone could hide a shared mistake, so the
images of lossless formats are also checked against the pixels written, and the basic fields
against the values encoded.

Targeted part: ``.gz`` fields keep their name; ``handle_extension``; ``Continue`` handlers;
``only=``; ``partial=``; ``trusted=`` for pickle and ``.pth``; ``DecodeError`` location, message
and cause; the error handlers; unknown specs; and where wdspipes deliberately differs from
webdataset (error messages, msgpack and cbor fields, tenbin ``uint32``, extra image formats,
writable arrays).
"""

from __future__ import annotations

import gc
import gzip
import io
import json
import pickle
import warnings
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cbor2
import msgpack
import numpy as np
import pytest
import shardgen
import torch
from PIL import Image
from shardgen import Shards
from torch.utils.data.datapipes.iter import IterableWrapper

import wdspipes as wds
from wdspipes.pipes import SampleDecoder
from wdspipes.samples.decoders import IMAGE_SPECS, image_extensions, tenbin
from wdspipes.samples.decoders.basic import BasicDecoder

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import webdataset as wdsref
    from webdataset import autodecode as refautodecode
    from webdataset import tenbin as reftenbin

Sample = dict[str, Any]
Fields = dict[str, bytes]

# --- Image specs, as documented -------------------------------------------------------------------

# spec -> (library, element type, Pillow mode); the contract, written out independently.
SPECS: dict[str, tuple[str, Any, str]] = {
    "l8": ("numpy", np.uint8, "L"),
    "rgb8": ("numpy", np.uint8, "RGB"),
    "rgba8": ("numpy", np.uint8, "RGBA"),
    "l": ("numpy", np.float32, "L"),
    "rgb": ("numpy", np.float32, "RGB"),
    "rgba": ("numpy", np.float32, "RGBA"),
    "torchl8": ("torch", torch.uint8, "L"),
    "torchrgb8": ("torch", torch.uint8, "RGB"),
    "torchrgba8": ("torch", torch.uint8, "RGBA"),
    "torchl": ("torch", torch.float32, "L"),
    "torchrgb": ("torch", torch.float32, "RGB"),
    "torch": ("torch", torch.float32, "RGB"),
    "torchrgba": ("torch", torch.float32, "RGBA"),
    "pil": ("pil", None, "RGB"),
    "pilrgb": ("pil", None, "RGB"),
    "pill": ("pil", None, "L"),
    "pilrgba": ("pil", None, "RGBA"),
}
CHANNELS = {"L": 0, "RGB": 3, "RGBA": 4}
WIDTH, HEIGHT = 7, 5  # odd and unequal: a transposition or a lost axis changes the shape

# --- Test data ------------------------------------------------------------------------------------


def random_bytes(count: int, seed: int, high: int = 256) -> bytes:
    """``count`` reproducible random bytes below ``high``."""
    return np.random.default_rng(seed).integers(0, high, count, dtype=np.uint8).tobytes()


def make_source_images() -> dict[str, Image.Image]:
    """The images written to the shards, by name; pixel values differ per image."""
    size, pixels = (WIDTH, HEIGHT), WIDTH * HEIGHT
    palette = Image.frombytes("P", size, random_bytes(pixels, 5, high=16))
    palette.putpalette(random_bytes(16 * 3, 6))
    palette_alpha = palette.copy()
    palette_alpha.info["transparency"] = 3  # index 3 is see-through: a tRNS chunk in PNG
    i16 = np.random.default_rng(7).integers(0, 400, pixels, dtype=np.uint16)  # some clip in L
    grey = Image.frombytes("L", size, random_bytes(pixels, 1))
    rgb = Image.frombytes("RGB", size, random_bytes(pixels * 3, 2))
    return {
        "grey": grey,
        "rgb": rgb,
        "rgba": Image.frombytes("RGBA", size, random_bytes(pixels * 4, 3)),
        "la": Image.frombytes("LA", size, random_bytes(pixels * 2, 4)),
        "palette": palette,
        "palette_alpha": palette_alpha,
        "i16": Image.frombytes("I;16", size, i16.astype("<u2").tobytes()),
        "bilevel": grey.convert("1"),
        "cmyk": rgb.convert("CMYK"),
    }


SOURCES = make_source_images()


def encode_image(source: str, image_format: str, **params: Any) -> bytes:
    buffer = io.BytesIO()
    SOURCES[source].save(buffer, format=image_format, **params)
    return buffer.getvalue()


# field -> (source image, format) for the lossless formats, whose pixels must come back exactly.
LOSSLESS_IMAGES: dict[str, tuple[str, str]] = {
    "grey.png": ("grey", "PNG"),
    "rgb.png": ("rgb", "PNG"),
    "rgba.png": ("rgba", "PNG"),
    "la.png": ("la", "PNG"),
    "palette.png": ("palette", "PNG"),
    "palette-alpha.png": ("palette_alpha", "PNG"),
    "i16.png": ("i16", "PNG"),
    "bilevel.png": ("bilevel", "PNG"),
    "png": ("rgb", "PNG"),
    "seg.png": ("palette", "PNG"),
    "rgb.bmp": ("rgb", "BMP"),
    "palette.gif": ("palette", "GIF"),
    "rgba.tiff": ("rgba", "TIFF"),
}


def image_fields() -> Fields:
    """Every image field of the differential shard: lossless, lossy, upper-case, gzipped."""
    fields = {name: encode_image(*how) for name, how in LOSSLESS_IMAGES.items()}
    fields |= {
        "grey.jpg": encode_image("grey", "JPEG", quality=90),
        "rgb.jpg": encode_image("rgb", "JPEG", quality=90),
        "cmyk.jpg": encode_image("cmyk", "JPEG", quality=90),
        "jpg": encode_image("rgb", "JPEG", quality=75),
        "upper.JPG": encode_image("rgb", "JPEG", quality=80),  # field "upper.jpg" in a sample
        "JPEG": encode_image("grey", "JPEG", quality=80),
        "rgb.webp": encode_image("rgb", "WEBP", quality=80),
        "png.gz": gzip.compress(encode_image("rgba", "PNG"), mtime=0),
    }
    return fields


IMAGE_FIELDS = image_fields()

NPY = np.arange(6, dtype=np.float64).reshape(2, 3) / 7
INTS = np.array([[-3, 0, 7]], dtype=np.int16)
NPZ = {"a": np.arange(4, dtype=np.int32), "b": np.eye(2, dtype=np.float32)}
MSG = {"name": "échantillon", "values": [1, 2.5, None], "nested": {"ok": True}}
JSON = {"label": "chat", "boxes": [[1, 2, 3, 4]], "score": 0.5}
TEN = [np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3), np.arange(-2, 2, dtype=np.int16)]
TB = [np.arange(12, dtype=np.float64).reshape(3, 4), np.array([0, 255], dtype=np.uint8)]
TEXT = "héllo wörld ✓"


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def basic_fields() -> tuple[Fields, dict[str, Any]]:
    """The basic-decoder fields of the differential shard, and what each must decode to."""
    fields_and_values: dict[str, tuple[bytes, Any]] = {
        "txt": (TEXT.encode(), TEXT),
        "text": (b"plain text", "plain text"),
        "transcript": ("ça va".encode(), "ça va"),
        "cls": (b"3", 3),
        "cls2": (b"-4", -4),
        "index": (b"12", 12),
        "inx": (b" 5\n", 5),
        "id": (b"70001", 70001),
        "label.cls": (b"9", 9),
        "json": (json.dumps(JSON).encode(), JSON),
        "jsn": (b"[1, 2, 3]", [1, 2, 3]),
        "npy": (npy_bytes(NPY), NPY),
        "ints.npy": (npy_bytes(INTS), INTS),
        "npz": (npz_bytes(NPZ), NPZ),
        "mp": (msgpack.packb(MSG), MSG),
        "msg": (msgpack.packb([1, "two", 3.0]), [1, "two", 3.0]),
        "ten": (bytes(reftenbin.encode_buffer(TEN)), TEN),
        "tb": (tenbin.encode_buffer(TB), TB),
        "txt.gz": (gzip.compress(TEXT.encode(), mtime=0), TEXT),
        "json.gz": (gzip.compress(json.dumps(JSON).encode(), mtime=0), JSON),
        "gz": (gzip.compress(b"only gzip", mtime=0), b"only gzip"),
        "note.TXT": (b"read as note.txt", "read as note.txt"),
        "bin": (b"\x00\xffraw", b"\x00\xffraw"),
        "__extra__": ("métadonnée".encode(), "métadonnée"),
    }
    fields = {name: data for name, (data, _) in fields_and_values.items()}
    return fields, {name: value for name, (_, value) in fields_and_values.items()}


BASIC_FIELDS, BASIC_VALUES = basic_fields()


def write_shard(path: Path, samples: dict[str, Fields]) -> str:
    members = [
        (f"{key}.{field}", data)
        for key, fields in samples.items()
        for field, data in fields.items()
    ]
    path.write_bytes(shardgen.make_tar(members))
    return str(path)


@pytest.fixture(scope="module")
def decoder_shards(tmp_path_factory: pytest.TempPathFactory) -> Shards:
    """Two shards: images (and a little text) in one, basic fields in the other."""
    directory = tmp_path_factory.mktemp("decoders")
    images = {"img-0": IMAGE_FIELDS, "img-1": {"jpg": IMAGE_FIELDS["jpg"], "txt": b"second"}}
    basics = {
        "basic-0": BASIC_FIELDS,
        "basic-1": {"cls": b"1", "txt": b"x", "png": IMAGE_FIELDS["grey.png"]},
    }
    paths = [
        write_shard(directory / "images.tar", images),
        write_shard(directory / "basics.tar", basics),
    ]
    return Shards(paths, "::".join(paths))


# --- Running both libraries -----------------------------------------------------------------------


def run_reference(urls: list[str], *handlers: Any, **kwargs: Any) -> list[Sample]:
    """The samples webdataset decodes, or its error. webdataset leaves files open; they are
    collected with the warnings silenced, so an error is raised without the traceback that would
    keep them alive (its cause stays chained)."""
    error: Exception | None = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipeline = wdsref.DataPipeline(
            wdsref.SimpleShardList(urls),
            wdsref.tarfile_to_samples(),
            wdsref.decode(*handlers, **kwargs),
        )
        try:
            samples = list(pipeline)
        except Exception as exn:
            error = exn
            link: BaseException | None = exn
            while link is not None:
                link.__traceback__ = None
                link = link.__cause__ or link.__context__
        del pipeline
        gc.collect()
    if error is not None:
        raise error
    return samples


def run_ours(urls: list[str], *handlers: Any, **kwargs: Any) -> list[Sample]:
    return list(wds.DataPipeline(urls, wds.tarfile_to_samples(), wds.decode(*handlers, **kwargs)))


def decode_samples(samples: Iterable[Sample], *handlers: Any, **kwargs: Any) -> list[Sample]:
    """Our decode stage over in-memory sample dicts."""
    return list(IterableWrapper(list(samples), deepcopy=False).decode(*handlers, **kwargs))


def reference_decode(sample: Sample, *handlers: Any, **kwargs: Any) -> Sample:
    handlers_ = [refautodecode.ImageHandler(h) if isinstance(h, str) else h for h in handlers]
    result: Sample = refautodecode.Decoder(handlers_, **kwargs)(sample)
    return result


# --- Comparing values -----------------------------------------------------------------------------


def assert_same(ours: Any, ref: Any, where: str) -> None:
    """Same kind of value, dtype, shape and values, recursively.

    Floats are compared exactly, not with a tolerance: both libraries compute float32(x) / 255
    in float32 (webdataset divides by the Python float 255.0, which numpy 2 keeps in float32;
    wdspipes by np.float32(255)), and IEEE division is correctly rounded, so the bits agree.
    """
    if isinstance(ref, torch.Tensor):
        assert isinstance(ours, torch.Tensor), f"{where}: {type(ours).__name__}, not a tensor"
        assert (ours.dtype, ours.shape) == (ref.dtype, ref.shape), where
        assert torch.equal(ours, ref), where
    elif isinstance(ref, np.ndarray):
        assert isinstance(ours, np.ndarray), f"{where}: {type(ours).__name__}, not an array"
        assert (ours.dtype, ours.shape) == (ref.dtype, ref.shape), where
        np.testing.assert_array_equal(ours, ref, err_msg=where, strict=True)
    elif isinstance(ref, Image.Image):
        assert isinstance(ours, Image.Image), f"{where}: {type(ours).__name__}, not an image"
        assert (ours.mode, ours.size) == (ref.mode, ref.size), where
        assert ours.tobytes() == ref.tobytes(), where
    elif isinstance(ref, dict):
        assert isinstance(ours, dict), where
        assert list(ours) == list(ref), where
        for name in ref:
            assert_same(ours[name], ref[name], f"{where}[{name!r}]")
    elif isinstance(ref, (list, tuple)):
        assert type(ours) is type(ref) and len(ours) == len(ref), where
        for index, (mine, theirs) in enumerate(zip(ours, ref, strict=True)):
            assert_same(mine, theirs, f"{where}[{index}]")
    else:
        assert type(ours) is type(ref), f"{where}: {type(ours).__name__} vs {type(ref).__name__}"
        assert ours == ref, where


def assert_samples_same(ours: list[Sample], ref: list[Sample]) -> int:
    """Compare sample lists field by field; returns the number of fields compared."""
    assert ref, "the reference decoded nothing"
    assert [s["__key__"] for s in ours] == [s["__key__"] for s in ref]
    compared = 0
    for mine, theirs in zip(ours, ref, strict=True):
        assert list(mine) == list(theirs), f"fields of {theirs['__key__']}"
        for field in theirs:
            assert_same(mine[field], theirs[field], f"{theirs['__key__']}.{field}")
            compared += 1
    return compared


def expected_image(spec: str, image: Image.Image) -> Any:
    """What ``spec`` makes of ``image``, computed from the documented contract alone."""
    library, dtype, mode = SPECS[spec]
    converted = image.convert(mode)
    if library == "pil":
        return converted
    array = np.array(converted)
    if dtype in (np.float32, torch.float32):
        array = array.astype(np.float32) / np.float32(255)
    if library == "numpy":
        return array
    return torch.from_numpy(
        np.ascontiguousarray(np.moveaxis(array, -1, 0)) if array.ndim == 3 else array
    )


def assert_image_kind(value: Any, spec: str, where: str) -> None:
    """The value is what ``spec`` promises: library, element type, mode and axis order."""
    library, dtype, mode = SPECS[spec]
    channels = CHANNELS[mode]
    if library == "pil":
        assert isinstance(value, Image.Image), where
        assert (value.mode, value.size) == (mode, (WIDTH, HEIGHT)), where
        return
    plane = (HEIGHT, WIDTH)
    if library == "numpy":
        assert isinstance(value, np.ndarray) and value.dtype == dtype, where
        assert value.shape == ((*plane, channels) if channels else plane), where
        assert value.flags.writeable, f"{where}: our arrays are writable"
    else:
        assert isinstance(value, torch.Tensor) and value.dtype == dtype, where
        assert tuple(value.shape) == ((channels, *plane) if channels else plane), where
    if value.dtype in (np.float32, torch.float32):
        assert float(value.min()) >= 0 and float(value.max()) <= 1, where


# --- Differential: the 17 image specs and the default decoders ------------------------------------


def test_the_17_specs_are_webdataset_s() -> None:
    assert set(IMAGE_SPECS) == set(refautodecode.imagespecs) == set(SPECS)
    assert len(SPECS) == 17


@pytest.mark.parametrize("spec", list(SPECS))
def test_image_spec_matches_webdataset(decoder_shards: Shards, spec: str) -> None:
    ours, ref = run_ours(decoder_shards.paths, spec), run_reference(decoder_shards.paths, spec)
    assert assert_samples_same(ours, ref) >= len(IMAGE_FIELDS) + len(BASIC_FIELDS)
    images = ours[0]
    for field in IMAGE_FIELDS:
        assert_image_kind(images[field.lower()], spec, field)  # "upper.JPG" is field "upper.jpg"
    basics = next(s for s in ours if s["__key__"] == "basic-0")
    for field, value in BASIC_VALUES.items():
        assert_same(basics[field.lower()], value, field)


@pytest.mark.parametrize("spec", list(SPECS))
def test_lossless_images_decode_to_the_pixels_written(decoder_shards: Shards, spec: str) -> None:
    images = run_ours(decoder_shards.paths[:1], spec)[0]
    for field, (source, _) in LOSSLESS_IMAGES.items():
        assert_same(images[field], expected_image(spec, SOURCES[source]), f"{spec} {field}")
    assert_same(images["png.gz"], expected_image(spec, SOURCES["rgba"]), f"{spec} png.gz")


def test_default_decoders_match_webdataset(decoder_shards: Shards) -> None:
    ours, ref = run_ours(decoder_shards.paths), run_reference(decoder_shards.paths)
    assert assert_samples_same(ours, ref) >= len(IMAGE_FIELDS) + len(BASIC_FIELDS)
    images = ours[0]
    for field, data in IMAGE_FIELDS.items():
        if field != "png.gz":
            assert images[field.lower()] == data, f"{field}: no image spec, so bytes"
    assert images["png.gz"] == gzip.decompress(IMAGE_FIELDS["png.gz"]), "gunzipped, not decoded"
    basics = next(s for s in ours if s["__key__"] == "basic-0")
    for field, value in BASIC_VALUES.items():
        assert_same(basics[field.lower()], value, field)
    assert basics["__url__"] == decoder_shards.paths[1] and basics["__key__"] == "basic-0"


@pytest.mark.parametrize("spec", ["torchrgb", "pilrgba", "l8"])
def test_functional_webdataset_form_matches_webdataset(decoder_shards: Shards, spec: str) -> None:
    ours = list(wds.WebDataset(decoder_shards.paths).decode(spec))
    # webdataset's tarfile_to_samples, the reference, gives no __local_path__ (its WebDataset does)
    assert {sample.pop("__local_path__") for sample in ours} == set(decoder_shards.paths)
    assert assert_samples_same(ours, run_reference(decoder_shards.paths, spec)) > len(IMAGE_FIELDS)
    assert_image_kind(ours[0]["upper.jpg"], spec, "upper.JPG")
    assert_image_kind(ours[0]["jpeg"], spec, "JPEG")


ONLY_CASES = {
    "list-jpg": ("rgb8", ["jpg"]),
    "string-jpg-txt": ("torchrgb8", "jpg txt"),
    "tuple-compound": ("pill", ("seg.png", "txt.gz", "cls")),
}


@pytest.mark.parametrize(("spec", "only"), ONLY_CASES.values(), ids=ONLY_CASES)
def test_only_matches_webdataset(decoder_shards: Shards, spec: str, only: Any) -> None:
    ours = run_ours(decoder_shards.paths, spec, only=only)
    assert_samples_same(ours, run_reference(decoder_shards.paths, spec, only=only))
    names = set(only.split() if isinstance(only, str) else only)
    present = {field for sample in ours for field in sample}
    assert names <= present, "every field named in only= occurs in the shards"
    for sample in ours:
        for field, value in sample.items():
            if field in names:
                assert not isinstance(value, bytes), f"{field} must be decoded"
            elif not field.startswith("__"):
                assert isinstance(value, bytes), f"{field} must stay bytes"
        assert isinstance(sample["__key__"], str)


def test_decode_in_a_pipeline_with_only_jpg(decoder_shards: Shards) -> None:
    samples = run_ours(decoder_shards.paths[:1], "rgb8", only=["jpg"])
    assert [s["__key__"] for s in samples] == ["img-0", "img-1"]
    for sample in samples:
        assert_image_kind(sample["jpg"], "rgb8", "jpg")
    assert samples[0]["rgb.png"] == IMAGE_FIELDS["rgb.png"]
    assert samples[1]["txt"] == b"second"


# --- Pickle, .pth and trusted= --------------------------------------------------------------------


@dataclass
class Point:
    """A class of our own: unpickling it runs this module's code."""

    x: int
    y: int


POINT = Point(3, -4)
WEIGHTS = {"weight": torch.arange(6, dtype=torch.float32).reshape(2, 3), "step": torch.tensor(7)}


def torch_bytes(value: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def trusted_fields(seed: int = 0) -> Fields:
    return {
        "pyd": pickle.dumps({"seed": seed, "values": [1.5, None]}),
        "pkl": pickle.dumps(POINT),
        "pickle": pickle.dumps((seed, "tuple")),
        "pth": torch_bytes(WEIGHTS),
        "object.pth": torch_bytes(POINT),
    }


def test_pickle_and_pth_match_webdataset_when_trusted(tmp_path: Path) -> None:
    url = write_shard(tmp_path / "trusted.tar", {"0": trusted_fields(), "1": trusted_fields(1)})
    ours, ref = run_ours([url], trusted=True), run_reference([url])
    assert assert_samples_same(ours, ref) == 2 * (2 + len(trusted_fields()))
    assert ours[0]["pkl"] == POINT and ours[0]["object.pth"] == POINT
    assert torch.equal(ours[0]["pth"]["weight"], WEIGHTS["weight"])


@pytest.mark.parametrize("field", ["pyd", "pkl", "pickle"])
def test_pickle_needs_trusted(field: str) -> None:
    sample = {"__key__": "k", "__url__": "u.tar", field: trusted_fields()[field]}
    with pytest.raises(wds.DecodeError, match=r"trusted=True") as caught:
        decode_samples([sample])
    assert isinstance(caught.value.__cause__, wds.UntrustedDataError)
    assert (caught.value.url, caught.value.key, caught.value.field) == ("u.tar", "k", field)
    trusted = decode_samples([sample], trusted=True)[0][field]
    assert_same(trusted, pickle.loads(sample[field]), field)


def test_pth_untrusted_loads_weights_only() -> None:
    sample = {"__key__": "k", "pth": torch_bytes(WEIGHTS)}
    loaded = decode_samples([sample])[0]["pth"]
    assert_same(loaded, WEIGHTS, "pth")


def test_pth_untrusted_refuses_objects() -> None:
    sample = {"__key__": "k", "object.pth": torch_bytes(POINT)}
    with pytest.raises(wds.DecodeError, match=r"trusted=True") as caught:
        decode_samples([sample])
    assert isinstance(caught.value.__cause__, wds.UntrustedDataError)
    assert caught.value.field == "object.pth"
    assert decode_samples([sample], trusted=True)[0]["object.pth"] == POINT


@pytest.mark.parametrize("trusted", [False, True], ids=["untrusted", "trusted"])
def test_npy_and_npz_never_unpickle(trusted: bool) -> None:
    objects = np.array([{"a": 1}, None], dtype=object)
    for field, data in [("npy", npy_bytes(objects)), ("npz", npz_bytes({"o": objects}))]:
        with pytest.raises(wds.DecodeError, match=field) as caught:
            decode_samples([{"__key__": "k", field: data}], trusted=trusted)
        assert isinstance(caught.value.__cause__, ValueError), field


# --- Fields: .gz, meta fields, partial= -----------------------------------------------------------


def test_gz_fields_keep_their_name() -> None:
    sample = {
        "__key__": "k",
        "txt.gz": gzip.compress(TEXT.encode()),
        "json.gz": gzip.compress(b"[1]"),
        "cls.gz": gzip.compress(b"42"),
        "seg.png.gz": gzip.compress(IMAGE_FIELDS["seg.png"]),
    }
    decoded = decode_samples([sample], "l8")[0]
    assert list(decoded) == ["__key__", "txt.gz", "json.gz", "cls.gz", "seg.png.gz"]
    assert (decoded["txt.gz"], decoded["json.gz"], decoded["cls.gz"]) == (TEXT, [1], 42)
    assert_same(decoded["seg.png.gz"], expected_image("l8", SOURCES["palette"]), "seg.png.gz")
    assert_same(decoded, reference_decode(sample, "l8"), "sample")


def test_meta_fields_decode_as_utf8_whatever_only_says() -> None:
    sample = {"__key__": b"cl\xc3\xa9", "__extra__": b"x", "__url__": "u", "txt": b"t"}
    decoded = decode_samples([sample], only=["txt"])[0]
    assert decoded == {"__key__": "clé", "__extra__": "x", "__url__": "u", "txt": "t"}
    assert decode_samples([sample], only="cls")[0]["__extra__"] == "x"


def test_partial_passes_decoded_values_through() -> None:
    sample = {"__key__": "k", "cls": 3, "txt": b"t", "npy": NPY}
    assert_same(decode_samples([sample], partial=True)[0], {**sample, "txt": "t"}, "sample")
    assert_same(reference_decode(sample, partial=True), {**sample, "txt": "t"}, "webdataset sample")
    with pytest.raises(wds.DecodeError, match=r"partial=True") as caught:
        decode_samples([sample])
    assert caught.value.field == "cls" and isinstance(caught.value.__cause__, TypeError)


def test_extension_case_at_the_decoder() -> None:
    """Shards lower-case fields, but a decoder may see any case: image specs and
    handle_extension ignore it, the basic decoders (as webdataset's) do not."""
    sample = {
        "__key__": "k",
        "x.JPG": IMAGE_FIELDS["rgb.jpg"],
        "PNG": IMAGE_FIELDS["grey.png"],
        "Seg.Png": IMAGE_FIELDS["seg.png"],
        "TXT": b"stays bytes",
        "a.Cls": b"1",
    }
    decoded = decode_samples([sample], "torchrgb8")[0]
    for field in ("x.JPG", "PNG", "Seg.Png"):
        assert_image_kind(decoded[field], "torchrgb8", field)
    assert (decoded["TXT"], decoded["a.Cls"]) == (b"stays bytes", b"1")
    assert_same(decoded, reference_decode(sample, "torchrgb8"), "sample")


def test_fields_keep_their_order() -> None:
    sample = {"z": b"1", "__key__": "k", "b.cls": b"2", "a.txt": b"x", "m": b"?"}
    assert list(decode_samples([sample])[0]) == list(sample)


# --- Handlers: handle_extension, Continue, image specs --------------------------------------------


def tagged(tag: str) -> Callable[[bytes], tuple[str, int]]:
    def handler(data: bytes) -> tuple[str, int]:
        return (tag, len(data))

    return handler


EXTENSION_CASES = {
    "seg.png": ("seg.png", {"seg.png", "SEG.PNG", "mask.seg.png"}),
    "two-lists": ("seg.png txt", {"seg.png", "SEG.PNG", "mask.seg.png", "txt", "a.txt"}),
    "upper-pattern": ("SEG.png", {"seg.png", "SEG.PNG", "mask.seg.png"}),
}
EXTENSION_FIELDS = ["seg.png", "SEG.PNG", "mask.seg.png", "png", "xseg.png", "seg", "txt", "a.txt"]


@pytest.mark.parametrize(("pattern", "matching"), EXTENSION_CASES.values(), ids=EXTENSION_CASES)
def test_handle_extension(pattern: str, matching: set[str]) -> None:
    handler = wds.handle_extension(pattern, tagged("hit"))
    for field in EXTENSION_FIELDS:
        result = handler("." + field, b"abc")
        assert result == (("hit", 3) if field in matching else None), field
        reference = refautodecode.handle_extension(pattern, tagged("hit"))("." + field, b"abc")
        assert result == reference, field


def test_handle_extension_comes_before_image_specs_and_basics(decoder_shards: Shards) -> None:
    handlers = (wds.handle_extension("seg.png txt", tagged("mine")), "rgb8")
    ref_handlers = (refautodecode.handle_extension("seg.png txt", tagged("mine")), "rgb8")
    ours = run_ours(decoder_shards.paths, *handlers)
    assert_samples_same(ours, run_reference(decoder_shards.paths, *ref_handlers))
    images = ours[0]
    assert images["seg.png"] == ("mine", len(IMAGE_FIELDS["seg.png"]))
    assert_image_kind(images["png"], "rgb8", "png")
    assert ours[1]["txt"] == ("mine", len(b"second"))


def masked(data: bytes) -> bytes:
    """XOR-masked data; masking twice gives the data back."""
    return bytes(b ^ 0x5A for b in data)


def unmask(key: str, data: bytes) -> wds.Continue | None:
    """A Continue handler: ``.x`` fields are masked; decode on by the inner extension."""
    return wds.Continue(key[:-2], masked(data)) if key.endswith(".x") else None


def ref_unmask(key: str, data: bytes) -> Any:
    """The same handler for webdataset, which has its own Continue class."""
    result = unmask(key, data)
    return None if result is None else refautodecode.Continue(result.key, result.data)


def test_continue_handler_decodes_on_with_the_new_key() -> None:
    sample = {
        "__key__": "k",
        "txt.x": masked(b"secret"),
        "json.x": masked(b'{"a": 1}'),
        "png.x": masked(IMAGE_FIELDS["rgb.png"]),
        "raw.x": masked(b"\x01\x02"),
        "txt": b"plain",
    }
    decoded = decode_samples([sample], unmask, "rgb8")[0]
    assert decoded["txt.x"] == "secret" and decoded["json.x"] == {"a": 1}
    assert decoded["raw.x"] == b"\x01\x02" and decoded["txt"] == "plain"
    assert_same(decoded["png.x"], expected_image("rgb8", SOURCES["rgb"]), "png.x")
    assert_same(decoded, reference_decode(sample, ref_unmask, "rgb8"), "sample")
    # Handlers run once, in order: an image spec before the unmasking never sees ".png".
    late = decode_samples([sample], "rgb8", unmask)[0]
    assert late["png.x"] == IMAGE_FIELDS["rgb.png"] and late["txt.x"] == "secret"
    assert_same(late, reference_decode(sample, "rgb8", ref_unmask), "late sample")


def test_a_handler_answer_ends_the_chain() -> None:
    calls: list[str] = []

    def first(key: str, data: bytes) -> Any:
        calls.append(key)
        return 0 if key == ".cls" else None  # a falsy answer is an answer

    decoded = decode_samples([{"__key__": "k", "cls": b"5", "txt": b"t"}], first)[0]
    assert decoded == {"__key__": "k", "cls": 0, "txt": "t"} and calls == [".cls", ".txt"]


def test_unknown_spec_is_a_value_error_naming_the_known_ones(decoder_shards: Shards) -> None:
    with pytest.raises(ValueError, match=r"'rgb16'") as caught:
        IterableWrapper([]).decode("rgb16")
    assert all(spec in str(caught.value).split() for spec in SPECS)
    with pytest.raises(ValueError, match=r"'RGB8'"):
        wds.DataPipeline(decoder_shards.paths, wds.tarfile_to_samples(), wds.decode("RGB8"))
    with pytest.raises(TypeError, match=r"handler 1"):
        IterableWrapper([]).decode("rgb8", 42)


# --- Errors and error handlers --------------------------------------------------------------------


@pytest.fixture
def bad_url(tmp_path: Path) -> str:
    samples = {
        "a": {"txt": b"first", "json": b"{}"},
        "b": {"txt": b"second", "json": b"{not json"},
        "c": {"txt": b"third", "json": b"[3]"},
    }
    return write_shard(tmp_path / "bad.tar", samples)


def test_decode_error_names_url_key_field_and_chains_the_cause(bad_url: str) -> None:
    with pytest.raises(wds.DecodeError) as caught:
        run_ours([bad_url])
    error = caught.value
    assert isinstance(error, wds.SampleError) and isinstance(error, wds.WdsError)
    assert (error.url, error.key, error.field) == (bad_url, "b", "json")
    assert isinstance(error.__cause__, json.JSONDecodeError)
    message = str(error)
    assert message.startswith(f"{bad_url}, key 'b', field 'json': ")
    assert "JSONDecodeError" in message and "cannot decode" in message


def test_webdataset_decoding_error_has_no_message(bad_url: str) -> None:
    """The documented difference: webdataset's DecodingError says nothing when printed."""
    with pytest.raises(refautodecode.DecodingError) as caught:
        run_reference([bad_url])
    error = caught.value
    assert str(error) == ""
    assert (error.url, error.key, error.k) == (bad_url, "b", "json")
    assert isinstance(error.__cause__, json.JSONDecodeError)


def test_ignore_and_continue_skips_the_bad_sample(bad_url: str) -> None:
    ours = run_ours([bad_url], handler=wds.ignore_and_continue)
    assert [(s["__key__"], s["txt"], s["json"]) for s in ours] == [
        ("a", "first", {}),
        ("c", "third", [3]),
    ]
    assert_samples_same(ours, run_reference([bad_url], handler=wdsref.ignore_and_continue))


def test_warn_and_continue_warns_with_the_location(bad_url: str) -> None:
    with pytest.warns(wds.DataWarning, match=r"key 'b', field 'json'"):
        ours = run_ours([bad_url], handler=wds.warn_and_continue)
    assert [s["__key__"] for s in ours] == ["a", "c"]


def test_ignore_and_stop_ends_at_the_bad_sample(bad_url: str) -> None:
    assert [s["__key__"] for s in run_ours([bad_url], handler=wds.ignore_and_stop)] == ["a"]


BAD_FIELDS = {
    "cls": (b"three", ValueError),
    "txt": (b"\xff\xfe", UnicodeDecodeError),
    "txt.gz": (b"not gzip", gzip.BadGzipFile),
    "npy": (b"\x93NUMPY broken", ValueError),
    "ten": (b"~TenBin~\x10", ValueError),
    "png": (b"not a png", wds.ImageFormatError),
}


@pytest.mark.parametrize(
    ("field", "data", "cause"), [(f, *v) for f, v in BAD_FIELDS.items()], ids=list(BAD_FIELDS)
)
def test_bad_field_is_a_decode_error(field: str, data: bytes, cause: type) -> None:
    sample = {"__key__": "k", "__url__": "s.tar", field: data}
    with pytest.raises(wds.DecodeError, match=rf"s\.tar, key 'k', field '{field}'") as caught:
        decode_samples([sample], "rgb8")
    assert isinstance(caught.value.__cause__, cause)
    assert cause.__name__ in str(caught.value)


# --- Deliberate differences from webdataset -------------------------------------------------------


def test_msgpack_extension_decodes_unlike_webdataset() -> None:
    sample = {"__key__": "k", "msgpack": msgpack.packb(MSG)}
    assert decode_samples([sample])[0]["msgpack"] == MSG
    assert reference_decode(sample)["msgpack"] == sample["msgpack"], "webdataset: mp/msg only"


def test_cbor_decodes_with_cbor2_where_webdataset_cannot() -> None:
    value = {"a": [1, 2.5, "x"], "b": b"bytes", "c": None}
    sample = {"__key__": "k", "cbor": cbor2.dumps(value), "data.cbor": cbor2.dumps([7])}
    decoded = decode_samples([sample])[0]
    assert decoded["cbor"] == value == cbor2.loads(sample["cbor"]) and decoded["data.cbor"] == [7]
    with pytest.raises(refautodecode.DecodingError) as caught:
        reference_decode(sample)
    assert isinstance(caught.value.__cause__, ImportError), "webdataset needs the cbor package"


def test_image_extensions_are_an_allow_list_within_webdataset_s() -> None:
    """webdataset hands every extension Pillow registers to Pillow, EPS (Ghostscript) too;
    the image specs here decode the formats the writers write, and GIF."""
    ours, theirs = image_extensions(), set(refautodecode.IMAGE_EXTENSIONS)
    assert ours < theirs
    jpeg, netpbm = {"jpg", "jpeg", "jpe", "jfif"}, {"ppm", "pgm", "pbm", "pnm"}
    assert ours == jpeg | netpbm | {"png", "webp", "gif", "tif", "tiff", "bmp"}
    assert {"eps", "ps"} <= theirs - ours


def pfm_bytes(values: np.ndarray) -> bytes:
    """A grey PFM image (float32, little-endian, rows bottom to top)."""
    height, width = values.shape
    header = f"Pf\n{width} {height}\n-1.0\n".encode()
    return header + np.ascontiguousarray(values[::-1], dtype="<f4").tobytes()


def test_other_image_formats_decode_when_given_formats() -> None:
    """By default they stay bytes, as in webdataset; a table of formats decodes them."""
    levels = np.arange(WIDTH * HEIGHT, dtype=np.float32).reshape(HEIGHT, WIDTH)
    sample = {
        "__key__": "k",
        "qoi": encode_image("rgba", "QOI"),
        "avif": encode_image("rgb", "AVIF", quality=90),
        "pfm": pfm_bytes(levels),
    }
    assert decode_samples([sample], "rgba8")[0] == sample
    assert reference_decode(sample, "rgba8") == sample, "webdataset leaves them as bytes"
    formats = {"qoi": "QOI", "avif": "AVIF", "pfm": "PPM"}
    decoded = decode_samples([sample], wds.ImageDecoder("rgba8", formats=formats))[0]
    for field in ("qoi", "avif", "pfm"):
        assert_image_kind(decoded[field], "rgba8", field)
    assert_same(decoded["qoi"], np.array(SOURCES["rgba"]), "qoi")  # QOI is lossless
    assert_same(decoded["pfm"][..., 0], levels.astype(np.uint8), "pfm")


@pytest.mark.parametrize("spec", [s for s, (lib, _, _) in SPECS.items() if lib == "numpy"])
def test_numpy_arrays_are_writable(decoder_shards: Shards, spec: str) -> None:
    ours, ref = (
        run_ours(decoder_shards.paths[:1], spec)[0],
        run_reference(decoder_shards.paths[:1], spec)[0],
    )
    for field in map(str.lower, IMAGE_FIELDS):
        assert ours[field].flags.writeable, field
        ours[field][0, 0] = 0  # and writing to one does not fail
    if SPECS[spec][1] == np.uint8:
        assert not ref["rgb.png"].flags.writeable, "webdataset's uint8 arrays are views"


# --- tenbin ---------------------------------------------------------------------------------------


TENBIN_DTYPES = [
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint64",
]


def tenbin_arrays(dtype: str) -> list[np.ndarray]:
    values = np.arange(-3, 27).reshape(2, 3, 5) if "u" not in dtype else np.arange(30)
    return [values.astype(dtype), np.zeros((0, 4), dtype=dtype), np.ones(1, dtype=dtype)]


@pytest.mark.parametrize("dtype", TENBIN_DTYPES)
def test_tenbin_interoperates_with_webdataset(dtype: str) -> None:
    arrays = tenbin_arrays(dtype)
    ours, theirs = tenbin.encode_buffer(arrays), bytes(reftenbin.encode_buffer(arrays))
    assert ours == theirs
    assert_same(tenbin.decode_buffer(theirs), arrays, "ours from webdataset's")
    assert_same(reftenbin.decode_buffer(ours), arrays, "webdataset's from ours")
    decoded = decode_samples([{"__key__": "k", "ten": theirs, "x.tb": ours}])[0]
    assert_same(decoded["ten"], arrays, "ten")
    assert_same(decoded["x.tb"], arrays, "x.tb")


def test_tenbin_uint32_works_unlike_webdataset() -> None:
    """webdataset's table spells it "unit32", so it can neither write nor read uint32."""
    arrays = [np.array([[0, 1], [2**32 - 1, 2**31]], dtype=np.uint32)]
    buffer = tenbin.encode_buffer(arrays)
    assert_same(tenbin.decode_buffer(buffer), arrays, "uint32")
    assert_same(decode_samples([{"__key__": "k", "ten": buffer}])[0]["ten"], arrays, "ten")
    with pytest.raises(ValueError):
        reftenbin.encode_buffer(arrays)
    with pytest.raises(TypeError):
        reftenbin.decode_buffer(buffer)


def test_tenbin_reads_rank_0_arrays_unlike_webdataset() -> None:
    buffer = bytes(reftenbin.encode_buffer([np.array(2.5), np.array(7, dtype=np.int16)]))
    assert_same(tenbin.decode_buffer(buffer), [np.array(2.5), np.array(7, dtype=np.int16)], "0-d")
    with pytest.raises(TypeError):
        reftenbin.decode_buffer(buffer)  # reshape(*()) on a numpy scalar


def test_tenbin_round_trip_keeps_rank_0() -> None:
    """BUG: encode_buffer writes a 0-d array as shape (1,) (np.ascontiguousarray makes it 1-d),
    though decode_buffer reads rank 0 and webdataset's encoder writes it."""
    arrays = [np.array(2.5), np.array(7, dtype=np.int16)]
    assert_same(tenbin.decode_buffer(tenbin.encode_buffer(arrays)), arrays, "0-d")
    assert tenbin.encode_buffer(arrays) == bytes(reftenbin.encode_buffer(arrays))


@pytest.mark.parametrize("dtype", [">i4", ">f8"])
def test_tenbin_round_trip_keeps_values_of_non_native_byte_order(dtype: str) -> None:
    """BUG: encode_buffer writes a big-endian array's bytes as they are, under a header that
    says native (little-endian) order, so the values come back scrambled. Converting, or
    refusing with ValueError, would both do."""
    array = np.arange(1, 7, dtype=dtype).reshape(2, 3)
    try:
        buffer = tenbin.encode_buffer([array])
    except ValueError:
        return
    (decoded,) = tenbin.decode_buffer(buffer)
    assert decoded.shape == array.shape and decoded.dtype.name == array.dtype.name
    assert decoded.tolist() == array.tolist()


@pytest.mark.parametrize(
    "buffer",
    [
        b"~TenBin!" + bytes(8),
        b"~TenBin~\x40" + bytes(7) + bytes(8),
        tenbin.encode_buffer([INTS])[:80],
    ],
    ids=["bad-magic", "cut-data", "header-without-data"],
)
def test_tenbin_rejects_broken_buffers(buffer: bytes) -> None:
    with pytest.raises(ValueError, match="tenbin"):
        tenbin.decode_buffer(buffer)


# --- Limits -----------------------------------------------------------------------------------


def test_a_gz_field_over_max_size_is_a_decode_error() -> None:
    sample = {"__key__": "k", "__url__": "s.tar", "txt.gz": gzip.compress(b"x" * 1000)}
    assert decode_samples([sample], max_size=1000)[0]["txt.gz"] == "x" * 1000
    with pytest.raises(wds.DecodeError, match="decompresses to more than 999 bytes") as caught:
        decode_samples([sample], max_size=999)
    assert isinstance(caught.value.__cause__, wds.DataLimitError)
    two = gzip.compress(b"ab") + bytes(3) + gzip.compress(b"cd")  # members, zeros between
    assert decode_samples([{"__key__": "k", "txt.gz": two}])[0]["txt.gz"] == "abcd"
    with pytest.raises(wds.DecodeError, match="EOFError"):
        decode_samples([{"__key__": "k", "txt.gz": gzip.compress(b"abc")[:-4]}])
    with pytest.raises(ValueError, match="max_size must be an int >= 1"):
        SampleDecoder(IterableWrapper([]), max_size=0)


def test_npz_members_over_max_size_are_a_decode_error() -> None:
    data = wds.encode_value("npz", {"a": np.zeros(100, np.uint8), "b": np.zeros(100, np.uint8)})
    sample = {"__key__": "k", "npz": data}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        held = sum(member.file_size for member in archive.infolist())  # as its index declares
    assert set(decode_samples([sample], max_size=held)[0]["npz"]) == {"a", "b"}
    with pytest.raises(wds.DecodeError, match=f"members hold {held} bytes, over the limit"):
        decode_samples([sample], max_size=held - 1)


def test_only_given_as_a_generator_decodes_every_epoch() -> None:
    pipe = IterableWrapper([{"__key__": "0", "cls": b"3"}]).decode(only=(f for f in ["cls"]))
    assert list(pipe) == list(pipe) == [{"__key__": "0", "cls": 3}]


NPY_ARRAYS = {
    "float32 2-d": np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4),
    "Fortran order": np.asfortranarray(np.arange(24, dtype=np.int64).reshape(2, 3, 4)),
    "big-endian": np.arange(5, dtype=">u4"),
    "0-d": np.array(3.5),
    "empty": np.zeros((0, 7), np.int16),
    "bool": np.array([True, False, True]),
    "unicode": np.array(["a", "bcd", "é"]),
    "structured": np.array([(1, 2.0), (3, 4.0)], dtype=[("i", "<i4"), ("f", "<f8")]),
    "zero-width bytes": np.zeros(3, dtype="S0"),
    "version 3.0 header": np.arange(4, dtype=np.uint8),
}


@pytest.mark.parametrize("array", NPY_ARRAYS.values(), ids=NPY_ARRAYS.keys())
def test_npy_fields_decode_as_numpys_load(array: np.ndarray) -> None:
    """The .npy decoder reads the header once (to bound it) and the array from the bytes after
    it: the array, its dtype, layout and writability are np.load's."""
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=(3, 0) if array.dtype == np.uint8 else None)
    data = buffer.getvalue()
    expected = np.load(io.BytesIO(data), allow_pickle=False)
    decoded = BasicDecoder()(".npy", data)
    assert decoded.dtype == expected.dtype and decoded.shape == expected.shape
    assert decoded.tobytes(order="A") == expected.tobytes(order="A")
    assert decoded.flags.f_contiguous == expected.flags.f_contiguous
    assert decoded.flags.c_contiguous == expected.flags.c_contiguous
    assert decoded.flags.writeable

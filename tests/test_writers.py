"""The writers: encoders, TarWriter and ShardWriter.

Round trips: samples with a field of every encoder, written plain and with each compression,
read back by wdspipes equal to what was written; webdataset 1.0.2 reads the same files to the
same raw samples; shards written by webdataset's own writers decode in wdspipes to the same
values. GNU tar, bsdtar and ``tarfile`` list and extract our archives; the header kinds (plain
ustar, ustar prefix, PAX) and archive sizes are checked block by block; output is reproducible
byte for byte. Every ``EncodeError`` names key and field. ShardWriter rolls over by count and
size, calls ``post`` in order, and never leaves a truncated shard under a final name, not even
when its process is killed.
"""

from __future__ import annotations

import gc
import gzip
import io
import os
import pickle
import re
import subprocess
import sys
import tarfile
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import shardgen
import torch
import zstandard
from PIL import Image

import wdspipes as wds
from wdspipes.errors import EncodeError, TruncatedShardError
from wdspipes.pipes import SampleDecoder
from wdspipes.read.walk import iter_tar
from wdspipes.samples.decoders import ImageDecoder
from wdspipes.write import SampleEncoder, ShardWriter, TarWriter, encode_value
from wdspipes.write.tar import RECORD, member_blocks

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import webdataset as wdsref

BLOCK = 512
SUFFIX = {None: ".tar", "gz": ".tar.gz", "bz2": ".tar.bz2", "xz": ".tar.xz", "zst": ".tar.zst"}
COMPRESSIONS = list(SUFFIX)


# --- Samples and comparisons ------------------------------------------------------------------


def gradient(height: int, width: int, channels: int = 0) -> np.ndarray:
    """A smooth uint8 image (JPEG keeps it close), different in every channel."""
    y, x = np.mgrid[0:height, 0:width]
    planes = [(x * 7 + y * 3 + c * 40) % 256 for c in range(max(channels, 1))]
    image = np.stack(planes, axis=-1).astype(np.uint8)
    return image[:, :, 0] if channels == 0 else image


def rich_sample(index: int) -> dict[str, Any]:
    """A sample with a field for every encoder (and a ``__url__`` that is not written)."""
    array = np.arange(2 * index + 6, dtype=np.float32).reshape(2, -1)
    return {
        "__key__": f"sample-{index:04d}",
        "__url__": "ignored",
        "txt": f"texte {index} ü",
        "cls": index,
        "json": {"index": index, "tags": ["a", "é"], "none": None},
        "npy": array,
        "npz": {"a": array, "file": np.arange(3, dtype=np.int16)},  # np.savez(file=...) fails
        "mp": {"index": index, "blob": b"\x00\x01"},
        "cbor": [index, "x", 1.5],
        "ten": [array, np.arange(4, dtype=np.uint8)],
        "png": gradient(5, 7, 3),
        "seg.png": gradient(4, 3, 4),
        "jpg": gradient(16, 16, 3),
        "txt.gz": f"compressed {index}",
        "bin": bytes(range(index, index + 10)),
        "other": "any str",
        "pyd": {"set": {1, 2}},
        "pth": {"weights": torch.arange(3)},
    }


def expected_decoded(sample: Mapping[str, Any]) -> dict[str, Any]:
    """What decoding (``"rgba8"`` images, trusted) gives back for ``rich_sample``'s fields."""
    expected = {field: value for field, value in sample.items() if not field.startswith("__")}
    expected["png"] = np.concatenate([sample["png"], np.full((5, 7, 1), 255, np.uint8)], axis=2)
    expected["other"] = sample["other"].encode()
    del expected["jpg"]  # lossy: checked apart
    return dict(sorted(expected.items()))


def assert_equal(got: Any, expected: Any, where: str = "") -> None:
    """Deep equality over dicts, lists, arrays and tensors, with types and dtypes."""
    if isinstance(expected, np.ndarray):
        assert isinstance(got, np.ndarray), where
        assert got.dtype == expected.dtype and got.shape == expected.shape, where
        assert np.array_equal(got, expected), where
    elif isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == expected.dtype, where
        assert torch.equal(got, expected), where
    elif isinstance(expected, Mapping):
        assert isinstance(got, Mapping) and list(got) == list(expected), where
        for key in expected:
            assert_equal(got[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(expected), where
        for index, (a, b) in enumerate(zip(got, expected, strict=True)):
            assert_equal(a, b, f"{where}[{index}]")
    else:
        assert type(got) is type(expected) and got == expected, (where, got, expected)


def decoded(path: Path | str, *specs: str) -> list[dict[str, Any]]:
    return list(wds.WebDataset(str(path)).decode(*specs, trusted=True))


def raw(urls: str | list[str]) -> list[dict[str, Any]]:
    return list(wds.DataPipeline(wds.SimpleShardList(urls), wds.tarfile_to_samples()))


def raw_by_webdataset(url: str) -> list[dict[str, Any]]:
    """The raw samples webdataset 1.0.2 reads (through ``tarfile``; zstd given decompressed)."""
    readable = url
    if url.endswith(".zst"):
        readable = url + ".decompressed.tar"
        Path(readable).write_bytes(
            zstandard.ZstdDecompressor().decompressobj().decompress(Path(url).read_bytes())
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # webdataset leaks one open file per shard
        pipeline = wdsref.DataPipeline(
            wdsref.SimpleShardList([readable]), wdsref.tarfile_to_samples()
        )
        samples = list(pipeline)
        del pipeline
        gc.collect()
    for sample in samples:
        sample["__url__"] = url
    return samples


def write_tar(path: Path, samples: Iterable[Mapping[str, Any]], **options: Any) -> Path:
    with TarWriter(path, trusted=True, **options) as writer:
        for sample in samples:
            writer.write(sample)
    return path


def uncompressed(path: Path) -> bytes:
    data = path.read_bytes()
    if path.suffix == ".zst":
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    with tarfile.open(path) as archive:  # any compression tarfile knows: check it reads
        archive.getmembers()
    opener = {".gz": gzip.open, ".bz2": __import__("bz2").open, ".xz": __import__("lzma").open}
    if path.suffix in opener:
        with opener[path.suffix](path) as file:
            return file.read()
    return data


# --- Round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("compress", COMPRESSIONS, ids=str)
def test_round_trip(tmp_path: Path, compress: str | None) -> None:
    samples = [rich_sample(index) for index in range(3)]
    path = tmp_path / f"shard{SUFFIX[compress]}"
    with TarWriter(path, compress=compress, trusted=True) as writer:
        added = [writer.write(sample) for sample in samples]
    assert writer.count == 3
    assert writer.size == path.stat().st_size
    tar = uncompressed(path)
    assert len(tar) == sum(added) + 2 * BLOCK + (-(sum(added) + 2 * BLOCK) % RECORD)

    got = decoded(path, "rgba8")
    assert [sample["__key__"] for sample in got] == [s["__key__"] for s in samples]
    for sample, written in zip(got, samples, strict=True):
        assert sample["__url__"] == str(path)
        fields = {k: v for k, v in sample.items() if not k.startswith("__")}
        assert list(fields) == sorted(written.keys() - {"__key__", "__url__"})
        jpeg = fields.pop("jpg")
        assert_equal(fields, expected_decoded(written), written["__key__"])
        assert jpeg.shape == (16, 16, 4)
        assert np.abs(jpeg[:, :, :3].astype(int) - written["jpg"]).mean() < 4

    assert_raw_samples_match_webdataset(str(path))


def assert_raw_samples_match_webdataset(url: str) -> None:
    ours = raw(url)
    assert ours
    assert [list(s.items()) for s in ours] == [list(s.items()) for s in raw_by_webdataset(url)]


WEBDATASET_FIELDS = ["txt", "cls", "json", "npy", "npz", "mp", "ten", "png", "bin", "pyd"]


def common_sample(index: int) -> dict[str, Any]:
    """The fields that webdataset's encoders and ours both write."""
    sample = rich_sample(index)
    sample["ten"] = [sample["ten"][0], np.arange(4, dtype=np.int32)]  # webdataset: no uint8
    sample["npz"] = {"a": sample["npy"]}  # webdataset's np.savez_compressed(**) takes no "file"
    return {k: v for k, v in sample.items() if k == "__key__" or k in WEBDATASET_FIELDS}


@pytest.mark.parametrize("suffix", [".tar", ".tar.gz"])
def test_webdataset_tarwriter_output_decodes_the_same(tmp_path: Path, suffix: str) -> None:
    samples = [common_sample(index) for index in range(3)]
    theirs = tmp_path / f"theirs{suffix}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with wdsref.TarWriter(str(theirs), mtime=0) as writer:
            for sample in samples:
                writer.write(sample)
    ours = write_tar(tmp_path / f"ours{suffix}", samples, compress="gz" if "gz" in suffix else None)
    from_theirs, from_ours = decoded(theirs, "rgb8"), decoded(ours, "rgb8")
    for a, b, written in zip(from_theirs, from_ours, samples, strict=True):
        a.pop("__url__"), b.pop("__url__"), a.pop("__local_path__"), b.pop("__local_path__")
        assert_equal(a, b)
        assert_equal(b["json"], written["json"])
        assert_equal(b["png"], written["png"])


def test_webdataset_shardwriter_shards_decode_the_same(tmp_path: Path) -> None:
    samples = [common_sample(index) for index in range(7)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with wdsref.ShardWriter(str(tmp_path / "w-%03d.tar"), maxcount=3, verbose=0) as sink:
            for sample in samples:
                sink.write(sample)
    with ShardWriter(str(tmp_path / "o-%03d.tar"), maxcount=3, trusted=True) as writer:
        for sample in samples:
            writer.write(sample)
    theirs = sorted(str(path) for path in tmp_path.glob("w-*.tar"))
    assert [Path(p).name for p in writer.shards] == ["o-000.tar", "o-001.tar", "o-002.tar"]
    assert [p.replace("/w-", "/o-") for p in theirs] == writer.shards
    for their_shard, our_shard in zip(theirs, writer.shards, strict=True):
        from_theirs, from_ours = decoded(their_shard, "rgb8"), decoded(our_shard, "rgb8")
        assert len(from_ours) in (1, 3)
        for a, b in zip(from_theirs, from_ours, strict=True):
            a.pop("__url__"), b.pop("__url__"), a.pop("__local_path__"), b.pop("__local_path__")
            assert_equal(a, b)


# --- Images -----------------------------------------------------------------------------------

LOSSLESS = ["png", "ppm", "pgm", "pbm", "tif", "tiff", "webp", "bmp"]


IMAGE_CASES = [
    (extension, channels, spec)
    for extension in [*LOSSLESS, "jpg", "JPEG"]
    for channels, spec in [(0, "l8"), (1, "l8"), (3, "rgb8"), (4, "rgba8")]
    if channels < 4 or extension in ("png", "tif", "tiff", "webp")  # formats with alpha
]


@pytest.mark.parametrize(("extension", "channels", "spec"), IMAGE_CASES)
def test_image_arrays(extension: str, channels: int, spec: str) -> None:
    image = gradient(6, 9, channels)
    back = ImageDecoder(spec)("." + extension, encode_value(extension, image))
    want = image[:, :, 0] if channels == 1 else image
    assert back.shape == want.shape and back.dtype == np.uint8
    if extension.lower() in LOSSLESS:
        assert np.array_equal(back, want)
    else:
        assert np.abs(back.astype(int) - want).mean() < 4


def test_image_floats_tensors_and_pil() -> None:
    pixels = gradient(5, 8, 3)
    floats = pixels.astype(np.float32) / np.float32(255)
    decode_rgb8, decode_torch = ImageDecoder("rgb8"), ImageDecoder("torchrgb")
    assert np.array_equal(decode_rgb8(".png", encode_value("png", floats)), pixels)
    halves = np.array([[0.5, 0.999, 0.001, 1.0, 0.0]], dtype=np.float32)  # rounded, not cut
    assert ImageDecoder("l8")(".png", encode_value("png", halves)).tolist() == [
        [128, 255, 0, 255, 0]
    ]
    tensor = torch.from_numpy(pixels).permute(2, 0, 1).contiguous()
    assert np.array_equal(decode_rgb8(".png", encode_value("png", tensor)), pixels)
    as_float = tensor.float() / 255
    assert torch.equal(decode_torch(".png", encode_value("png", as_float)), as_float)
    grey = torch.from_numpy(gradient(5, 8))
    back = ImageDecoder("torchl8")(".png", encode_value("png", grey[None]))
    assert torch.equal(back, grey)
    pil = Image.fromarray(pixels)
    assert np.array_equal(decode_rgb8(".bmp", encode_value("bmp", pil)), pixels)


def test_jpeg_quality() -> None:
    image = (np.random.default_rng(0).random((32, 32, 3)) * 255).astype(np.uint8)
    low = SampleEncoder(jpeg_quality=20).encode_field("jpg", image)
    default = encode_value("jpg", image)
    high = encode_value("jpg", image, jpeg_quality=95)
    assert len(low) < len(default) < len(high)
    with pytest.raises(ValueError, match="jpeg_quality"):
        SampleEncoder(jpeg_quality=0)


# --- Other encodings --------------------------------------------------------------------------


def test_bytes_pass_through_unchanged() -> None:
    data = b"\x00\xffraw"
    for field in ["jpg", "txt", "txt.gz", "npy", "whatever", "pyd"]:
        assert encode_value(field, data) is data
        assert encode_value(field, bytearray(data)) == data
        assert encode_value(field, memoryview(data)) == data
    floats = np.arange(3, dtype=np.float64)
    assert encode_value("bin", memoryview(floats)) == floats.tobytes()


def test_gz_fields_are_encoded_by_the_inner_extension() -> None:
    data = encode_value("json.GZ", {"a": 1})
    assert data[:2] == b"\x1f\x8b" and data[4:8] == bytes(4)  # gzip, mtime 0
    assert gzip.decompress(data) == b'{"a":1}'
    assert gzip.decompress(encode_value("gz", "plain")) == b"plain"
    sample = {"__key__": "k", "txt.gz": "hé", "npy.gz": np.arange(3)}
    back = next(iter(SampleDecoder([to_raw(sample)])))
    assert back["txt.gz"] == "hé"
    assert_equal(back["npy.gz"], np.arange(3))


def to_raw(sample: Mapping[str, Any], **options: Any) -> dict[str, Any]:
    """A sample encoded and grouped as the reader would give it (no tar in between)."""
    return {"__key__": sample["__key__"], **dict(SampleEncoder(**options)(sample))}


def test_encodings() -> None:
    assert encode_value("cls", np.int64(7)) == b"7"
    assert encode_value("seg.ID", -12) == b"-12"
    assert encode_value("cls", "n07") == b"n07"
    assert encode_value("json", "a str") == b'"a str"'  # a JSON string, not raw text
    assert encode_value("jsn", {"é": [1.5, None]}) == '{"é":[1.5,null]}'.encode()
    assert msgpack.unpackb(encode_value("msgpack", {"b": b"\x00"})) == {"b": b"\x00"}
    assert encode_value("unknown.ext", "text") == b"text"
    assert pickle.loads(encode_value("pkl", {1, 2}, trusted=True)) == {1, 2}
    assert encode_value("npz", {}) == encode_value("npz", {})
    assert repr(SampleEncoder()) == "SampleEncoder(trusted=False, jpeg_quality=90)"


def test_sample_encoder_output() -> None:
    sample = {"__key__": "a/b", "__local_path__": "x", "txt": "t", "B.TXT": "u", "a.cls": 1}
    assert SampleEncoder()(sample) == [("B.TXT", b"u"), ("a.cls", b"1"), ("txt", b"t")]


# --- EncodeError ------------------------------------------------------------------------------

# (sample, field named by the error or None, fragment of the message)
ENCODE_ERRORS: list[tuple[dict[str, Any], str | None, str]] = [
    ({"txt": "x"}, None, "sample without __key__"),
    ({"__key__": 3, "txt": "x"}, None, "__key__ must be a non-empty str"),
    ({"__key__": "", "txt": "x"}, None, "__key__ must be a non-empty str"),
    ({"__key__": "k"}, None, "no fields"),
    ({"__key__": "k", "__url__": "u"}, None, "no fields"),
    ({"__key__": "a.b", "txt": "x"}, "txt", "would read back as key 'a', field 'b.txt'"),
    ({"__key__": "d/.hidden", "txt": "x"}, "txt", "as key 'd/', field 'hidden.txt'"),
    ({"__key__": ".hidden", "txt": "x"}, "txt", "would be skipped by readers"),
    ({"__key__": "a//b", "txt": "x"}, "txt", "empty path component"),
    ({"__key__": "/a", "txt": "x"}, "txt", "escapes the directory it is extracted into (a leading"),
    ({"__key__": "../a", "txt": "x"}, "txt", "escapes the directory it is extracted into (a '..'"),
    ({"__key__": "a/../../b", "txt": "x"}, "txt", "member 'a/../../b.txt' escapes the directory"),
    ({"__key__": "a/", "txt": "x"}, "txt", "would read back as key 'a/', field 'txt'"),
    ({"__key__": "__x__/a", "txt": "x"}, "txt", "skipped by readers as a meta file"),
    ({"__key__": "a\0b", "txt": "x"}, "txt", "NUL"),
    ({"__key__": "k", "x/y": "x"}, "x/y", "cannot contain '/'"),
    ({"__key__": "k", "txt": "x", 3: b""}, None, "field names must be str, got 3"),
    ({"__key__": "k\ud800", "txt": "x"}, "txt", "must encode as UTF-8"),
    ({"__key__": "k", "": "x"}, "", "an empty field name"),
    ({"__key__": "k", "jpg": b"", "JPG": b""}, "jpg", "would read back as one field 'jpg'"),
    ({"__key__": "k", "txt": 1}, "txt", "a .txt field takes a str, not int"),
    ({"__key__": "k", "cls": True}, "cls", "takes an int (not bool) or a str, not bool"),
    ({"__key__": "k", "cls": 2.0}, "cls", "not float"),
    ({"__key__": "k", "foo": 2.0}, "foo", "no encoder for a float value with extension 'foo'"),
    ({"__key__": "k", "npy": [1, 2]}, "npy", "a .npy field takes a numpy array, not list"),
    ({"__key__": "k", "npz": {"a": [1]}}, "npz", "entry 'a' holds a list"),
    ({"__key__": "k", "npy": np.array([None])}, "npy", "Object arrays cannot be saved"),
    ({"__key__": "k", "ten": np.arange(2)}, "ten", "a list or tuple of numpy arrays"),
    ({"__key__": "k", "json": {1, 2}}, "json", "TypeError"),
    ({"__key__": "k", "msg": object()}, "msg", "TypeError"),
    ({"__key__": "k", "pyd": 1}, "pyd", "pass trusted=True"),
    ({"__key__": "k", "pickle": 1}, "pickle", "decode(..., trusted=True)"),
    ({"__key__": "k", "pth": torch.ones(1)}, "pth", "torch.save data runs code"),
    ({"__key__": "k", "png": "a str"}, "png", "takes an image"),
    ({"__key__": "k", "png": np.zeros((2, 2, 2), np.uint8)}, "png", "C in 1, 3, 4"),
    ({"__key__": "k", "png": torch.zeros(2, 4, 4)}, "png", "C in 1, 3, 4"),
    ({"__key__": "k", "png": np.full((2, 2), 1.5)}, "png", "must be in [0, 1]"),
    ({"__key__": "k", "png": np.full((2, 2), np.nan)}, "png", "must be in [0, 1]"),
    ({"__key__": "k", "png": np.zeros((2, 2), np.int16)}, "png", "uint8, or floats"),
    ({"__key__": "k", "jpg": np.zeros((2, 2, 4), np.uint8)}, "jpg", "no alpha channel"),
    ({"__key__": "k", "ppm": np.zeros((2, 2, 4), np.uint8)}, "ppm", "no alpha channel"),
    ({"__key__": "k", "bmp": Image.new("LA", (2, 2))}, "bmp", "no alpha channel"),
    ({"__key__": "k", "png": Image.new("CMYK", (2, 2))}, "png", "OSError: cannot write mode"),
]


@pytest.mark.parametrize(("sample", "field", "fragment"), ENCODE_ERRORS)
def test_encode_errors(sample: dict[str, Any], field: str | None, fragment: str) -> None:
    with pytest.raises(EncodeError) as caught:
        SampleEncoder()(sample)
    error = caught.value
    assert fragment in str(error)
    key = sample.get("__key__")
    if isinstance(key, str) and key:
        assert error.key == key and f"key {key!r}" in str(error)
    assert error.field == field
    if field is not None:
        assert f"field {field!r}" in str(error)


def test_encode_errors_chain_library_errors_only() -> None:
    with pytest.raises(EncodeError) as caught:
        encode_value("png", Image.new("CMYK", (2, 2)))
    assert isinstance(caught.value.__cause__, OSError)
    with pytest.raises(EncodeError) as caught:
        encode_value("pyd", 1)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    with pytest.raises(EncodeError) as caught:
        encode_value("xyz", 1)
    message = str(caught.value)
    for extension in ["txt", "cls", "json", "npy", "npz", "msgpack", "cbor", "ten", "webp", "pth"]:
        assert f" {extension}" in message


def test_failed_sample_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "shard.tar"
    with TarWriter(path) as writer:
        writer.write({"__key__": "0", "txt": "a"})
        with pytest.raises(EncodeError):
            writer.write({"__key__": "1", "txt": "b", "zzz": object()})
        writer.write({"__key__": "2", "txt": "c"})
    assert writer.count == 2
    assert [(s["__key__"], s["txt"]) for s in raw(str(path))] == [("0", b"a"), ("2", b"c")]


def members_of(data: bytes) -> list[tuple[str, bytes]]:
    return [(m.name, m.data) for m in iter_tar(io.BytesIO(data), "mem")]


def test_encoder_false(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with TarWriter(buffer, encoder=False) as writer:
        writer.write({"__key__": "0", "a": b"x", "b": bytearray(b"y"), "__url__": "u"})
        with pytest.raises(EncodeError, match=r"key '1', field 'txt': the value is a str"):
            writer.write({"__key__": "1", "txt": "text"})
        with pytest.raises(EncodeError, match=r"as key 'a', field 'b.txt'"):
            writer.write({"__key__": "a.b", "txt": b"text"})
    assert not buffer.closed
    assert members_of(buffer.getvalue()) == [("0.a", b"x"), ("0.b", b"y")]


def test_encoder_functions() -> None:
    def upper(sample: dict[str, Any]) -> dict[str, Any]:
        return {"txt": sample["txt"].upper().encode()}

    def renamed(sample: dict[str, Any]) -> dict[str, Any]:
        return {"__key__": "new", "txt": b"t"}

    buffers = [io.BytesIO() for _ in range(3)]
    encoders = [upper, renamed, SampleEncoder(jpeg_quality=95)]
    for buffer, encoder in zip(buffers, encoders, strict=True):
        with TarWriter(buffer, encoder=encoder) as writer:
            writer.write({"__key__": "2", "txt": "t"})
    assert [members_of(buffer.getvalue()) for buffer in buffers] == [
        [("2.txt", b"T")],
        [("new.txt", b"t")],
        [("2.txt", b"t")],
    ]
    writer = TarWriter(io.BytesIO(), encoder=lambda sample: [b"x"])
    with writer, pytest.raises(EncodeError, match="returned a list"):
        writer.write({"__key__": "3", "txt": "t"})
    with pytest.raises(TypeError, match="encoder must be"):
        TarWriter(io.BytesIO(), encoder="yes")  # type: ignore[arg-type]


# --- Tar output -------------------------------------------------------------------------------

LONG_SPLIT = "split/" + "d" * 120 + "/" + "f" * 80  # over 100 bytes, fits prefix + name
LONG_PAX = "very/" + "/".join(c * 90 for c in "uvw") + "/s"  # over 255 bytes
NON_ASCII = "données/échantillon"

TOOL_SAMPLES: list[dict[str, Any]] = [
    {"__key__": "0001", "txt": "hello", "cls": 1, "json": [1]},
    {"__key__": LONG_SPLIT, "txt": "split"},
    {"__key__": LONG_PAX, "txt": "pax"},
    {"__key__": NON_ASCII, "txt": "utf-8", "seg.txt": "seg"},
    {"__key__": "big", "bin": bytes(range(256)) * 1000 + b"tail"},  # 256004 bytes
    {"__key__": "d" * 100, "txt": "name of 104 bytes, no slash: PAX"},
]


def tool_members() -> list[tuple[str, bytes]]:
    return [
        (f"{sample['__key__']}.{field}", data)
        for sample in TOOL_SAMPLES
        for field, data in SampleEncoder()(sample)
    ]


@pytest.fixture
def tool_tar(tmp_path: Path) -> Path:
    return write_tar(tmp_path / "tools.tar", TOOL_SAMPLES)


def run(args: list[str], cwd: Path | None = None) -> bytes:
    env = {**os.environ, "LC_ALL": "C.UTF-8"}
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, check=False)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert not result.stderr, result.stderr.decode(errors="replace")
    return result.stdout


@pytest.mark.parametrize("tool", ["tar", "bsdtar"])
def test_tar_tools_list_and_extract(tool_tar: Path, tmp_path: Path, tool: str) -> None:
    program = shardgen.require_tool(tool)
    members = tool_members()
    listed = run([program, "-tf", str(tool_tar)]).decode().splitlines()
    assert listed == [name for name, _ in members]
    verbose = run([program, "-tvf", str(tool_tar)]).decode()
    assert "256004" in verbose and "-rw-r--r--" in verbose
    assert run([program, "-xOf", str(tool_tar), NON_ASCII + ".seg.txt"]) == b"seg"
    out = tmp_path / f"out-{tool}"
    out.mkdir()
    run([program, "-xf", str(tool_tar), "-C", str(out)])
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == sorted(name for name, _ in members)
    for name, data in members:
        assert (out / name).read_bytes() == data, name


def test_tarfile_and_readers_agree(tool_tar: Path) -> None:
    members = tool_members()
    with tarfile.open(tool_tar) as archive:
        infos = archive.getmembers()
        assert [(i.name, archive.extractfile(i).read()) for i in infos] == members  # type: ignore[union-attr]
        assert {(i.mode, i.uid, i.gid, i.uname, i.gname, i.mtime) for i in infos} == {
            (0o644, 0, 0, "", "", 0)
        }
        kinds = {i.name: header_kind(tool_tar, i) for i in infos}
    ours = [(m.name, m.data) for m in iter_tar(io.BytesIO(tool_tar.read_bytes()), "t")]
    assert ours == members
    assert_raw_samples_match_webdataset(str(tool_tar))
    assert kinds == {
        "0001.cls": "ustar",
        "0001.json": "ustar",
        "0001.txt": "ustar",
        LONG_SPLIT + ".txt": "ustar+prefix",
        LONG_PAX + ".txt": "pax",
        NON_ASCII + ".seg.txt": "pax",
        NON_ASCII + ".txt": "pax",
        "big.bin": "ustar",
        "d" * 100 + ".txt": "pax",
    }


def header_kind(path: Path, info: tarfile.TarInfo) -> str:
    """How a member's name is stored: in one ustar header, with its prefix field, or PAX."""
    data = path.read_bytes()
    header = data[info.offset_data - BLOCK : info.offset_data]
    assert header[257:265] == b"ustar\x0000" and header[156:157] == b"0"
    if info.offset_data - info.offset == BLOCK:
        assert not info.pax_headers
        return "ustar+prefix" if header[345] else "ustar"
    assert info.offset_data - info.offset == 3 * BLOCK  # x header, one block of records
    assert data[info.offset + 156 : info.offset + 157] == b"x"
    assert set(info.pax_headers) == {"path"}
    return "pax"


def test_names_that_are_not_utf8_round_trip() -> None:
    """A key read from a name that is not UTF-8 (surrogate escapes) is written back as the
    same bytes, with a PAX ``hdrcharset=BINARY`` record."""
    key = "caf\udce9/x"  # the Latin-1 name b"caf\xe9/x", as readers decode it
    buffer = io.BytesIO()
    with TarWriter(buffer) as writer:
        writer.write({"__key__": key, "txt": "t"})
    data = buffer.getvalue()
    assert b"hdrcharset=BINARY\n" in data and b"path=caf\xe9/x.txt\n" in data
    assert members_of(data) == [(key + ".txt", b"t")]
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        assert archive.getnames() == [key + ".txt"]


class Sized(bytes):
    """Bytes claiming a length of 8 GiB: to build a header, not to write one."""

    def __len__(self) -> int:
        return 8 << 30


def test_size_of_8_gib_takes_a_pax_record_and_base_256() -> None:
    header = member_blocks("huge.bin", Sized(), 0)[0]
    assert len(header) == 3 * BLOCK
    assert header[BLOCK : BLOCK + 20].startswith(b"19 size=8589934592\n\0")
    assert header[2 * BLOCK + 124] == 0x80  # the ustar size field in base-256
    with tarfile.open(fileobj=io.BytesIO(header)) as archive:
        info = archive.next()
    assert info is not None and (info.name, info.size) == ("huge.bin", 8 << 30)
    with pytest.raises(TruncatedShardError, match="after 0 of 8589934592 bytes"):
        list(iter_tar(io.BytesIO(header), "huge.tar", max_member_size=8 << 30))


def test_compact_headers_against_webdataset(tmp_path: Path) -> None:
    """One tiny member: a header block, a data block, the end marker, padding to a record.
    webdataset's default (a float mtime) puts a PAX header of 2 blocks before every member."""
    one = write_tar(tmp_path / "one.tar", [{"__key__": "0", "cls": 1}]).read_bytes()
    assert len(one) == RECORD and one[2 * BLOCK :] == bytes(RECORD - 2 * BLOCK)
    assert one[:BLOCK].rstrip(b"\0").startswith(b"0.cls")

    samples = [{"__key__": f"{i:05d}", "cls": i, "txt": f"label {i}"} for i in range(100)]
    ours = write_tar(tmp_path / "ours.tar", samples)
    theirs = tmp_path / "theirs.tar"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with wdsref.TarWriter(str(theirs)) as writer:
            for sample in samples:
                writer.write(sample)
    ours_used, theirs_used = used_bytes(ours.read_bytes()), used_bytes(theirs.read_bytes())
    assert ours_used == 200 * 2 * BLOCK
    assert theirs_used == 200 * 4 * BLOCK  # the ratio docs/guide/writing.md records: 1/2
    assert raw(str(ours))[5]["txt"] == raw(str(theirs))[5]["txt"] == b"label 5"


def used_bytes(archive: bytes) -> int:
    """The bytes before the end-of-archive marker."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        last = tar.getmembers()[-1]
    return last.offset_data + last.size + (-last.size % BLOCK)


@pytest.mark.parametrize("compress", [None, "gz", "xz"], ids=str)
def test_reproducible(tmp_path: Path, compress: str | None) -> None:
    samples = [rich_sample(index) for index in range(2)] + TOOL_SAMPLES
    first = write_tar(tmp_path / "a", samples, compress=compress).read_bytes()
    second = write_tar(tmp_path / "b", samples, compress=compress).read_bytes()
    assert first == second
    dated = write_tar(tmp_path / "c", samples, compress=compress, mtime=1_700_000_000.7)
    assert dated.read_bytes() != first
    with tarfile.open(dated) as archive:
        assert {info.mtime for info in archive} == {1_700_000_000}
    if compress == "gz":
        # no file name (FLG 0), mtime 0, no extra flags, OS unknown
        assert first[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
        assert dated.read_bytes()[:10] == first[:10]


def test_writer_arguments_and_closing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="compress must be one of"):
        TarWriter(tmp_path / "x.tar", compress="lz4")
    with pytest.raises(ValueError, match="mtime must be in"):
        TarWriter(tmp_path / "x.tar", mtime=-1)
    assert not (tmp_path / "x.tar").exists()
    monkeypatch.setitem(sys.modules, "zstandard", None)
    with pytest.raises(ImportError, match=re.escape("pip install 'wdspipes[zstd]'")):
        TarWriter(tmp_path / "x.tar", compress="zst")

    writer = TarWriter(str(tmp_path / "y.tar"))
    writer.write({"__key__": "0", "txt": "x"})
    writer.close()
    writer.close()
    assert writer._stream.closed
    with pytest.raises(ValueError, match="closed"):
        writer.write({"__key__": "1", "txt": "x"})
    assert len(raw(str(tmp_path / "y.tar"))) == 1


def test_add_member(tmp_path: Path) -> None:
    path = tmp_path / "files.tar"
    with TarWriter(path) as writer:
        assert writer.add_member("dir/README", b"no key here") == 2 * BLOCK
        writer.add_member("dir/" + "é" * 200, b"long")
        with pytest.raises(ValueError, match="NUL"):
            writer.add_member("a\0b", b"")
    assert writer.count == 0
    with tarfile.open(path) as archive:
        assert archive.getnames() == ["dir/README", "dir/" + "é" * 200]


# --- ShardWriter ------------------------------------------------------------------------------


def numbered(count: int, size: int = 10) -> list[dict[str, Any]]:
    return [{"__key__": f"{i:05d}", "bin": bytes([i % 256]) * size} for i in range(count)]


def keys_per_shard(paths: list[str]) -> list[list[str]]:
    return [[sample["__key__"] for sample in raw(path)] for path in paths]


def test_shards_roll_over_by_count(tmp_path: Path) -> None:
    posted: list[str] = []
    pattern = str(tmp_path / "new" / "dirs" / "train-%06d.tar")
    with ShardWriter(pattern, maxcount=3, post=posted.append, start_shard=5) as writer:
        for sample in numbered(10):
            writer.write(sample)
    assert writer.count == 10
    assert writer.shards == posted == [pattern % n for n in range(5, 9)]
    assert keys_per_shard(writer.shards) == [
        ["00000", "00001", "00002"],
        ["00003", "00004", "00005"],
        ["00006", "00007", "00008"],
        ["00009"],
    ]
    assert sorted(os.listdir(tmp_path / "new" / "dirs")) == [Path(p).name for p in posted]


def test_shards_roll_over_by_size(tmp_path: Path) -> None:
    # A sample: a 512-byte header and 4096 bytes of data. Four make 18432 bytes, with the end
    # marker 19456, padded to 20480. Five would pad to 30720, over the limit; so would six, at
    # 28672 bytes before the padding, were the padding not counted.
    maxsize = 3 * RECORD - 1000
    samples = numbered(20, size=4096)
    samples.insert(7, {"__key__": "00006-huge", "bin": bytes(5 * RECORD)})
    with ShardWriter(str(tmp_path / "s-%d.tar"), maxcount=100, maxsize=maxsize) as writer:
        for sample in samples:
            writer.write(sample)
    sizes = [os.path.getsize(path) for path in writer.shards]
    keys = keys_per_shard(writer.shards)
    assert [len(shard) for shard in keys] == [4, 3, 1, 4, 4, 4, 1]
    assert keys[2] == ["00006-huge"]
    assert sizes == [2 * RECORD, 2 * RECORD, 6 * RECORD, 2 * RECORD, 2 * RECORD, 2 * RECORD, RECORD]
    assert [key for shard in keys for key in shard] == [sample["__key__"] for sample in samples]


@pytest.mark.parametrize("compress", ["gz", "zst"])
def test_compressed_shards_roll_over_by_size(tmp_path: Path, compress: str) -> None:
    rng = np.random.default_rng(0)
    samples = [{"__key__": f"{i:04d}", "bin": rng.bytes(20_000)} for i in range(40)]
    pattern = str(tmp_path / f"c-%03d{SUFFIX[compress]}")
    with ShardWriter(pattern, maxsize=200_000, compress=compress) as writer:
        for sample in samples:
            writer.write(sample)
    assert len(writer.shards) >= 4
    # approximate: the compressor holds back up to a block of output
    assert all(os.path.getsize(path) < 200_000 + 150_000 for path in writer.shards)
    got = [sample for path in writer.shards for sample in raw(path)]
    assert [(s["__key__"], s["bin"]) for s in got] == [(s["__key__"], s["bin"]) for s in samples]


@pytest.mark.parametrize("pattern", ["out.tar", "%d-%d.tar", "%s.tar", "%(n)d.tar", "%*d", "%"])
def test_bad_patterns(tmp_path: Path, pattern: str) -> None:
    with pytest.raises(ValueError, match="exactly one integer placeholder"):
        ShardWriter(str(tmp_path / pattern))


def test_shard_writer_arguments_and_closing(tmp_path: Path) -> None:
    for bad in [{"maxcount": 0}, {"maxsize": 0}, {"start_shard": -1}, {"compress": "lz4"}]:
        with pytest.raises(ValueError):
            ShardWriter(str(tmp_path / "%d.tar"), **bad)
    writer = ShardWriter(str(tmp_path / "100%%-%x.tar"), maxcount=1)
    writer.close()
    assert os.listdir(tmp_path) == [] and writer.shards == []
    writer = ShardWriter(str(tmp_path / "100%%-%x.tar"), maxcount=1, start_shard=10)
    writer.write({"__key__": "k", "txt": "t"})
    writer.close()
    writer.close()
    assert writer.shards == [str(tmp_path / "100%-a.tar")]
    with pytest.raises(ValueError, match="closed"):
        writer.write({"__key__": "k", "txt": "t"})


def shard_files(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


@pytest.mark.parametrize("failure", ["raised", "unencodable"])
def test_exception_leaves_only_complete_shards(tmp_path: Path, failure: str) -> None:
    posted: list[str] = []
    writer = ShardWriter(str(tmp_path / "p-%02d.tar"), maxcount=3, post=posted.append)
    with pytest.raises(RuntimeError if failure == "raised" else EncodeError), writer:
        for sample in numbered(7):
            writer.write(sample)
        if failure == "raised":
            raise RuntimeError("mid-shard")
        writer.write({"__key__": "bad", "npy": "not an array"})
    assert shard_files(tmp_path) == ["p-00.tar", "p-01.tar"]
    assert writer.shards == posted == [str(tmp_path / "p-00.tar"), str(tmp_path / "p-01.tar")]
    assert keys_per_shard(posted) == [["00000", "00001", "00002"], ["00003", "00004", "00005"]]
    writer.close()  # closed already: nothing happens
    assert shard_files(tmp_path) == ["p-00.tar", "p-01.tar"]


KILLED_WRITER = """
import sys, time
from wdspipes.write import ShardWriter

writer = ShardWriter(sys.argv[1], maxcount=10)
for index in range(25):  # shards 0 and 1 finished, shard 2 half written
    writer.write({"__key__": f"{index:05d}", "bin": bytes([index]) * 20_000})
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_killed_writer_leaves_no_truncated_shard(tmp_path: Path) -> None:
    pattern = str(tmp_path / "k-%06d.tar")
    shardgen.kill_when_ready(KILLED_WRITER, pattern)
    final = [name for name in shard_files(tmp_path) if re.fullmatch(r"k-\d{6}\.tar", name)]
    assert final == ["k-000000.tar", "k-000001.tar"]
    assert [len(keys) for keys in keys_per_shard([str(tmp_path / n) for n in final])] == [10, 10]
    (partial,) = set(shard_files(tmp_path)) - set(final)
    assert re.fullmatch(r"\.k-000002\.tar\.partial-[a-z0-9]{8}", partial)
    assert (tmp_path / partial).stat().st_size > 0
    leftover = wds.SimpleShardList(str(tmp_path / partial))
    with pytest.raises(TruncatedShardError):  # cut short, or at a member's end: no marker
        list(wds.DataPipeline(leftover, wds.tarfile_to_samples(strict_end=True)))


# --- Writing to URLs --------------------------------------------------------------------------
# The writers take the URLs the readers take (wdspipes/io/sinks.py has each scheme).


@pytest.fixture
def memory() -> Any:
    import fsspec

    fs = fsspec.filesystem("memory")
    yield fs
    if fs.exists("/wds-writers"):
        fs.rm("/wds-writers", recursive=True)


def tar_targets(directory: Path) -> dict[str, str]:
    out = directory / "out.tar"
    return {
        "path": str(out),
        "file: URL": out.as_uri(),
        "pipe:": f"pipe:cat > '{out}'",
        "memory://": "memory://wds-writers/out.tar",
    }


@pytest.mark.parametrize("target", ["path", "file: URL", "pipe:", "memory://"])
def test_tar_writer_writes_to_urls(target: str, tmp_path: Path, memory: Any) -> None:
    url = tar_targets(tmp_path)[target]
    samples = numbered(5)
    with TarWriter(url) as writer:
        for sample in samples:
            writer.write(sample)
    read_from = url if target == "memory://" else str(tmp_path / "out.tar")
    assert [(s["__key__"], s["bin"]) for s in raw(read_from)] == [
        (s["__key__"], s["bin"]) for s in samples
    ]


@pytest.mark.parametrize("target", ["path", "memory://"])
def test_tar_writer_exception_leaves_nothing_under_the_url(
    target: str, tmp_path: Path, memory: Any
) -> None:
    url = tar_targets(tmp_path)[target]
    with pytest.raises(RuntimeError, match="mid-archive"), TarWriter(url) as writer:
        writer.write({"__key__": "0", "txt": "x"})
        raise RuntimeError("mid-archive")
    assert writer.count == 1
    assert not (tmp_path / "out.tar").exists() and not memory.exists("/wds-writers/out.tar")
    assert os.listdir(tmp_path) == [] and memory.find("/wds-writers") == []
    writer.close()  # aborted already: nothing happens


def test_tar_writer_on_a_stream_still_closes_on_an_exception() -> None:
    buffer = io.BytesIO()
    with pytest.raises(RuntimeError), TarWriter(buffer) as writer:
        writer.write({"__key__": "0", "txt": "x"})
        raise RuntimeError
    assert [m.name for m in iter_tar(io.BytesIO(buffer.getvalue()), "mem")] == ["0.txt"]
    aborted = io.BytesIO()
    writer = TarWriter(aborted)
    writer.write({"__key__": "0", "txt": "x"})
    writer.abort()
    assert len(aborted.getvalue()) == 2 * BLOCK  # no end marker: a reader sees the cut
    writer.close()


def test_tar_writer_failing_command_is_an_error(tmp_path: Path) -> None:
    url = f"pipe:cat > '{tmp_path / 'out.tar'}'; exit 4"
    writer = TarWriter(url)
    writer.write({"__key__": "0", "txt": "x"})
    with pytest.raises(wds.CommandError, match="command exited with status 4") as caught:
        writer.close()
    assert (caught.value.status, caught.value.url) == (4, url)


def test_webdataset_and_wdspipes_tar_writers_through_a_command(tmp_path: Path) -> None:
    # the URL webdataset users write; both archives read back alike by both readers
    samples = [{"__key__": f"{i:03d}", "txt": f"text {i}", "cls": i} for i in range(4)]
    for name, module in [("theirs", wdsref), ("ours", wds)]:
        with module.TarWriter(f"pipe:cat > '{tmp_path / name}.tar'") as writer:
            for sample in samples:
                writer.write(sample)
    for name in ("theirs", "ours"):
        url = str(tmp_path / f"{name}.tar")
        got = [(s["__key__"], s["txt"], s["cls"]) for s in raw(url)]
        assert got == [(f"{i:03d}", f"text {i}".encode(), str(i).encode()) for i in range(4)]
        assert raw_by_webdataset(url) == raw(url)


def test_shard_writer_to_a_store_lists_its_urls(memory: Any) -> None:
    pattern = "memory://wds-writers/train-%03d.tar"
    posted: list[str] = []
    with ShardWriter(pattern, maxcount=2, post=posted.append) as writer:
        for sample in numbered(5):
            writer.write(sample)
    urls = [pattern % n for n in range(3)]
    assert writer.shards == posted == urls
    assert memory.ls("/wds-writers", detail=False) == [
        f"/wds-writers/train-00{n}.tar" for n in range(3)
    ]
    assert [s["__key__"] for s in raw(urls)] == [f"{i:05d}" for i in range(5)]
    assert {s["__url__"] for s in raw(urls)} == set(urls)


def test_shard_writer_exception_leaves_only_complete_objects(memory: Any) -> None:
    with pytest.raises(RuntimeError), ShardWriter("memory://wds-writers/p-%d.tar", maxcount=2) as w:
        for sample in numbered(3):
            w.write(sample)
        raise RuntimeError("mid-shard")
    assert w.shards == ["memory://wds-writers/p-0.tar"]
    assert memory.ls("/wds-writers", detail=False) == ["/wds-writers/p-0.tar"]


def test_shard_writer_through_commands(tmp_path: Path) -> None:
    pattern = f"pipe:gzip -n > '{tmp_path}/c-%02d.tar.gz'"
    with ShardWriter(pattern, maxcount=3) as writer:
        for sample in numbered(7):
            writer.write(sample)
    assert writer.shards == [pattern % n for n in range(3)]
    files = [str(tmp_path / f"c-{n:02d}.tar.gz") for n in range(3)]
    assert sorted(os.listdir(tmp_path)) == [Path(f).name for f in files]
    assert [s["__key__"] for s in raw(files)] == [f"{i:05d}" for i in range(7)]


def test_shard_writer_with_a_failing_command_names_it(tmp_path: Path) -> None:
    writer = ShardWriter("pipe:cat > /dev/null; exit 5 # %d", maxcount=1)
    writer.write({"__key__": "a", "txt": "x"})
    with pytest.raises(wds.CommandError, match=r"pipe:cat > /dev/null; exit 5 # 0: .* status 5"):
        writer.write({"__key__": "b", "txt": "x"})  # finishes shard 0 first
    assert writer.shards == []


def test_shard_writer_unknown_scheme_writes_no_local_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    writer = ShardWriter("nosuch://bucket/x-%06d.tar")
    with pytest.raises(ValueError, match=r"nosuch://bucket/x-000000\.tar: cannot write: unknown"):
        writer.write({"__key__": "a", "txt": "x"})
    writer.close()
    assert os.listdir(tmp_path) == [] and writer.shards == []


KILLED_TAR_WRITER = """
import sys, time
from wdspipes.write import TarWriter

writer = TarWriter(sys.argv[1])
for index in range(25):
    writer.write({"__key__": f"{index:05d}", "bin": bytes([index]) * 20_000})
writer._stream.flush()
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_killed_tar_writer_leaves_nothing_under_its_name(tmp_path: Path) -> None:
    path = tmp_path / "k.tar"
    shardgen.kill_when_ready(KILLED_TAR_WRITER, str(path))
    (partial,) = os.listdir(tmp_path)
    assert re.fullmatch(r"\.k\.tar\.partial-[a-z0-9]{8}", partial)
    assert (tmp_path / partial).stat().st_size >= 25 * 20_000


# A .ten field written, and read back by the basic decoder, in a new process that is the
# command's (launched as its console script launches it, where importing wdspipes loads no
# torch): numpy arrays need no torch, and the process says whether it was loaded.
TENBIN_WITHOUT_TORCH = """
import io, sys
import wdspipes_command
import numpy as np
from wdspipes.samples.decoders.basic import BasicDecoder
from wdspipes.write import TarWriter

arrays = [np.arange(6, dtype="int16").reshape(2, 3)]
if sys.argv[1] == "write":
    with TarWriter(io.BytesIO()) as writer:
        writer.write({"__key__": "a", "x.ten": arrays})
else:
    from wdspipes.samples.decoders.tenbin import encode_buffer
    (read,) = BasicDecoder()("x.ten", encode_buffer(arrays))
    assert read.tolist() == arrays[0].tolist()
print("torch loaded" if "torch" in sys.modules else "no torch")
"""


@pytest.mark.slow
@pytest.mark.parametrize("step", ["write", "decode"])
def test_a_tenbin_field_is_written_and_decoded_without_torch(step: str) -> None:
    command = [sys.executable, "-c", TENBIN_WITHOUT_TORCH, step]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["no", "torch"], done.stdout

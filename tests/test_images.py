"""Image decoding through libjpeg-turbo, and at reduced size (``wdspipes.samples.decoders.images``,
``jpeg`` and ``geometry``).

Fast path: for JPEGs from several encoders and settings (Pillow with every subsampling,
grey, progressive, optimised and CMYK; TurboJPEG's 4:4:0 and 4:1:1; libjpeg-turbo's ``cjpeg``
with arithmetic coding, restart markers, RGB colour space, a subsampling TurboJPEG cannot
name, ...) at odd, tiny and larger sizes, every image spec gives what Pillow gives for the
same bytes: kind, dtype, shape, layout, and pixels within one level on average. What
simplejpeg cannot decode goes to Pillow (CMYK, data it refuses, no simplejpeg at all); damaged
data is a ``DecodeError`` naming URL, key and field, and a few hundred damaged JPEGs decoded
in a child process never crash it.

Reduced size: ``resize=`` and ``crop=`` give the size of decoding in full then resizing, with
close pixels (the same pixels for formats decoded in full); JPEGs are decoded at the smallest
DCT scale that suffices. A crop depends on the seed, the epoch and the sample, not on the
order samples come in, differs between workers, and a resumed epoch crops the same.
"""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import simplejpeg
import torch
from PIL import Image
from shardgen import require_tool
from test_decoders import SPECS
from torch.utils.data import IterDataPipe
from torch.utils.data.datapipes.iter import IterableWrapper
from torch.utils.data.graph_settings import apply_sharding
from torchdata.stateful_dataloader import StatefulDataLoader

import wdspipes as wds
from wdspipes.samples.decoders import jpeg

FAST_SPECS = [spec for spec, (library, _, _) in SPECS.items() if library != "pil"]

# --- Images and encoders --------------------------------------------------------------------------


def photo(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A reproducible photo-like RGB image: gradients, waves, hard edges and a little noise."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    red = 40 + 170 * x / max(width - 1, 1)
    green = 128 + 90 * np.sin(x / 11.0 + seed) * np.cos(y / 17.0)
    blue = 220 - 150 * y / max(height - 1, 1)
    pixels = np.stack([red, green, blue], axis=-1)
    pixels[((x // 24 + y // 24) % 2 == 0)] *= 0.7  # squares with sharp edges
    noise = np.random.default_rng(seed).normal(0, 4, pixels.shape)
    return np.clip(pixels + noise, 0, 255).astype(np.uint8)


def pillow_jpeg(pixels: np.ndarray, mode: str = "RGB", **params: Any) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buffer, format="JPEG", **params)
    return buffer.getvalue()


def png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def turbojpeg(pixels: np.ndarray, subsampling: str) -> bytes:
    """Encoded by TurboJPEG's API (simplejpeg), which writes subsamplings Pillow cannot."""
    return bytes(simplejpeg.encode_jpeg(pixels, 90, "RGB", subsampling))


def cjpeg(pixels: np.ndarray, *options: str) -> bytes:
    """Encoded by libjpeg-turbo's ``cjpeg`` command (Debian: libjpeg-turbo-progs)."""
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PPM")
    command = [require_tool("cjpeg"), *options]
    return subprocess.run(command, input=buffer.getvalue(), capture_output=True, check=True).stdout


ENCODERS: dict[str, Callable[[np.ndarray], bytes]] = {
    "pillow-444": lambda p: pillow_jpeg(p, quality=90, subsampling=0),
    "pillow-422": lambda p: pillow_jpeg(p, quality=85, subsampling=1),
    "pillow-420": lambda p: pillow_jpeg(p, quality=75, subsampling=2),
    "pillow-grey": lambda p: pillow_jpeg(p, "L", quality=90),
    "pillow-progressive": lambda p: pillow_jpeg(p, quality=85, progressive=True),
    "pillow-optimize": lambda p: pillow_jpeg(p, quality=95, optimize=True),
    "pillow-cmyk": lambda p: pillow_jpeg(p, "CMYK", quality=90),
    "turbojpeg-440": lambda p: turbojpeg(p, "440"),
    "turbojpeg-411": lambda p: turbojpeg(p, "411"),
    "cjpeg-default": lambda p: cjpeg(p),
    "cjpeg-q95-444": lambda p: cjpeg(p, "-quality", "95", "-sample", "1x1"),
    "cjpeg-grey": lambda p: cjpeg(p, "-grayscale"),
    "cjpeg-rgb-colourspace": lambda p: cjpeg(p, "-rgb"),
    "cjpeg-progressive": lambda p: cjpeg(p, "-progressive", "-optimize"),
    "cjpeg-arithmetic": lambda p: cjpeg(p, "-arithmetic"),
    "cjpeg-restart": lambda p: cjpeg(p, "-restart", "1", "-quality", "60"),
    "cjpeg-float-dct-smooth": lambda p: cjpeg(p, "-dct", "float", "-smooth", "20"),
    "cjpeg-4x2": lambda p: cjpeg(p, "-sample", "4x2"),
}
PILLOW_ONLY = {"pillow-cmyk", "cjpeg-4x2"}  # CMYK; a subsampling TurboJPEG cannot read
SIZES = [(1, 1), (8, 8), (17, 3), (257, 131), (640, 480)]  # width, height


def pillow_decode(spec: str, data: bytes, size: tuple[int, int] | None = None) -> Any:
    """What the spec gives by Pillow alone: the image in the spec's mode, resized to ``size``
    (width, height) with Pillow's bilinear filter if given."""
    image = Image.open(io.BytesIO(data)).convert(SPECS[spec][2])
    if size is not None:
        image = image.resize(size, Image.Resampling.BILINEAR)
    return as_spec(spec, image)


def as_spec(spec: str, image: Image.Image) -> Any:
    """A Pillow image of the spec's mode, as the spec's kind of value."""
    library, element, _ = SPECS[spec]
    if library == "pil":
        return image
    pixels = np.array(image)
    if element in (np.float32, torch.float32):
        pixels = pixels.astype(np.float32) / np.float32(255)
    if library == "numpy":
        return pixels
    return torch.from_numpy(
        np.ascontiguousarray(np.moveaxis(pixels, -1, 0) if pixels.ndim == 3 else pixels)
    )


def levels_apart(ours: Any, reference: Any) -> float:
    """The mean absolute difference in grey levels (0 to 255), after checking that both are the
    same kind of value with the same dtype, shape and (for ours) a contiguous, writable layout."""
    if isinstance(reference, Image.Image):
        assert isinstance(ours, Image.Image), type(ours)
        assert (ours.mode, ours.size) == (reference.mode, reference.size)
        ours, reference = np.asarray(ours), np.asarray(reference)
    elif isinstance(reference, torch.Tensor):
        assert isinstance(ours, torch.Tensor), type(ours)
        assert (ours.dtype, ours.shape) == (reference.dtype, reference.shape)
        assert ours.is_contiguous()
        ours, reference = ours.numpy(), reference.numpy()
    else:
        assert type(ours) is np.ndarray, type(ours)
        assert (ours.dtype, ours.shape) == (reference.dtype, reference.shape)
        assert ours.flags.c_contiguous and ours.flags.writeable
    scale = 255.0 if reference.dtype == np.float32 else 1.0
    return float(np.abs(ours.astype(np.float64) - reference.astype(np.float64)).mean() * scale)


@pytest.fixture
def decoded_by_simplejpeg(monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray]:
    """The arrays simplejpeg returns from here on, in order."""
    arrays: list[np.ndarray] = []
    original = simplejpeg.decode_jpeg

    def spy(*args: Any, **kwargs: Any) -> np.ndarray:
        array: np.ndarray = original(*args, **kwargs)
        arrays.append(array)
        return array

    monkeypatch.setattr(simplejpeg, "decode_jpeg", spy)
    return arrays


@pytest.fixture
def without_simplejpeg(monkeypatch: pytest.MonkeyPatch) -> None:
    """simplejpeg cannot be imported, as where it is not installed."""
    monkeypatch.setitem(sys.modules, "simplejpeg", None)
    monkeypatch.setattr(jpeg, "_library", jpeg._UNSET)


# --- Every spec gives Pillow's pixels -------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("encoder", list(ENCODERS))
def test_every_spec_gives_pillow_s_pixels(
    encoder: str, decoded_by_simplejpeg: list[np.ndarray]
) -> None:
    for width, height in SIZES:
        data = ENCODERS[encoder](photo(width, height))
        assert data[:3] == b"\xff\xd8\xff"
        for spec in SPECS:
            decoded_by_simplejpeg.clear()
            ours = wds.ImageDecoder(spec)(".jpg", data)
            apart = levels_apart(ours, pillow_decode(spec, data))
            assert apart <= 1.0, f"{encoder} {width}x{height} {spec}: {apart:.3f} levels apart"
            fast = SPECS[spec][0] != "pil" and encoder not in PILLOW_ONLY
            assert bool(decoded_by_simplejpeg) == fast, f"{encoder} {spec}: simplejpeg used?"


def test_uint8_results_are_the_decoded_buffer_itself(
    decoded_by_simplejpeg: list[np.ndarray],
) -> None:
    colour = pillow_jpeg(photo(64, 48), quality=90)
    grey = pillow_jpeg(photo(64, 48), "L", quality=90)
    rgb8 = wds.ImageDecoder("rgb8")(".jpg", colour)
    assert rgb8 is decoded_by_simplejpeg[-1] and rgb8.flags.writeable
    l8 = wds.ImageDecoder("l8")(".jpg", grey)
    assert l8.shape == (48, 64) and np.shares_memory(l8, decoded_by_simplejpeg[-1])
    torchl8 = wds.ImageDecoder("torchl8")(".jpg", grey)
    assert np.shares_memory(torchl8.numpy(), decoded_by_simplejpeg[-1])
    chw = wds.ImageDecoder("torchrgb8")(".jpg", colour)  # channels first: one copy, needed
    assert chw.is_contiguous() and chw.shape == (3, 48, 64)
    assert torch.equal(chw, torch.from_numpy(decoded_by_simplejpeg[-1]).permute(2, 0, 1))


def test_a_field_opens_only_in_the_formats_its_extension_names(
    decoded_by_simplejpeg: list[np.ndarray],
) -> None:
    pixels = photo(33, 21)
    as_png, as_jpeg = png(pixels), pillow_jpeg(pixels, quality=90)
    decoder = wds.ImageDecoder("rgb8")
    with pytest.raises(wds.ImageFormatError, match=r"a \.jpg field holds PNG data, not JPEG"):
        decoder(".jpg", as_png)
    with pytest.raises(wds.ImageFormatError, match=r"a \.png field holds JPEG data, not PNG"):
        decoder(".png", as_jpeg)
    assert not decoded_by_simplejpeg
    assert decoder(".bin", as_jpeg) is None, "not an image extension: left to other handlers"
    either = wds.ImageDecoder("rgb8", formats={"jpg": ("JPEG", "PNG"), "png": ("PNG", "JPEG")})
    assert np.array_equal(either(".jpg", as_png), pixels) and not decoded_by_simplejpeg
    assert levels_apart(either(".png", as_jpeg), pillow_decode("rgb8", as_jpeg)) == 0.0
    assert len(decoded_by_simplejpeg) == 1, "a JPEG where JPEG is allowed: libjpeg-turbo"


@pytest.mark.parametrize("spec", list(SPECS))
def test_without_simplejpeg_pillow_decodes_every_jpeg(without_simplejpeg: None, spec: str) -> None:
    for encoder in ("pillow-420", "pillow-grey", "pillow-cmyk"):
        data = ENCODERS[encoder](photo(57, 31))
        assert levels_apart(wds.ImageDecoder(spec)(".jpg", data), pillow_decode(spec, data)) == 0
        smaller = wds.ImageDecoder(spec, resize=(10, 20))(".jpg", data)
        assert levels_apart(smaller, pillow_decode(spec, data, (20, 10))) == 0
    assert jpeg._library is None


def extraneous_bytes(data: bytes) -> bytes:
    """The JPEG with two stray bytes before its scan: libjpeg warns, and decodes."""
    scan = data.index(b"\xff\xda")
    return data[:scan] + b"\x00\x00" + data[scan:]


def precision_12(data: bytes) -> bytes:
    """The JPEG with its frame header claiming 12-bit samples."""
    header = data.index(b"\xff\xc0")
    assert data[header + 4] == 8
    return data[: header + 4] + bytes([12]) + data[header + 5 :]


def test_what_simplejpeg_refuses_pillow_decodes() -> None:
    data = extraneous_bytes(pillow_jpeg(photo(40, 30), quality=90))
    with pytest.raises(ValueError, match="extraneous bytes"):
        simplejpeg.decode_jpeg(data)  # strict: a warning is an error
    for spec in SPECS:
        assert levels_apart(wds.ImageDecoder(spec)(".jpg", data), pillow_decode(spec, data)) == 0
    crop = wds.ImageDecoder("rgb8", crop=wds.RandomResizedCrop(8))(".jpg", data, random.Random(0))
    assert crop.shape == (8, 8, 3)


def test_cmyk_jpegs_go_to_pillow_whose_colours_differ(
    decoded_by_simplejpeg: list[np.ndarray],
) -> None:
    data = ENCODERS["pillow-cmyk"](photo(40, 30))
    assert simplejpeg.decode_jpeg_header(data)[2] == "CMYK"
    ours = wds.ImageDecoder("rgb8")(".jpg", data)
    assert not decoded_by_simplejpeg and levels_apart(ours, pillow_decode("rgb8", data)) == 0


DAMAGED = {
    "truncated": lambda data: data[: len(data) // 2],
    "12-bit": precision_12,
    "garbage after the marker": lambda data: b"\xff\xd8\xff" + bytes(range(256)) * 4,
    "not an image": lambda data: b"not an image at all",
}
DECODERS = {
    "rgb8": lambda: wds.ImageDecoder("rgb8"),
    "torchl": lambda: wds.ImageDecoder("torchl"),
    "pil": lambda: wds.ImageDecoder("pil"),
    "resize": lambda: wds.ImageDecoder("torchrgb", resize=16),
    "crop": lambda: wds.ImageDecoder("rgb8", crop=wds.RandomResizedCrop(8)),
}


@pytest.mark.parametrize("decoder", list(DECODERS))
@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_damaged_image_is_a_decode_error_that_handlers_skip(damage: str, decoder: str) -> None:
    good = pillow_jpeg(photo(40, 30), quality=90)
    samples = [
        {"__key__": key, "__url__": "s.tar", "jpg": data, "cls": b"1"}
        for key, data in [("a", good), ("b", DAMAGED[damage](good)), ("c", good)]
    ]
    with pytest.raises(wds.DecodeError, match=r"s\.tar, key 'b', field 'jpg'") as caught:
        list(IterableWrapper(samples).decode(DECODERS[decoder](), seed=0))
    assert (caught.value.url, caught.value.key, caught.value.field) == ("s.tar", "b", "jpg")
    assert isinstance(caught.value.__cause__, Exception)
    with pytest.warns(wds.DataWarning, match="key 'b'"):
        decoded = list(
            IterableWrapper(samples).decode(
                DECODERS[decoder](), seed=0, handler=wds.warn_and_continue
            )
        )
    assert [sample["__key__"] for sample in decoded] == ["a", "c"]


FUZZ_CHILD = r"""
import io, json, random, sys, warnings
import numpy as np, simplejpeg
from PIL import Image
from torch.utils.data.datapipes.iter import IterableWrapper
import wdspipes as wds

warnings.simplefilter("ignore")  # Pillow warns about some damaged data
rng = random.Random(int(sys.argv[1]))
pixels = np.random.default_rng(0).integers(0, 256, (8, 12, 3), dtype=np.uint8)
pixels = np.kron(pixels, np.ones((6, 6, 1), dtype=np.uint8))  # 48 x 72, blocky


def encoded(mode, **params):
    buffer = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buffer, format="JPEG", **params)
    return buffer.getvalue()


def damaged(data):
    scan = data.index(b"\xff\xda")
    for cut in sorted(rng.sample(range(1, len(data)), 40)):
        yield data[:cut]
    for _ in range(40):  # in the headers
        copy = bytearray(data)
        copy[rng.randrange(3, scan + 12)] = rng.randrange(256)
        yield bytes(copy)
    for _ in range(30):  # in the entropy-coded data
        copy = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            copy[rng.randrange(scan + 12, len(data))] = rng.randrange(256)
        yield bytes(copy)
    for _ in range(10):
        yield b"\xff\xd8\xff" + rng.randbytes(rng.randrange(0, 800))


def claimed_size(data):
    try:
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
        return int(width), int(height)
    except ValueError:
        return Image.open(io.BytesIO(data)).size


def grey_floats(value, width, height):
    return value.dtype.is_floating_point and value.shape == (height, width)


crop = wds.RandomResizedCrop((10, 14))
decoders = {  # name: (decoder, whether a value decoded from a (width, height) image is right)
    "rgb8": (wds.ImageDecoder("rgb8"), lambda v, w, h: (v.dtype, v.shape) == (np.uint8, (h, w, 3))),
    "torchl": (wds.ImageDecoder("torchl"), grey_floats),
    "pilrgba": (wds.ImageDecoder("pilrgba"), lambda v, w, h: (v.mode, v.size) == ("RGBA", (w, h))),
    "resize": (wds.ImageDecoder("torch", resize=(20, 30)), lambda v, w, h: v.shape == (3, 20, 30)),
    "crop": (wds.ImageDecoder("rgb8", crop=crop), lambda v, w, h: v.shape == (10, 14, 3)),
}
bases = [encoded("RGB", quality=90), encoded("RGB", progressive=True), encoded("L")]
inputs = [damaged_data for base in bases for damaged_data in damaged(base)]
counts = {"inputs": len(inputs), "decoded": 0, "refused": 0}
for number, data in enumerate(inputs):
    for name, (decoder, right) in decoders.items():
        sample = {"__key__": str(number), "__url__": "fuzz.tar", "jpg": data}
        try:
            (result,) = IterableWrapper([sample]).decode(decoder, seed=number)
        except wds.DecodeError as error:
            assert (error.url, error.key, error.field) == ("fuzz.tar", str(number), "jpg"), error
            counts["refused"] += 1
            continue
        value = result["jpg"]
        assert right(value, *claimed_size(data)), (number, name, getattr(value, "shape", value))
        counts["decoded"] += 1
print(json.dumps(counts))
"""


@pytest.mark.slow
def test_damaged_jpegs_never_crash_the_process(tmp_path: Path) -> None:
    """Truncations, byte changes in the headers and in the coded data, and garbage after the
    JPEG marker, through five decoders: each decodes to the right kind and shape, or is a
    DecodeError. In a child process, so that a crash fails the test rather than pytest."""
    result = subprocess.run(
        [sys.executable, "-c", FUZZ_CHILD, "15"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert result.returncode == 0, f"status {result.returncode}:\n{result.stderr[-3000:]}"
    counts = json.loads(result.stdout.splitlines()[-1])
    assert counts["inputs"] >= 300
    assert counts["decoded"] + counts["refused"] == 5 * counts["inputs"]
    assert counts["decoded"] > 0 and counts["refused"] > 0


# --- resize= --------------------------------------------------------------------------------------


def resized_size(width: int, height: int, size: int | tuple[int, int]) -> tuple[int, int]:
    """torchvision's Resize(size) output, as (width, height)."""
    if isinstance(size, tuple):
        return size[1], size[0]
    if width <= height:
        return size, int(size * height / width)
    return int(size * width / height), size


IMAGES: dict[str, Callable[[], bytes]] = {
    "jpeg-640x480": lambda: pillow_jpeg(photo(640, 480), quality=90),
    "grey-jpeg-257x131": lambda: pillow_jpeg(photo(257, 131, seed=1), "L", quality=85),
    "progressive-420-jpeg-131x257": lambda: pillow_jpeg(
        photo(131, 257, seed=2), quality=80, progressive=True
    ),
    "png-257x131": lambda: png(photo(257, 131, seed=3)),
}
RESIZES = [224, 100, 31, 1, 1000, (60, 80), (300, 20), (131, 257)]


def field_of(image: str) -> str:
    """The field an image of ``IMAGES`` is decoded as: one of its format."""
    return ".png" if image.startswith("png") else ".jpg"


@pytest.mark.slow
@pytest.mark.parametrize("image", list(IMAGES))
def test_resize_gives_the_size_and_close_pixels_of_resizing_in_full(image: str) -> None:
    data = IMAGES[image]()
    width, height = Image.open(io.BytesIO(data)).size
    for size in RESIZES:
        target = resized_size(width, height, size)
        for spec in SPECS:
            ours = wds.ImageDecoder(spec, resize=size)(field_of(image), data)
            if image == "jpeg-640x480" and size == (60, 80):
                # Decoded at 1/8, the size asked for: the decoder's own 8 x 8 averages, with no
                # filter after them (Pillow's bilinear filter reaches 16 pixels: 6 levels off).
                full = Image.open(io.BytesIO(data)).convert(SPECS[spec][2])
                reference = as_spec(spec, full.reduce(8))
            else:
                reference = pillow_decode(spec, data, target)
            apart = levels_apart(ours, reference)
            limit = 0.0 if image.startswith("png") else 2.0
            assert apart <= limit, f"{image} resize={size} {spec}: {apart:.3f} levels apart"


def dct_scale_of(decoded: np.ndarray, width: int, height: int) -> int:
    """The scale M (decoded at M/8) that gives ``decoded``'s size."""
    scales = [
        m for m in range(1, 9) if decoded.shape[:2] == (-(-height * m // 8), -(-width * m // 8))
    ]
    assert scales, decoded.shape
    return scales[-1]


FAST_SCALES = [1, 2, 4, 8]  # libjpeg-turbo's SIMD inverse DCTs: 3/8, 5/8, 6/8, 7/8 are slower


@pytest.mark.parametrize(
    ("size", "scale"),
    [((60, 80), 1), ((61, 80), 2), (100, 2), (224, 4), (240, 4), (241, 8), (300, 8), (1000, 8)],
)
def test_resize_decodes_jpeg_at_the_smallest_fast_scale_that_suffices(
    size: int | tuple[int, int], scale: int, decoded_by_simplejpeg: list[np.ndarray]
) -> None:
    data = IMAGES["jpeg-640x480"]()
    wds.ImageDecoder("rgb8", resize=size)(".jpg", data)
    (decoded,) = decoded_by_simplejpeg
    assert dct_scale_of(decoded, 640, 480) == scale
    out_width, out_height = resized_size(640, 480, size)
    assert decoded.shape[0] >= min(out_height, 480) and decoded.shape[1] >= min(out_width, 640)


# --- crop= and RandomResizedCrop ------------------------------------------------------------------


CROPS = {
    "default": wds.RandomResizedCrop(24),
    "rectangle-no-flip": wds.RandomResizedCrop((20, 36), flip=0.0),
    "small-parts": wds.RandomResizedCrop(64, scale=(0.01, 0.05), flip=1.0),
    "wide-ratios": wds.RandomResizedCrop((50, 30), scale=(0.5, 1.0), ratio=(0.2, 5.0)),
}


@pytest.mark.slow
@pytest.mark.parametrize("crop", list(CROPS))
@pytest.mark.parametrize("image", list(IMAGES))
def test_crop_matches_cropping_the_image_decoded_in_full(image: str, crop: str) -> None:
    data, transform = IMAGES[image](), CROPS[crop]
    for seed in range(12):
        for spec in ("rgb8", "torchl", "torchrgba8", "pil"):
            ours = wds.ImageDecoder(spec, crop=transform)(
                field_of(image), data, random.Random(seed)
            )
            full = Image.open(io.BytesIO(data)).convert(SPECS[spec][2])
            reference = as_spec(spec, transform.apply(full, random.Random(seed)))
            apart = levels_apart(ours, reference)
            limit = 0.0 if image.startswith("png") else 2.5
            assert apart <= limit, f"{image} {crop} seed {seed} {spec}: {apart:.3f} levels apart"


def test_apply_crops_arrays_and_pil_images_alike() -> None:
    pixels, transform = photo(90, 70), CROPS["default"]
    for seed in range(10):
        from_array = transform.apply(pixels, random.Random(seed))
        from_image = transform.apply(Image.fromarray(pixels), random.Random(seed))
        assert from_array.flags.c_contiguous and from_array.shape == (24, 24, 3)
        assert np.array_equal(from_array, np.asarray(from_image))
    grey = transform.apply(pixels[..., 0].copy(), random.Random(0))
    assert grey.shape == (24, 24) and grey.dtype == np.uint8


def test_flip_mirrors_the_same_part() -> None:
    data = IMAGES["jpeg-640x480"]()
    for seed in range(5):
        kept = wds.RandomResizedCrop((30, 40), flip=0.0)
        mirrored = wds.RandomResizedCrop((30, 40), flip=1.0)
        plain = wds.ImageDecoder("torchrgb8", crop=kept)(".jpg", data, random.Random(seed))
        flipped = wds.ImageDecoder("torchrgb8", crop=mirrored)(".jpg", data, random.Random(seed))
        assert flipped.is_contiguous() and torch.equal(flipped, plain.flip(-1))


def test_the_crop_box_is_torchvision_s() -> None:
    transform = wds.RandomResizedCrop(8, scale=(0.2, 0.6), ratio=(0.5, 2.0))
    areas, aspects = [], []
    for seed in range(400):
        left, top, right, bottom = transform.box(400, 300, random.Random(seed))
        assert 0 <= left < right <= 400 and 0 <= top < bottom <= 300
        areas.append((right - left) * (bottom - top) / (400 * 300))
        aspects.append((right - left) / (bottom - top))
    assert min(areas) > 0.19 and max(areas) < 0.61  # up to rounding of the sides
    assert min(aspects) > 0.48 and max(aspects) < 2.05
    assert np.mean(np.log(aspects)) == pytest.approx(0.0, abs=0.1)  # log-uniform ratios
    # No draw fits a 1000 x 10 strip: the centre, as wide as the largest ratio allows.
    assert wds.RandomResizedCrop(8).box(1000, 10, random.Random(0)) == (493, 0, 506, 10)
    assert wds.RandomResizedCrop(8).box(10, 1000, random.Random(0)) == (0, 493, 10, 506)
    whole = wds.RandomResizedCrop(8, scale=(1.0, 1.0), ratio=(0.1, 10.0))
    assert whole.box(200, 100, random.Random(3)) == (0, 0, 200, 100)


@pytest.mark.parametrize("seed", range(10))
def test_crop_decodes_jpeg_at_the_smallest_fast_scale_that_suffices(
    seed: int, decoded_by_simplejpeg: list[np.ndarray]
) -> None:
    transform = wds.RandomResizedCrop(56)
    wds.ImageDecoder("rgb8", crop=transform)(".jpg", IMAGES["jpeg-640x480"](), random.Random(seed))
    (decoded,) = decoded_by_simplejpeg
    scale = dct_scale_of(decoded, 640, 480)
    assert scale in FAST_SCALES
    left, top, right, bottom = transform.box(640, 480, random.Random(seed))
    side = min(right - left, bottom - top)
    assert side * scale / 8 >= 56
    smaller = FAST_SCALES[FAST_SCALES.index(scale) - 1] if scale > 1 else None
    assert smaller is None or side * smaller / 8 < 56


BAD_OPTIONS: list[tuple[Callable[[], Any], type[Exception], str]] = [
    (lambda: wds.ImageDecoder("rgb8", resize=0), ValueError, "resize must be"),
    (lambda: wds.ImageDecoder("rgb8", resize=(1, 2, 3)), ValueError, "resize must be"),
    (lambda: wds.ImageDecoder("rgb8", resize=2.5), ValueError, "resize must be"),  # type: ignore[arg-type]
    (
        lambda: wds.ImageDecoder("rgb8", resize=1, crop=wds.RandomResizedCrop(1)),
        ValueError,
        "not both",
    ),
    (lambda: wds.ImageDecoder("rgb8", crop=(3, 3)), TypeError, "crop must be"),  # type: ignore[arg-type]
    (lambda: wds.RandomResizedCrop(-1), ValueError, "size must be"),
    (lambda: wds.RandomResizedCrop(8, scale=(0.5, 0.1)), ValueError, "scale must be"),
    (lambda: wds.RandomResizedCrop(8, scale=(0.5, 1.5)), ValueError, "scale must be"),
    (lambda: wds.RandomResizedCrop(8, ratio=(0.0, 1.0)), ValueError, "ratio must be"),
    (lambda: wds.RandomResizedCrop(8, flip=2), ValueError, "flip must be"),
]


@pytest.mark.parametrize(("build", "error", "message"), BAD_OPTIONS)
def test_bad_options_are_refused_by_name(
    build: Callable[[], Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        build()


def test_repr_shows_the_options() -> None:
    assert repr(wds.ImageDecoder("rgb8", resize=(3, 4))) == "ImageDecoder('rgb8', resize=(3, 4))"
    crop = wds.ImageDecoder("torch", crop=wds.RandomResizedCrop(5, flip=0))
    assert repr(crop) == (
        "ImageDecoder('torch', crop=RandomResizedCrop((5, 5), scale=(0.08, 1.0), "
        "ratio=(0.75, 1.3333333333333333), flip=0.0))"
    )


# --- Seeding: the crop of a sample ----------------------------------------------------------------


def image_samples(count: int, url: str = "mem.tar") -> list[dict[str, Any]]:
    return [
        {"__key__": f"{index:03d}", "__url__": url, "jpg": pillow_jpeg(photo(48, 40, index))}
        for index in range(count)
    ]


CROPPER = wds.ImageDecoder("torchrgb8", crop=wds.RandomResizedCrop(12))


def crops(pipe: IterDataPipe[Any]) -> dict[str, list[int]]:
    """Each sample's crop, by key (a sample seen twice must crop alike)."""
    seen: dict[str, list[int]] = {}
    for sample in pipe:
        value = sample["jpg"].flatten().tolist()
        assert seen.setdefault(sample["__key__"], value) == value
    return seen


def test_a_crop_depends_on_the_seed_epoch_and_sample_not_the_order() -> None:
    samples = image_samples(12)
    forward = IterableWrapper(samples).decode(CROPPER, seed=3)
    backward = IterableWrapper(samples[::-1]).decode(CROPPER, seed=3)
    first = crops(forward)
    assert crops(backward) == first
    second = crops(forward)
    assert second != first and crops(backward) == second, "each epoch crops anew"
    assert crops(IterableWrapper(samples).decode(CROPPER, seed=4)) != first
    elsewhere = image_samples(12, url="other.tar")
    assert crops(IterableWrapper(elsewhere).decode(CROPPER, seed=3)) != first, "URL counts"


def test_fields_of_a_sample_of_one_size_crop_alike() -> None:
    samples = [{**sample, "seg.jpg": sample["jpg"]} for sample in image_samples(4)]
    for sample in IterableWrapper(samples).decode(CROPPER, seed=0):
        assert torch.equal(sample["jpg"], sample["seg.jpg"])


def test_loader_seeds_and_entropy() -> None:
    samples = image_samples(6)
    a, b = (IterableWrapper(samples).decode(CROPPER) for _ in range(2))
    a.set_seed(11)
    b.set_seed(11)
    assert crops(a) == crops(b)
    assert crops(IterableWrapper(samples).decode(CROPPER)) != crops(
        IterableWrapper(samples).decode(CROPPER)
    ), "no seed given: fresh entropy"


def test_readers_after_the_sharding_filter_crop_differently() -> None:
    doubled = [sample for sample in image_samples(8) for _ in range(2)]  # both readers see all
    by_reader = []
    for reader in range(2):
        pipe = IterableWrapper(doubled).sharding_filter().decode(CROPPER, seed=5)
        apply_sharding(pipe, 2, reader)
        by_reader.append(crops(pipe))
    assert by_reader[0].keys() == by_reader[1].keys()
    assert all(by_reader[0][key] != by_reader[1][key] for key in by_reader[0])


def test_a_decoder_without_random_handlers_needs_no_picklable_handlers() -> None:
    def local(key: str, data: bytes) -> Any:
        return None

    sample = image_samples(1)[0]
    assert next(iter(IterableWrapper([sample]).decode(local, "rgb8")))["jpg"].shape == (40, 48, 3)
    assert next(iter(IterableWrapper([sample]).decode(local, CROPPER)))["jpg"].shape == (3, 12, 12)


# --- Resume: the same crops -----------------------------------------------------------------------

SHARDS, PER_SHARD = 4, 20
EPOCH = SHARDS * PER_SHARD


@pytest.fixture(scope="module")
def image_urls(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = tmp_path_factory.mktemp("crops")
    for shard in range(SHARDS):
        with wds.TarWriter(str(directory / f"s-{shard}.tar")) as sink:
            for index in range(PER_SHARD):
                pixels = photo(40, 30, seed=shard * PER_SHARD + index)
                sink.write({"__key__": f"{shard}{index:03d}", "jpg": pillow_jpeg(pixels)})
    return f"{directory}/s-{{0..{SHARDS - 1}}}.tar"


def to_item(sample: dict[str, Any]) -> tuple[str, list[int]]:
    return sample["__key__"], sample["jpg"].flatten().tolist()


def decode_then_shuffle(urls: str) -> IterDataPipe[Any]:
    pipe = wds.WebDataset(urls, shardshuffle=True, seed=1).decode(CROPPER, seed=2)
    return pipe.buffer_shuffle(30, initial=10, seed=3).map_samples(to_item)


def shuffle_then_decode(urls: str) -> IterDataPipe[Any]:
    pipe = wds.WebDataset(urls, shardshuffle=True, seed=1).buffer_shuffle(30, seed=3)
    return pipe.decode(CROPPER, seed=2).map_samples(to_item)


def loader_run(
    pipe: IterDataPipe[Any], workers: int, stop: int | None = None
) -> tuple[list[Any], Any]:
    """Two epochs' items, or the items up to ``stop`` and the loader's state there."""
    loader = StatefulDataLoader(pipe, num_workers=workers, batch_size=None)
    items: list[Any] = []
    for _ in range(2):
        for item in loader:
            items.append(item)
            if len(items) == stop:
                return items, loader.state_dict()
    return items, None


@pytest.mark.loaders
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("build", [decode_then_shuffle, shuffle_then_decode])
def test_a_resumed_epoch_crops_the_same(
    image_urls: str, build: Callable[[str], IterDataPipe[Any]], workers: int
) -> None:
    expected, _ = loader_run(build(image_urls), workers)
    assert len(expected) == 2 * EPOCH and expected[:EPOCH] != expected[EPOCH:]
    for stop in (7, EPOCH - 1, EPOCH + 33):
        before, state = loader_run(build(image_urls), workers, stop=stop)
        after = resume_items(build(image_urls), workers, state, stop)
        assert before + after == expected, f"{build.__name__}, {workers} workers, after {stop}"


def loader_seeded(urls: str) -> IterDataPipe[Any]:
    """Crops seeded by the loader's seed (no ``seed=``), which differs from run to run."""
    pipe = wds.WebDataset(urls, shardshuffle=True, seed=1).decode(CROPPER)
    return pipe.buffer_shuffle(30, initial=10, seed=3).map_samples(to_item)


@pytest.mark.loaders
@pytest.mark.parametrize("workers", [0, 2])
def test_a_resumed_epoch_crops_the_same_with_the_loader_s_seed(
    image_urls: str, workers: int
) -> None:
    """The state holds the epoch's seed material: the resumed loader's own seed is not used
    until the next epoch."""
    torch.manual_seed(0)
    expected, _ = loader_run(loader_seeded(image_urls), workers, stop=EPOCH)
    for stop in (7, EPOCH - 1):
        torch.manual_seed(0)
        before, state = loader_run(loader_seeded(image_urls), workers, stop=stop)
        torch.manual_seed(stop)  # another seed for the resumed loader
        loader = StatefulDataLoader(loader_seeded(image_urls), num_workers=workers, batch_size=None)
        loader.load_state_dict(state)
        assert before + list(loader) == expected, f"{workers} workers, after {stop}"


def resume_items(pipe: IterDataPipe[Any], workers: int, state: Any, stop: int) -> list[Any]:
    """The items of the rest of the two epochs, from a new loader given ``state``."""
    loader = StatefulDataLoader(pipe, num_workers=workers, batch_size=None)
    loader.load_state_dict(state)
    items = list(loader)
    if stop < EPOCH:
        items += list(loader)
    return items


def test_a_for_loop_resumes_to_the_same_crops(image_urls: str) -> None:
    expected = list(decode_then_shuffle(image_urls))
    for stop in (1, 25, EPOCH - 1):
        pipe = decode_then_shuffle(image_urls)
        items = iter(pipe)
        first = [next(items) for _ in range(stop)]
        again = decode_then_shuffle(image_urls)
        again.load_state_dict(pipe.state_dict())
        assert first + list(again) == expected


@pytest.mark.parametrize("spec", ["rgb8", "pil", "torchrgb"])
@pytest.mark.parametrize(
    ("field", "encode"), [("jpg", lambda p: pillow_jpeg(p)), ("png", png)], ids=["jpeg", "png"]
)
@pytest.mark.parametrize("resize", [None, 10])
def test_an_image_over_max_pixels_is_refused_from_its_header(
    decoded_by_simplejpeg: list[np.ndarray],
    spec: str,
    field: str,
    encode: Callable[[np.ndarray], bytes],
    resize: int | None,
) -> None:
    data = encode(photo(40, 30))
    decoder = wds.ImageDecoder(spec, max_pixels=1199, resize=resize)
    with pytest.raises(wds.ImageTooLargeError, match=r"40 x 30 = 1,200 pixels, over the limit"):
        decoder(f".{field}", data)
    assert not decoded_by_simplejpeg
    assert wds.ImageDecoder(spec, max_pixels=1200, resize=resize)(f".{field}", data) is not None
    sample = {"__key__": "k", "__url__": "s.tar", field: data}
    with pytest.raises(wds.DecodeError, match="over the limit of 1,199"):
        list(IterableWrapper([sample]).decode(spec, max_pixels=1199))
    assert len(list(IterableWrapper([sample]).decode(spec, max_pixels=None))) == 1


@pytest.mark.slow
def test_the_default_formats_are_pillows_and_load_as_they_are_met(tmp_path: Path) -> None:
    """The default table is not checked against Pillow's plugins when a decoder is made (which
    would load them all): it holds formats Pillow has, none refused, and a fresh process that
    made a decoder opens each of them, Pillow loading its plugin when a field needs it."""
    from wdspipes.samples.decoders.images import IMAGE_FORMATS, REFUSED_FORMATS

    Image.init()
    named = {name for names in IMAGE_FORMATS.values() for name in names}
    assert named <= set(Image.OPEN) and not named & REFUSED_FORMATS
    pixels = np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)
    np.save(tmp_path / "pixels.npy", pixels)
    for extension, name in [("png", "PNG"), ("webp", "WEBP"), ("tiff", "TIFF"), ("bmp", "BMP")]:
        options = {"lossless": True} if name == "WEBP" else {}
        Image.fromarray(pixels).save(tmp_path / f"image.{extension}", format=name, **options)
    script = """
import sys
from pathlib import Path
import numpy as np
from PIL import Image
import wdspipes as wds
folder = Path(sys.argv[1])
decoder = wds.ImageDecoder("rgb8")
assert "WEBP" not in Image.OPEN and "TIFF" not in Image.OPEN, "plugins loaded"
pixels = np.load(folder / "pixels.npy")
for path in sorted(folder.glob("image.*")):
    assert (decoder(path.suffix, path.read_bytes()) == pixels).all(), path.suffix
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_image_formats_are_checked_when_the_decoder_is_made() -> None:
    with pytest.raises(ValueError, match=r"EPS format .* is never opened: .*\(Ghostscript\)"):
        wds.ImageDecoder("rgb8", formats={"eps": "EPS"})
    with pytest.raises(ValueError, match="EPS format"):
        wds.ImageDecoder("rgb8", formats={"jpg": ("JPEG", "EPS")})
    with pytest.raises(ValueError, match="no image format for the extensions eps, ps"):
        wds.ImageDecoder("rgb8", extensions=frozenset({"jpg", "eps", "ps"}))
    with pytest.raises(ValueError, match="Pillow opens no format 'NOPE'"):
        wds.ImageDecoder("rgb8", formats={"x": "NOPE"})
    with pytest.raises(ValueError, match="max_pixels must be an int >= 1 or None"):
        wds.ImageDecoder("rgb8", max_pixels=0)
    only = wds.ImageDecoder("rgb8", extensions=frozenset({"png"}))
    assert only.extensions == {"png"} and only(".jpg", b"anything") is None
    assert repr(wds.ImageDecoder("pil", formats={"ico": "ICO"}, max_pixels=10)) == (
        "ImageDecoder('pil', formats={'ico': ('ICO',)}, max_pixels=10)"
    )

"""Image-training benchmark: decoded JPEG batches arriving in the training process.

What a user training on images sees: JPEG shards read, decoded, batched in two worker
processes and delivered to the main process, counted in images per second. Two datasets of
uncompressed tar shards are generated once (later runs reuse them):

- ``photos256``: 5,000 photo-like 256 x 256 JPEGs (quality 90, about 21 kB) in 8 shards, read
  full size as ``.decode("rgb8").to_tuple("jpg", "cls").batched(64)``:

  - wdspipes under DataLoader2 (``MultiProcessingReadingService(num_workers=2)``, its default
    prefetch counts) and under plain DataLoader (2 workers);
  - webdataset 1.0.2 under DataLoader (2 workers), its usual recipe;
  - the ceiling: the default JPEG decoder alone (simplejpeg) on 2 threads over the same bytes
    held in memory, no reading, batching or loader.

  Targets: wdspipes + DataLoader2 at least 2x webdataset, and at least 0.8 of the ceiling.
- ``imagenet``: 2,000 photo-like JPEGs of varied sizes (320 to 480 x 280 to 420, quality 95,
  about 110 kB) in 8 shards, read with the training recipe: a random resized crop to 224 x 224
  (torchvision's sampling: 8% to 100% of the area, aspect 3/4 to 4/3) and a random horizontal
  flip, batches of 64:

  - wdspipes with the crop fused into decoding (``ImageDecoder("rgb8",
    crop=RandomResizedCrop(224))``: only the DCT scale the crop needs is decoded) under
    DataLoader2;
  - webdataset decoding full size (``.decode("rgb8")``), then the same crop and flip
    (``RandomResizedCrop.apply``), under DataLoader.

  Target: wdspipes at least 3x webdataset.

Each system runs ``--repeat`` times, interleaved with the others; each run builds its loader,
reads two epochs and shuts it down. Epoch 1 includes starting the workers. Every epoch is
checked to deliver every image once, with the right shape. Reported: the median images/s of
each epoch (min and max beside it), and the CPU time per image of the main process and of the
workers.

Usage::

    python benchmarks/image_speed.py              # full run: writes about 330 MB of shards once
    python benchmarks/image_speed.py --quick      # smoke run on tiny shards
    python benchmarks/image_speed.py --markdown   # tables as Markdown
    python benchmarks/image_speed.py --help       # sizes, repeats, data directory

Shards go to ``benchmarks/data/`` (git-ignored) unless ``--data DIR`` says otherwise.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import (
    apply_size_defaults,
    format_table,
    import_libraries,
    print_header,
    print_section,
    quiet,
    verdict,
)
from pipeline_speed import WORKERS, under_dataloader, under_dataloader2

BATCH = 64
CROP = 224
FULL_TARGET = 2.0  # wdspipes + DataLoader2 over webdataset + DataLoader, full-size images
CEILING_TARGET = 0.8  # wdspipes + DataLoader2 over the decoder alone on WORKERS threads
RECIPE_TARGET = 3.0  # the crop recipe, wdspipes over webdataset


# --- datasets -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dataset:
    """``shards`` tar files of ``per_shard`` JPEGs (``jpg``) with their number (``cls``)."""

    name: str
    shards: int
    per_shard: int
    sizes: tuple[tuple[int, int], tuple[int, int]]  # (min, max) width, (min, max) height
    quality: int
    grain: float

    @property
    def images(self) -> int:
        return self.shards * self.per_shard

    def directory(self, root: Path) -> Path:
        return root / f"images-{self.name}-{self.shards}x{self.per_shard}"


def photo(rng: Any, width: int, height: int, quality: int, grain: float) -> bytes:
    """A deterministic photo-like JPEG: colour gradients, smooth blobs and grain."""
    import numpy as np
    from PIL import Image

    x, y = np.meshgrid(
        np.linspace(0, 1, width, dtype=np.float32), np.linspace(0, 1, height, dtype=np.float32)
    )
    slopes = rng.uniform(-1.0, 1.0, (2, 3)).astype(np.float32)
    gradient = x[..., None] * slopes[0] + y[..., None] * slopes[1]
    coarse = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    blobs = np.asarray(
        Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC), np.float32
    )
    noise = rng.standard_normal((height, width, 3), dtype=np.float32) * grain
    pixels = np.clip(0.6 * blobs + 60 * gradient + 50 + noise, 0, 255).astype(np.uint8)
    encoded = io.BytesIO()
    Image.fromarray(pixels).save(encoded, format="JPEG", quality=quality)
    return encoded.getvalue()


def write_shard(path: Path, dataset: Dataset, shard: int) -> None:
    import numpy as np

    rng = np.random.default_rng([dataset.quality, dataset.per_shard, shard])
    (wmin, wmax), (hmin, hmax) = dataset.sizes
    partial = path.with_name(path.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.USTAR_FORMAT) as archive:
        for index in range(dataset.per_shard):
            width, height = int(rng.integers(wmin, wmax + 1)), int(rng.integers(hmin, hmax + 1))
            number = shard * dataset.per_shard + index
            members = {
                "jpg": photo(rng, width, height, dataset.quality, dataset.grain),
                "cls": str(number).encode(),
            }
            for extension, data in members.items():
                info = tarfile.TarInfo(f"{number:07d}.{extension}")
                info.size, info.mode = len(data), 0o644
                archive.addfile(info, io.BytesIO(data))
    os.replace(partial, path)


def ensure_shards(dataset: Dataset, root: Path) -> list[str]:
    """The dataset's shards, written if missing (a manifest records the layout)."""
    directory = dataset.directory(root)
    directory.mkdir(parents=True, exist_ok=True)
    manifest = directory / "manifest.json"
    layout = json.dumps(dataset.__dict__, sort_keys=True, default=list)
    paths = [directory / f"shard-{shard:04d}.tar" for shard in range(dataset.shards)]
    if not (manifest.exists() and manifest.read_text() == layout and all(map(Path.exists, paths))):
        for shard, path in enumerate(paths):
            write_shard(path, dataset, shard)
        manifest.write_text(layout)
    return [str(path) for path in paths]


# --- pipelines ------------------------------------------------------------------------------


def wdspipes_full(urls: list[str]) -> Any:
    import wdspipes as wds

    pipe = wds.WebDataset(urls, shardshuffle=True).decode("rgb8")
    return pipe.to_tuple("jpg", "cls").batched(BATCH)


def webdataset_full(urls: list[str]) -> Any:
    import webdataset

    dataset = webdataset.WebDataset(urls, shardshuffle=100).decode("rgb8")
    return dataset.to_tuple("jpg", "cls").batched(BATCH)


def wdspipes_recipe(urls: list[str]) -> Any:
    import wdspipes as wds

    decoder = wds.ImageDecoder("rgb8", crop=wds.RandomResizedCrop(CROP))
    pipe = wds.WebDataset(urls, shardshuffle=True).decode(decoder)
    return pipe.to_tuple("jpg", "cls").batched(BATCH)


class FullSizeCrop:
    """The recipe's crop and flip applied to a fully decoded image, for webdataset."""

    def __init__(self) -> None:
        import random

        import wdspipes as wds

        self.crop = wds.RandomResizedCrop(CROP)
        self.rng = random.Random()

    def __call__(self, image: Any) -> Any:
        return self.crop.apply(image, self.rng)


def webdataset_recipe(urls: list[str]) -> Any:
    import webdataset

    dataset = webdataset.WebDataset(urls, shardshuffle=100).decode("rgb8")
    dataset = dataset.to_tuple("jpg", "cls").map_tuple(FullSizeCrop(), None)
    return dataset.batched(BATCH)


# --- loaders --------------------------------------------------------------------------------

Loader = tuple[Iterable[Any], Callable[[], None]]


@dataclass(frozen=True)
class System:
    """A pipeline under a loader, and the image shape its batches must have."""

    make_pipe: Callable[[list[str]], Any]
    wrap: Callable[[Any], Loader]


@dataclass
class Timing:
    """The runs of one system: images/s per epoch, CPU seconds per image."""

    rates: list[list[float]] = field(default_factory=lambda: [[], []])
    main_cpu: list[float] = field(default_factory=list)
    worker_cpu: list[float] = field(default_factory=list)


def cpu_seconds() -> tuple[float, float]:
    times = os.times()
    return times.user + times.system, times.children_user + times.children_system


def consume(batches: Iterable[Any], shape: tuple[int, ...] | None) -> list[int]:
    """The image numbers of an epoch, checking each batch's image shape."""
    numbers: list[int] = []
    for images, labels in batches:
        if shape is not None and tuple(images.shape[1:]) != shape:
            raise AssertionError(f"images of shape {tuple(images.shape)}, expected {shape}")
        numbers.extend(int(label) for label in labels)
    return numbers


def run_once(system: System, urls: list[str], images: int, shape: Any, timing: Timing) -> None:
    with quiet():
        cpu_before = cpu_seconds()
        start = time.perf_counter()
        loader, close = system.wrap(system.make_pipe(urls))
        for epoch in range(2):
            numbers = consume(loader, shape)
            now = time.perf_counter()
            timing.rates[epoch].append(len(numbers) / (now - start))
            start = now
            if sorted(numbers) != list(range(images)):
                raise AssertionError(f"epoch {epoch + 1}: not every image exactly once")
        close()
        main_cpu, worker_cpu = (b - a for a, b in zip(cpu_before, cpu_seconds(), strict=True))
    timing.main_cpu.append(main_cpu / (2 * images))
    timing.worker_cpu.append(worker_cpu / (2 * images))


def measure(
    systems: dict[str, System], urls: list[str], images: int, shape: Any, repeat: int
) -> dict[str, Timing]:
    timings = {name: Timing() for name in systems}
    for _ in range(repeat):
        for name, system in systems.items():
            run_once(system, urls, images, shape, timings[name])
    return timings


# --- the ceiling: the decoder alone ---------------------------------------------------------


def jpeg_bytes(urls: list[str]) -> list[bytes]:
    images = []
    for url in urls:
        with tarfile.open(url) as archive:
            for member in archive:
                if member.name.endswith(".jpg"):
                    extracted = archive.extractfile(member)
                    assert extracted is not None
                    images.append(extracted.read())
    return images


def decoder_alone(jpegs: list[bytes], threads: int, repeat: int) -> list[float]:
    """Images/s of the default JPEG decoder (simplejpeg, to RGB) on ``threads`` threads."""
    import simplejpeg

    def decode(part: list[bytes]) -> None:
        for data in part:
            simplejpeg.decode_jpeg(data, colorspace="RGB")

    rates = []
    for _ in range(repeat):
        parts = [jpegs[i::threads] for i in range(threads)]
        workers = [threading.Thread(target=decode, args=(part,)) for part in parts]
        start = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        rates.append(len(jpegs) / (time.perf_counter() - start))
    return rates


# --- report ---------------------------------------------------------------------------------


def spread(values: Sequence[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def table(timings: dict[str, Timing], baseline: str, markdown: bool) -> str:
    base = [statistics.median(timings[baseline].rates[e]) for e in range(2)]
    rows = []
    for name, timing in timings.items():
        ratios = [statistics.median(timing.rates[e]) / base[e] for e in range(2)]
        rows.append(
            [
                name,
                spread(timing.rates[0]),
                spread(timing.rates[1]),
                f"{ratios[0]:.2f}x / {ratios[1]:.2f}x",
                f"{statistics.median(timing.main_cpu) * 1e6:,.0f}",
                f"{statistics.median(timing.worker_cpu) * 1e6:,.0f}",
            ]
        )
    headers = [
        "system",
        "epoch 1 images/s",
        "epoch 2 images/s",
        f"vs {baseline.split(' ')[0]} (1 / 2)",
        "main µs/image",
        "workers µs/image",
    ]
    return format_table(headers, rows, markdown)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).parent / "data")
    parser.add_argument("--repeat", type=int, help="runs of each system, interleaved (5; 1)")
    parser.add_argument("--images", type=int, help="photos256 images per shard (625; 16)")
    parser.add_argument("--recipe-images", type=int, help="imagenet images per shard (250; 8)")
    parser.add_argument("--quick", action="store_true", help="tiny shards, one run: a smoke test")
    parser.add_argument("--markdown", action="store_true", help="tables as Markdown")
    args = parser.parse_args(argv)
    apply_size_defaults(
        parser, args, {"repeat": (5, 1), "images": (625, 16), "recipe_images": (250, 8)}
    )
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    versions = import_libraries(["wdspipes", "webdataset", "torch", "torchdata", "simplejpeg"])
    print_header(
        versions, "images/s delivered to the main process; median (min-max)", args.markdown
    )
    photos = Dataset("photos256", 8, args.images, ((256, 256), (256, 256)), 90, 8.0)
    recipe = Dataset("imagenet", 8, args.recipe_images, ((320, 480), (280, 420)), 95, 24.0)

    urls = ensure_shards(photos, args.data)
    print_section(
        f"Full-size 256 x 256 JPEGs: {photos.images:,} images, batches of {BATCH}", args.markdown
    )
    systems = {
        "wdspipes + DataLoader2": System(wdspipes_full, under_dataloader2),
        "wdspipes + DataLoader": System(wdspipes_full, under_dataloader),
        "webdataset + DataLoader": System(webdataset_full, under_dataloader),
    }
    timings = measure(systems, urls, photos.images, (256, 256, 3), args.repeat)
    print(table(timings, "webdataset + DataLoader", args.markdown))
    ceiling = decoder_alone(jpeg_bytes(urls), WORKERS, args.repeat)
    print(f"\nceiling, simplejpeg alone on {WORKERS} threads: {spread(ceiling)} images/s")
    ours = statistics.median(timings["wdspipes + DataLoader2"].rates[1])
    theirs = statistics.median(timings["webdataset + DataLoader"].rates[1])
    best = statistics.median(ceiling)
    print(
        f"target: DataLoader2 >= {FULL_TARGET:g}x webdataset (epoch 2): {ours / theirs:.2f}x, "
        f"{verdict(ours >= FULL_TARGET * theirs)}; >= {CEILING_TARGET:g} of the ceiling: "
        f"{ours / best:.2f}, {verdict(ours >= CEILING_TARGET * best)}"
    )

    urls = ensure_shards(recipe, args.data)
    print_section(
        f"The training recipe: {recipe.images:,} JPEGs of about 400 x 350, random resized crop "
        f"to {CROP} and flip, batches of {BATCH}",
        args.markdown,
    )
    systems = {
        "wdspipes reduced-size crop + DataLoader2": System(wdspipes_recipe, under_dataloader2),
        "webdataset full decode + crop + DataLoader": System(webdataset_recipe, under_dataloader),
    }
    timings = measure(systems, urls, recipe.images, (CROP, CROP, 3), args.repeat)
    print(table(timings, "webdataset full decode + crop + DataLoader", args.markdown))
    ours = statistics.median(timings["wdspipes reduced-size crop + DataLoader2"].rates[1])
    theirs = statistics.median(timings["webdataset full decode + crop + DataLoader"].rates[1])
    print(
        f"target: >= {RECIPE_TARGET:g}x webdataset (epoch 2): {ours / theirs:.2f}x, "
        f"{verdict(ours >= RECIPE_TARGET * theirs)}"
    )
    bound = decoder_alone(jpeg_bytes(urls), WORKERS, args.repeat)
    print(
        f"bound: simplejpeg decoding these JPEGs in full alone on {WORKERS} threads, no crop: "
        f"{spread(bound)} images/s, {statistics.median(bound) / theirs:.2f}x webdataset (at "
        "these sizes every crop needs the full scale: no image is 448 = 2 x 224 high)"
    )


if __name__ == "__main__":
    main()

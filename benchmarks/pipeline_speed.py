"""End-to-end loader benchmark: wdspipes under DataLoader2 against webdataset under DataLoader.

Generates two datasets of uncompressed tar shards (once; later runs reuse them) and reads each
end to end, decoded, tupled and batched in two forked worker processes, counting the samples
that reach the main process:

- 1 KB samples (``cls`` label as text, ``json`` record, ``bin`` filler):

  - wdspipes: ``WebDataset(urls, shardshuffle=True).decode().to_tuple("cls", "json")
    .batched(64)`` under ``DataLoader2`` with ``MultiProcessingReadingService(num_workers=2,
    multiprocessing_context="fork")``, and the same as ``DataPipeline(...)`` stages;
  - webdataset: ``WebDataset(urls, shardshuffle=100).decode().to_tuple("cls", "json")
    .batched(64)`` under ``torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
    multiprocessing_context="fork")``, its usual multi-worker recipe;

  target: wdspipes delivers at least 3x webdataset's samples/s in the first epoch. For
  reference, also the wdspipes pipeline under DataLoader (to tell the loader's cost from the
  pipeline's), and both pipelines iterated in this process without a loader.
- JPEG decode (256 x 256 RGB JPEGs, quality 90, ``cls`` = image index): the same loaders with
  ``.decode("rgb8").to_tuple("jpg", "cls").batched(32)`` (no target), then where the time of
  the single-process wdspipes pipeline goes: one pass with a clock after each stage, Pillow
  alone on the same JPEG bytes with each step timed, and a cProfile of the whole.

Each loader run builds the loader, reads two epochs from it and shuts it down. Epoch 1 is timed
from building the loader to its last batch, so it includes forking and starting the workers
(DataLoader's epoch also includes joining its workers, which it does at the end of every
epoch); epoch 2 reuses the loader object (DataLoader forks new workers, DataLoader2 resets its
persistent ones). Every epoch is checked to deliver every sample exactly once. The CPU time
of the main process and of the workers over each run is reported per sample. The pipelines
run ``--repeat`` times, interleaved; the best (shortest) run is reported with the median.

Usage::

    python benchmarks/pipeline_speed.py              # full run: writes about 210 MB of shards once
    python benchmarks/pipeline_speed.py --quick      # smoke run on tiny shards
    python benchmarks/pipeline_speed.py --markdown   # tables as Markdown
    python benchmarks/pipeline_speed.py --help       # sizes, repeats, data directory

Shards go to ``benchmarks/data/`` (git-ignored) unless ``--data DIR`` says otherwise.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import random
import statistics
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
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

MANIFEST_VERSION = 1
WORKERS = 2
SMALL_BATCH = 64
JPEG_BATCH = 32
SAMPLE_BYTES = 1000  # 1 KB samples: cls + json + bin
JSON_BYTES = 250
JPEG_QUALITY = 90
SPEED_TARGET = 3.0  # 1 KB samples: wdspipes samples/s over webdataset's, through the loaders
PROFILE_LINES = 10

Closer = Callable[[], None]
Loader = tuple[Iterable[Any], Closer]
LoaderFactory = Callable[[list[str]], Loader]
Consumer = Callable[[Iterable[Any]], "Epoch"]


# --- datasets -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dataset:
    """One generated dataset: ``shards`` tar files of ``per_shard`` samples each."""

    title: str
    slug: str
    shards: int
    per_shard: int
    image_size: int = 0  # JPEG datasets only

    @property
    def samples(self) -> int:
        return self.shards * self.per_shard

    def directory(self, root: Path) -> Path:
        """``pipe-1kb-5000``, ``pipe-jpeg256-750``: one directory per layout."""
        size = self.image_size or ""
        return root / f"pipe-{self.slug}{size}-{self.per_shard}"

    def layout(self) -> dict[str, Any]:
        """What the shards hold, as recorded in the manifest (shard count aside)."""
        layout: dict[str, Any] = {"version": MANIFEST_VERSION, "per_shard": self.per_shard}
        if self.image_size:
            layout.update(image_size=self.image_size, quality=JPEG_QUALITY)
        else:
            layout.update(sample_bytes=SAMPLE_BYTES, json_bytes=JSON_BYTES)
        return layout


def sample_key(shard: int, index: int) -> str:
    return f"{shard:04d}-{index:06d}"


def small_fields(shard: int, index: int, rng: random.Random) -> dict[str, bytes]:
    """A 1 KB sample: a label as text, a JSON record holding the key and label, filler."""
    key, label = sample_key(shard, index), rng.randrange(1000)
    record = {"key": key, "label": label, "caption": ""}
    free = JSON_BYTES - len(json.dumps(record))
    record["caption"] = rng.randbytes(free // 2 + 1).hex()[:free]
    fields = {"cls": str(label).encode(), "json": json.dumps(record).encode()}
    fields["bin"] = rng.randbytes(SAMPLE_BYTES - sum(len(v) for v in fields.values()))
    return fields


class JpegMaker:
    """Deterministic photo-like JPEGs: colour gradients, smooth blobs and grain."""

    def __init__(self, size: int) -> None:
        import numpy as np

        self.size = size
        ramp = np.linspace(0.0, 1.0, size, dtype=np.float32)
        self.x, self.y = np.meshgrid(ramp, ramp)

    def __call__(self, rng: Any) -> bytes:
        import numpy as np
        from PIL import Image

        size = self.size
        slopes = rng.uniform(-1.0, 1.0, (2, 3)).astype(np.float32)
        gradient = self.x[..., None] * slopes[0] + self.y[..., None] * slopes[1]
        coarse = rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)
        blobs = np.asarray(
            Image.fromarray(coarse).resize((size, size), Image.Resampling.BICUBIC),
            dtype=np.float32,
        )
        grain = rng.standard_normal((size, size, 3), dtype=np.float32) * 8
        pixels = np.clip(0.6 * blobs + 60 * gradient + 50 + grain, 0, 255).astype(np.uint8)
        encoded = io.BytesIO()
        Image.fromarray(pixels).save(encoded, format="JPEG", quality=JPEG_QUALITY)
        return encoded.getvalue()


def shard_members(dataset: Dataset, shard: int) -> Iterator[tuple[str, bytes]]:
    """The (name, data) members of one shard, in order."""
    if dataset.image_size:
        import numpy as np

        make_jpeg = JpegMaker(dataset.image_size)
        rng = np.random.default_rng([dataset.image_size, dataset.per_shard, shard])
        for index in range(dataset.per_shard):
            key = sample_key(shard, index)
            yield f"{key}.jpg", make_jpeg(rng)
            yield f"{key}.cls", str(shard * dataset.per_shard + index).encode()
    else:
        rng_small = random.Random(f"pipe-1kb/{dataset.per_shard}/{shard}")
        for index in range(dataset.per_shard):
            key = sample_key(shard, index)
            for field, data in small_fields(shard, index, rng_small).items():
                yield f"{key}.{field}", data


def write_shard(path: Path, dataset: Dataset, shard: int) -> None:
    """Write one USTAR shard (mtime 0, deterministic content), atomically."""
    partial = path.with_name(path.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.USTAR_FORMAT) as archive:
        for name, data in shard_members(dataset, shard):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            archive.addfile(info, io.BytesIO(data))
    os.replace(partial, path)


def ensure_shards(dataset: Dataset, root: Path) -> tuple[list[str], int]:
    """The dataset's shards, writing those missing or stale.

    A manifest in the dataset directory records the layout and each shard's size; shards it
    lists with the right size on disk are kept. Returns the paths and how many were written.
    """
    directory = dataset.directory(root)
    directory.mkdir(parents=True, exist_ok=True)
    manifest_path = directory / "manifest.json"
    layout = dataset.layout()
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = {}
    known: dict[str, int] = manifest.get("shards", {}) if manifest.get("layout") == layout else {}
    paths, written = [], 0
    for shard in range(dataset.shards):
        path = directory / f"shard-{shard:04d}.tar"
        if not (path.is_file() and known.get(path.name) == path.stat().st_size):
            write_shard(path, dataset, shard)
            known[path.name] = path.stat().st_size
            written += 1
        paths.append(str(path))
    if written:
        manifest_path.write_text(
            json.dumps({"layout": layout, "shards": dict(sorted(known.items()))}, indent=1) + "\n"
        )
    return paths, written


# --- pipelines ------------------------------------------------------------------------------


def wdspipes_small(urls: list[str]) -> Any:
    import wdspipes as wds

    pipe = wds.WebDataset(urls, shardshuffle=True).decode()
    return pipe.to_tuple("cls", "json").batched(SMALL_BATCH)


def wdspipes_small_stages(urls: list[str]) -> Any:
    """The same pipeline as ``DataPipeline(...)`` stages, webdataset style."""
    import wdspipes as wds

    return wds.DataPipeline(
        wds.SimpleShardList(urls),
        wds.shuffle(len(urls), initial=len(urls)),  # shard order, alike in every worker
        wds.split_by_node,
        wds.split_by_worker,
        wds.tarfile_to_samples(),
        wds.decode(),
        wds.to_tuple("cls", "json"),
        wds.batched(SMALL_BATCH),
    )


def webdataset_small(urls: list[str]) -> Any:
    import webdataset

    dataset = webdataset.WebDataset(urls, shardshuffle=100)
    return dataset.decode().to_tuple("cls", "json").batched(SMALL_BATCH)


def wdspipes_jpeg(urls: list[str], shardshuffle: bool = True) -> Any:
    import wdspipes as wds

    pipe = wds.WebDataset(urls, shardshuffle=shardshuffle).decode("rgb8")
    return pipe.to_tuple("jpg", "cls").batched(JPEG_BATCH)


def webdataset_jpeg(urls: list[str]) -> Any:
    import webdataset

    dataset = webdataset.WebDataset(urls, shardshuffle=100)
    return dataset.decode("rgb8").to_tuple("jpg", "cls").batched(JPEG_BATCH)


# --- loaders: (iterable, shutdown) ----------------------------------------------------------


def under_dataloader2(pipe: Any) -> Loader:
    """A pipeline under DataLoader2 with ``WORKERS`` forked workers."""
    from wdspipes.loaders import dataloader2

    module = dataloader2()
    service = module.MultiProcessingReadingService(
        num_workers=WORKERS, multiprocessing_context="fork"
    )
    loader = module.DataLoader2(pipe, reading_service=service)
    return loader, loader.shutdown


def under_dataloader(dataset: Any, persistent: bool = False) -> Loader:
    """A dataset that batches by itself under DataLoader with ``WORKERS`` forked workers; the
    workers end with each epoch, or, ``persistent``, serve every epoch."""
    from torch.utils.data import DataLoader

    loader = DataLoader(
        dataset,
        batch_size=None,
        num_workers=WORKERS,
        multiprocessing_context="fork",
        persistent_workers=persistent,
    )
    return loader, lambda: None


def in_process(pipe: Any) -> Loader:
    """A pipeline iterated in this process, no loader."""
    return pipe, lambda: None


def loader_factory(
    wrap: Callable[[Any], Loader], make_pipe: Callable[[list[str]], Any]
) -> LoaderFactory:
    def factory(urls: list[str]) -> Loader:
        return wrap(make_pipe(urls))

    return factory


# --- consuming and checking an epoch --------------------------------------------------------


@dataclass
class Epoch:
    """What an epoch delivered: the sample count, the ids seen, the first batch."""

    samples: int
    ids: list[Any]
    first: Any


def consume_small(batches: Iterable[Any]) -> Epoch:
    """Count (labels, records) batches; collect each record's key."""
    samples, keys, first = 0, [], None
    for batch in batches:
        labels, records = batch
        if first is None:
            first = batch
        samples += len(labels)
        keys.extend([record["key"] for record in records])
    return Epoch(samples, keys, first)


def consume_jpeg(batches: Iterable[Any]) -> Epoch:
    """Count (images, indices) batches; collect the index columns."""
    samples, columns, first = 0, [], None
    for batch in batches:
        images, indices = batch
        if first is None:
            first = (images[:1], indices[:1])  # keep little of the batch alive
        samples += len(indices)
        columns.append(indices)
    return Epoch(samples, columns, first)


def check_small(epoch: Epoch, dataset: Dataset) -> None:
    """Every sample exactly once, cls and json decoded (a batch's labels match its records)."""
    expected = [
        sample_key(shard, index)
        for shard in range(dataset.shards)
        for index in range(dataset.per_shard)
    ]
    if epoch.samples != dataset.samples or sorted(epoch.ids) != expected:
        raise RuntimeError(
            f"delivered {epoch.samples} samples ({len(set(epoch.ids))} distinct keys), "
            f"expected each of {dataset.samples} once"
        )
    labels, records = epoch.first
    if list(labels.tolist()) != [record["label"] for record in records]:
        raise RuntimeError("the first batch's labels do not match its JSON records")


def check_jpeg(epoch: Epoch, dataset: Dataset) -> None:
    """Every image exactly once (by its cls index), decoded to uint8 H x W x 3."""
    indices = sorted(int(i) for column in epoch.ids for i in column.tolist())
    if epoch.samples != dataset.samples or indices != list(range(dataset.samples)):
        raise RuntimeError(
            f"delivered {epoch.samples} images ({len(set(indices))} distinct), expected each "
            f"of {dataset.samples} once"
        )
    images, _ = epoch.first
    shape = (1, dataset.image_size, dataset.image_size, 3)
    if tuple(images.shape) != shape or "uint8" not in str(images.dtype):
        raise RuntimeError(f"images are {images.dtype} {tuple(images.shape)}, expected {shape}")


# --- measuring ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """The runs of one pipeline: per run, the seconds of each epoch and of shutting down, and
    the CPU seconds of the main process and of the workers over the whole run."""

    name: str
    samples: int  # per epoch
    epochs: tuple[tuple[float, ...], ...]  # epochs[e][run]
    shutdown: tuple[float, ...] = ()
    main_cpu: tuple[float, ...] = ()
    worker_cpu: tuple[float, ...] = ()

    def best(self, epoch: int = 0) -> float:
        return min(self.epochs[epoch])

    def median(self, epoch: int = 0) -> float:
        return statistics.median(self.epochs[epoch])

    def rate(self, epoch: int = 0) -> float:
        """Samples per second of the best run."""
        return self.samples / self.best(epoch)

    def median_rate(self, epoch: int = 0) -> float:
        return self.samples / self.median(epoch)

    def cpu_per_sample(self, cpu: tuple[float, ...]) -> float:
        """Median CPU microseconds per sample delivered over a run (all its epochs)."""
        return 1e6 * statistics.median(cpu) / (self.samples * len(self.epochs))


@dataclass(frozen=True)
class Run:
    """One loader run: seconds per epoch, of the shutdown, CPU seconds (main, workers)."""

    epochs: list[float]
    shutdown: float
    main_cpu: float
    worker_cpu: float


def cpu_seconds() -> tuple[float, float]:
    """User + system CPU seconds of this process, and of its children reaped so far."""
    times = os.times()
    return times.user + times.system, times.children_user + times.children_system


def run_loader(
    factory: LoaderFactory,
    urls: list[str],
    consume: Consumer,
    check: Callable[[Epoch], None],
    epochs: int,
) -> Run:
    """Build a loader, read ``epochs`` epochs, shut it down; check every epoch afterwards.

    Epoch 1 includes building the loader (and so starting its workers). The workers' CPU time
    counts once they are reaped: at each epoch's end for DataLoader, at the shutdown for
    DataLoader2.
    """
    with quiet():
        gc.collect()
        seconds = []
        cpu_before = cpu_seconds()
        start = time.perf_counter()
        loader, close = factory(urls)
        delivered = []
        for _ in range(epochs):
            delivered.append(consume(loader))
            now = time.perf_counter()
            seconds.append(now - start)
            start = now
        close()
        shutdown = time.perf_counter() - start
        main_cpu, worker_cpu = (b - a for a, b in zip(cpu_before, cpu_seconds(), strict=True))
        for epoch in delivered:
            check(epoch)
        del loader, delivered
        gc.collect()  # inside quiet(): finalizers of leaked files warn here
    return Run(seconds, shutdown, main_cpu, worker_cpu)


def measure_loaders(
    factories: dict[str, tuple[LoaderFactory, int]],
    urls: list[str],
    consume: Consumer,
    check: Callable[[Epoch], None],
    samples: int,
    repeat: int,
) -> dict[str, Timing]:
    """Run each factory (with its number of epochs) ``repeat`` times, interleaved."""
    runs: dict[str, list[Run]] = {name: [] for name in factories}
    for _ in range(repeat):
        for name, (factory, epochs) in factories.items():
            runs[name].append(run_loader(factory, urls, consume, check, epochs))
    return {
        name: Timing(
            name,
            samples,
            epochs=tuple(zip(*(run.epochs for run in done), strict=True)),
            shutdown=tuple(run.shutdown for run in done),
            main_cpu=tuple(run.main_cpu for run in done),
            worker_cpu=tuple(run.worker_cpu for run in done),
        )
        for name, done in runs.items()
    }


# --- where the time goes (JPEG, one process) ------------------------------------------------


def count_batched(batches: Iterable[Any]) -> int:
    return sum(len(batch[1]) for batch in batches)


def wdspipes_jpeg_in_process() -> Callable[[list[str]], int]:
    """The single-process wdspipes JPEG pipeline (shards in order), counting images."""
    return lambda urls: count_batched(wdspipes_jpeg(urls, shardshuffle=False))


class StageClock:
    """An iterator-to-iterator stage adding up how long its upstream takes to produce each item
    (so everything upstream of it, inclusive)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, items: Iterator[Any]) -> Iterator[Any]:
        clock = time.perf_counter
        while True:
            start = clock()
            try:
                item = next(items)
            except StopIteration:
                self.seconds += clock() - start
                return
            self.seconds += clock() - start
            yield item


class HandlerClock:
    """A decode handler adding up the time of the handler it wraps."""

    def __init__(self, handler: Callable[[str, bytes], Any]) -> None:
        self.handler = handler
        self.seconds = 0.0

    def __call__(self, key: str, data: bytes) -> Any:
        start = time.perf_counter()
        result = self.handler(key, data)
        self.seconds += time.perf_counter() - start
        return result


def timed_jpeg_pipeline(urls: list[str]) -> dict[str, float]:
    """One pass of the single-process wdspipes JPEG pipeline with a clock after each stage and
    around the image handler: seconds per part, and the whole pass ("total")."""
    import wdspipes as wds
    from wdspipes.samples.decoders import ImageDecoder

    read, decoded, tupled, batched = StageClock(), StageClock(), StageClock(), StageClock()
    image = HandlerClock(ImageDecoder("rgb8"))
    start = time.perf_counter()
    pipe = wds.IteratorStage(wds.WebDataset(urls), read)
    pipe = wds.IteratorStage(pipe.decode(image), decoded)
    pipe = wds.IteratorStage(pipe.to_tuple("jpg", "cls"), tupled)
    count_batched(wds.IteratorStage(pipe.batched(JPEG_BATCH), batched))
    total = time.perf_counter() - start
    return {
        "read": read.seconds,
        "image": image.seconds,
        "decode rest": decoded.seconds - read.seconds - image.seconds,
        "to_tuple": tupled.seconds - decoded.seconds,
        "batched": batched.seconds - tupled.seconds,
        "loop": total - batched.seconds,
        "total": total,
    }


def read_jpeg_bytes(urls: list[str]) -> list[bytes]:
    import wdspipes as wds

    return [sample["jpg"] for sample in wds.WebDataset(urls)]


def timed_pillow(jpegs: list[bytes]) -> dict[str, float]:
    """What ``decode("rgb8")`` runs per image, on the same bytes, each step timed inline."""
    import numpy as np
    from PIL import Image

    clock = time.perf_counter
    load = convert = array = 0.0
    for data in jpegs:
        start = clock()
        image = Image.open(io.BytesIO(data))
        image.load()
        loaded = clock()
        if image.mode != "RGB":  # as the decoder: convert only when the mode differs
            image = image.convert("RGB")
        converted = clock()
        np.array(image)
        done = clock()
        load += loaded - start
        convert += converted - loaded
        array += done - converted
    return {"load": load, "convert": convert, "array": array, "total": load + convert + array}


def profile_top(fn: Callable[[], Any], lines: int) -> tuple[float, list[list[str]]]:
    """cProfile ``fn``: total seconds and the top functions by own time."""
    profiler = cProfile.Profile()
    profiler.enable()
    fn()
    profiler.disable()
    stats = pstats.Stats(profiler)
    total: float = stats.total_tt  # type: ignore[attr-defined]
    entries = sorted(
        stats.stats.items(),  # type: ignore[attr-defined]
        key=lambda item: item[1][2],
        reverse=True,
    )
    rows = []
    for (filename, line, function), (_, calls, own, cumulative, _) in entries[:lines]:
        where = f"{Path(filename).name}:{line}" if line else "~"
        rows.append(
            [
                f"{function} ({where})",
                f"{calls:,}",
                f"{own:.3f}",
                f"{100 * own / total:.0f}%",
                f"{cumulative:.3f}",
            ]
        )
    return total, rows


# --- output ---------------------------------------------------------------------------------


def loader_table(timings: Sequence[Timing], baseline: Timing, markdown: bool) -> str:
    """Samples/s of the best run (and of the median run) for each epoch."""
    rows = []
    for t in timings:
        second = len(t.epochs) > 1
        rows.append(
            [
                t.name,
                f"{t.rate(0):,.0f}",
                f"{t.median_rate(0):,.0f}",
                f"{t.best(0):.3f}",
                f"{t.rate(1):,.0f}" if second else "-",
                f"{t.median_rate(1):,.0f}" if second else "-",
                f"{statistics.median(t.shutdown):.3f}",
                f"{t.cpu_per_sample(t.main_cpu):,.0f}",
                f"{t.cpu_per_sample(t.worker_cpu):,.0f}",
                f"{t.rate(0) / baseline.rate(0):.2f}x",
            ]
        )
    headers = [
        "pipeline",
        "epoch 1 samples/s",
        "(median)",
        "best s",
        "epoch 2 samples/s",
        "(median)",
        "shutdown s",
        "CPU us/sample: main",
        "workers",
        "vs webdataset",
    ]
    return format_table(headers, rows, markdown)


def print_loader_notes() -> None:
    print(
        f"\nThrough {WORKERS} forked workers. shutdown s: median time of shutting the loader "
        "down after epoch 2 (DataLoader2.shutdown; DataLoader's workers stop at each epoch's "
        "end, within its epoch time). CPU us/sample: median user + system CPU time of the main "
        "process, and of the workers summed, over the whole run (both epochs, start-up and "
        "shutdown included) per sample delivered. wdspipes + DataLoader (informative): the same "
        "wdspipes pipeline under DataLoader(pipe, batch_size=None, ...), to tell the loader's "
        "cost from the pipeline's."
    )


def in_process_table(timings: Sequence[Timing], markdown: bool) -> str:
    rows = [
        [t.name, f"{t.rate():,.0f}", f"{t.median_rate():,.0f}", f"{t.best():.3f}"] for t in timings
    ]
    return format_table(["pipeline", "samples/s", "(median)", "best s"], rows, markdown)


# --- the run --------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default_data = Path(__file__).resolve().parent / "data"
    parser.add_argument("--data", type=Path, default=default_data, help="shard directory")
    parser.add_argument("--small-shards", type=int, help="1 KB dataset shards (8; quick 2)")
    parser.add_argument("--small-samples", type=int, help="1 KB samples per shard (5000; 200)")
    parser.add_argument("--jpeg-shards", type=int, help="JPEG dataset shards (4; quick 2)")
    parser.add_argument("--jpeg-images", type=int, help="JPEG images per shard (750; 16)")
    parser.add_argument("--image-size", type=int, help="JPEG width and height (256; 64)")
    parser.add_argument("--repeat", type=int, help="runs per pipeline, interleaved (3; 1)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--markdown", action="store_true", help="print tables as Markdown")
    args = parser.parse_args(argv)
    defaults = {
        "small_shards": (8, 2),
        "small_samples": (5000, 200),
        "jpeg_shards": (4, 2),
        "jpeg_images": (750, 16),
        "image_size": (256, 64),
        "repeat": (3, 1),
    }
    apply_size_defaults(parser, args, defaults)
    for name in ("small_shards", "jpeg_shards"):
        if getattr(args, name) < WORKERS:  # webdataset fails a worker that gets no shard
            parser.error(f"--{name.replace('_', '-')} must be at least {WORKERS} (the workers)")
    return args


def prepare(dataset: Dataset, root: Path) -> list[str]:
    start = time.perf_counter()
    paths, written = ensure_shards(dataset, root)
    if written:
        elapsed = time.perf_counter() - start
        print(f"generated {written} shard(s) of {dataset.title} in {elapsed:.1f} s")
    return paths


def describe(dataset: Dataset, urls: list[str]) -> str:
    size = sum(os.path.getsize(url) for url in urls) / 1e6
    shards = f"{dataset.shards} shards x {dataset.per_shard:,} samples"
    return f"{dataset.title}: {shards}, {size:.1f} MB"


def benchmark_small(dataset: Dataset, urls: list[str], args: argparse.Namespace) -> None:
    def check(epoch: Epoch) -> None:
        check_small(epoch, dataset)

    loaders = {
        "wdspipes WebDataset + DataLoader2": (
            loader_factory(under_dataloader2, wdspipes_small),
            2,
        ),
        "wdspipes DataPipeline + DataLoader2": (
            loader_factory(under_dataloader2, wdspipes_small_stages),
            2,
        ),
        "webdataset + DataLoader": (loader_factory(under_dataloader, webdataset_small), 2),
        "wdspipes WebDataset + DataLoader": (loader_factory(under_dataloader, wdspipes_small), 2),
    }
    timings = measure_loaders(loaders, urls, consume_small, check, dataset.samples, args.repeat)
    references = {
        "wdspipes, one process": (loader_factory(in_process, wdspipes_small), 1),
        "webdataset, one process": (loader_factory(in_process, webdataset_small), 1),
    }
    local = measure_loaders(references, urls, consume_small, check, dataset.samples, args.repeat)

    print_section(describe(dataset, urls), args.markdown)
    print(
        f"fields: cls (label 0-999 as text), json ({JSON_BYTES} B), bin (to {SAMPLE_BYTES} B); "
        f".decode().to_tuple('cls', 'json').batched({SMALL_BATCH})\n"
    )
    ours, theirs = timings["wdspipes WebDataset + DataLoader2"], timings["webdataset + DataLoader"]
    print(loader_table(list(timings.values()), theirs, args.markdown))
    print_loader_notes()
    print("\nin one process, no loader (reference):\n")
    print(in_process_table(list(local.values()), args.markdown))

    print_section("target: 1 KB samples through the loaders", args.markdown)
    mark = "- " if args.markdown else "  "
    if args.quick:
        print(f"{mark}(--quick: shards too small to judge; worker start-up dominates)")
    met = ours.rate() >= SPEED_TARGET * theirs.rate()
    print(
        f"{mark}wdspipes epoch-1 samples/s >= {SPEED_TARGET:g} x webdataset's: "
        f"{ours.rate():,.0f} vs {SPEED_TARGET:g} x {theirs.rate():,.0f} = "
        f"{SPEED_TARGET * theirs.rate():,.0f} ({ours.rate() / theirs.rate():.2f}x): "
        f"{verdict(met)}"
    )
    print(
        f"{mark}median runs: {ours.median_rate():,.0f} vs {theirs.median_rate():,.0f} "
        f"({ours.median_rate() / theirs.median_rate():.2f}x); epoch 2 (best): "
        f"{ours.rate(1):,.0f} vs {theirs.rate(1):,.0f} ({ours.rate(1) / theirs.rate(1):.2f}x)"
    )


def benchmark_jpeg(dataset: Dataset, urls: list[str], args: argparse.Namespace) -> None:
    def check(epoch: Epoch) -> None:
        check_jpeg(epoch, dataset)

    loaders = {
        "wdspipes WebDataset + DataLoader2": (loader_factory(under_dataloader2, wdspipes_jpeg), 2),
        "webdataset + DataLoader": (loader_factory(under_dataloader, webdataset_jpeg), 2),
        "wdspipes WebDataset + DataLoader": (loader_factory(under_dataloader, wdspipes_jpeg), 2),
    }
    timings = measure_loaders(loaders, urls, consume_jpeg, check, dataset.samples, args.repeat)
    reference = {"webdataset, one process": (loader_factory(in_process, webdataset_jpeg), 1)}
    local = measure_loaders(reference, urls, consume_jpeg, check, dataset.samples, args.repeat)

    jpegs = read_jpeg_bytes(urls)
    plain_pass = wdspipes_jpeg_in_process()
    plain, timed, pillow = [], [], []
    with quiet():
        for _ in range(args.repeat):  # interleaved; each kind's best pass is reported
            gc.collect()
            start = time.perf_counter()
            if plain_pass(urls) != dataset.samples:
                raise RuntimeError("the single-process pipeline lost images")
            plain.append(time.perf_counter() - start)
            gc.collect()
            timed.append(timed_jpeg_pipeline(urls))
            gc.collect()
            pillow.append(timed_pillow(jpegs))
        profile_total, profile_rows = profile_top(lambda: plain_pass(urls), PROFILE_LINES)
    best_timed = min(timed, key=lambda parts: parts["total"])
    best_pillow = min(pillow, key=lambda parts: parts["total"])

    print_section(describe(dataset, urls), args.markdown)
    mean_kb = sum(len(data) for data in jpegs) / len(jpegs) / 1e3
    size = dataset.image_size
    print(
        f"fields: jpg ({size} x {size} RGB, quality {JPEG_QUALITY}, mean {mean_kb:.1f} kB), cls "
        f"(the image's index); .decode('rgb8').to_tuple('jpg', 'cls').batched({JPEG_BATCH})\n"
    )
    theirs = timings["webdataset + DataLoader"]
    print(loader_table(list(timings.values()), theirs, args.markdown))
    one_process = Timing("wdspipes, one process", dataset.samples, (tuple(plain),))
    print_loader_notes()
    print("\nno target. In one process, no loader (reference):\n")
    print(in_process_table([one_process, *local.values()], args.markdown))

    print_section("where the time goes: JPEG, wdspipes in one process", args.markdown)
    print_breakdown(best_timed, best_pillow, min(plain), dataset.samples, args.markdown)
    print(
        f"\ncProfile of the whole single-process pipeline, top {PROFILE_LINES} by own time "
        f"({profile_total:.3f} s under the profiler, which inflates small Python calls):\n"
    )
    headers = ["function", "calls", "own s", "own %", "cumulative s"]
    print(format_table(headers, profile_rows, args.markdown))


def print_breakdown(
    timed: dict[str, float], pillow: dict[str, float], plain: float, images: int, markdown: bool
) -> None:
    """The instrumented pass split by stage, the image handler split as Pillow alone splits."""
    total = timed["total"]
    image = timed["image"]
    pillow_parts = [
        ("  - JPEG decoding in Pillow: Image.open + load", pillow["load"]),
        ("  - Image.convert('RGB'), if not RGB already", pillow["convert"]),
        ("  - np.array(image): tobytes + copy", pillow["array"]),
    ]
    parts = [
        ("reading: tar members grouped into samples", timed["read"]),
        ("decode: ImageDecoder('rgb8'), of which:", image),
        *((label, image * share / pillow["total"]) for label, share in pillow_parts),
        ("decode: the rest (cls -> int, handler chain, dicts)", timed["decode rest"]),
        ("to_tuple('jpg', 'cls')", timed["to_tuple"]),
        (f"batched({JPEG_BATCH}): collation, np.stack -> tensor", timed["batched"]),
        ("the consuming loop, per-item hooks, clocks", timed["loop"]),
    ]
    rows = [
        [label, f"{seconds:.3f}", f"{1e6 * seconds / images:,.0f}", f"{100 * seconds / total:.1f}%"]
        for label, seconds in parts
    ]
    for label, seconds in (
        ("whole pass, with the clocks", total),
        ("whole pass, no clocks", plain),
    ):
        rows.append([label, f"{seconds:.3f}", f"{1e6 * seconds / images:,.0f}", ""])
    print(format_table(["part", "seconds", "us/image", "share"], rows, markdown))
    print(
        "\nOne pass of the pipeline with a clock after each stage (each clock adds up the time its "
        "upstream takes per item) and around the image handler: the pass with the shortest "
        "total of --repeat. The image handler's time is split in the proportions of Pillow "
        "alone running the same steps on the same JPEG bytes, each step timed inline "
        "(best pass):"
    )
    rows = [
        [label.strip(" -").split(":")[0], f"{1e6 * seconds / images:,.0f}"]
        for label, seconds in pillow_parts
    ]
    rows.append(["Pillow total", f"{1e6 * pillow['total'] / images:,.0f}"])
    print()
    print(format_table(["Pillow alone", "us/image"], rows, markdown))
    summary = [
        ("JPEG decoding in Pillow", image * pillow["load"] / pillow["total"]),
        ("convert + np.array copy", image * (pillow["total"] - pillow["load"]) / pillow["total"]),
        ("reading", timed["read"]),
        ("collation (batched)", timed["batched"]),
        ("rest of decode", timed["decode rest"]),
        ("to_tuple", timed["to_tuple"]),
        ("loop", timed["loop"]),
    ]
    print(
        "\nsummary: "
        + "; ".join(f"{label}: {100 * seconds / total:.0f}%" for label, seconds in summary)
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    start = time.perf_counter()
    libraries = ["torch", "torchdata", "webdataset", "wdspipes", "PIL", "numpy"]
    versions = import_libraries(libraries)
    from wdspipes.loaders import dataloader2

    dataloader2()  # imported quietly before anything is timed
    timing = (
        f"time.perf_counter in the main process; each pipeline {args.repeat} run(s), the "
        "pipelines interleaved; best run reported, median beside it. A loader run builds the "
        f"loader ({WORKERS} forked workers), reads 2 epochs and shuts it down; epoch 1 counts "
        "from building the loader to its last batch (worker start-up included), epoch 2 reuses "
        "the loader object. samples/s = samples delivered to the main process (batches x their "
        "sizes) / seconds."
    )
    print_header(versions, timing, args.markdown)
    if args.quick:
        print(
            ("- " if args.markdown else "")
            + "--quick: tiny shards, a smoke run: too small to judge anything"
        )
    small = Dataset("1 KB samples", "1kb", args.small_shards, args.small_samples)
    jpeg = Dataset("JPEG decode", "jpeg", args.jpeg_shards, args.jpeg_images, args.image_size)
    small_urls = prepare(small, args.data)
    jpeg_urls = prepare(jpeg, args.data)
    print(f"data: {args.data}")
    benchmark_small(small, small_urls, args)
    benchmark_jpeg(jpeg, jpeg_urls, args)
    print(f"\ntotal time: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()

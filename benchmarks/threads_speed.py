"""Processes, threads and both (issue 34): decoded JPEG batches in the training process, from one
process decoding in threads, from loader worker processes, and from workers that decode in
threads, each against the decoder's own rate on every core; with the time to the first batch and
the memory of all the processes together.

Two datasets of uncompressed tar shards are generated once (later runs reuse them):

- ``photos38k``: 2,000 photo-like 256 x 256 JPEGs (quality 95, about 38 kB) in 8 shards, read
  as ``.decode("rgb8").to_tuple("jpg", "cls").batched(64)``;
- the crop recipe: ``image_speed.py``'s ``imagenet`` set (2,000 JPEGs of 320 to 480 x 280 to
  420, quality 95, about 110 kB), decoded with ``ImageDecoder("rgb8",
  crop=RandomResizedCrop(224))`` (webdataset: decoded full size, then the same crop and flip).

The modes, each run in a process of its own (started afresh for every run, torch and the
libraries imported before the clock starts), reading ``--epochs`` epochs (4):

- ``bound``: libjpeg-turbo alone (simplejpeg, the default JPEG decoder, to RGB), the JPEGs'
  bytes held in memory, decoded in as many threads as the machine has cores (it releases the
  GIL); for the crop recipe also ``crop bound``, the fused crop decoder alone the same way;
- ``one thread``: wdspipes in the training process, decoding in its own thread, no loader (what
  each loader worker does); its CPU an image, against the decoder's alone, is the ceiling of
  every arrangement once the cores are busy (printed below each table);
- ``threads``: wdspipes in the training process, ``decode(..., threads=<cores>)``, no loader;
- ``prefetch + threads``: the same with ``prefetch_items(16)`` before the decode;
- ``DataLoader``: wdspipes under torch's DataLoader, 2 workers (persistent, as a user reading
  several epochs sets);
- ``DataLoader2``: wdspipes under torchdata 0.9's DataLoader2, ``MultiProcessingReadingService(
  num_workers=2)``, its default prefetch counts;
- ``webdataset``: webdataset 1.0.2 under DataLoader, 2 persistent workers (its usual recipe);
- ``DataLoader2 1x2`` and ``DataLoader 1x2``: one worker decoding in 2 threads.

The modes without a loader (the bounds too) run ``torch.set_num_threads(1)`` first, as
DataLoader does in its workers: torch's own threads would compete with the decoding threads
(the crop's resize is a torch operation), and the training process of a job on a GPU does not
need them. Every loader uses the default start method (fork on Linux).

Measured in the mode's process: the time from building the pipeline and loader to the first
batch in hand; images/s from that first batch on, and over the whole run; the CPU seconds of
the process and of its workers.
Memory, of the process and all its descendants together: the peak of their summed resident
memory (RSS), sampled by this script from ``/proc/<pid>/statm`` every ``--sample`` seconds (a
page that forked workers share with the main process counts in each); and, read by the mode's
process as its last epoch ends, their summed proportional set size (PSS: a page shared by n
processes counts 1/n in each, so the copy of torch that forked workers share counts once) and
the sum of each process's own peak RSS (``VmHWM``, in the JSON). Each epoch is checked to
deliver every image exactly once, in batches of the right shape.

Each mode runs ``--repeat`` times, the modes interleaved; reported is the best run of each
(highest images/s, shortest time to the first batch, least memory), the spread beside it, and
the load average of the machine over the runs.

Usage::

    python benchmarks/threads_speed.py              # full run: writes about 300 MB of shards once
    python benchmarks/threads_speed.py --quick      # smoke run on tiny shards
    python benchmarks/threads_speed.py --markdown --json results.json
    python benchmarks/threads_speed.py --only DataLoader2 --only threads --repeat 5

Shards go to ``benchmarks/data/`` (git-ignored) unless ``--data DIR`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
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
from image_speed import CROP, Dataset, FullSizeCrop, ensure_shards, jpeg_bytes

BATCH = 64
CORES = os.cpu_count() or 1
WORKERS = 2
PREFETCH = 16
LIBRARIES = ["wdspipes", "webdataset", "torch", "torchdata", "simplejpeg"]

BOUND_TARGET = 0.9  # of the decoder alone, for DataLoader2 and for one process in threads
SHARE_TARGET = 0.5  # one process's memory and first batch, of DataLoader2's


# --- the modes (run in the mode's own process) -----------------------------------------------


def decoder_spec(recipe: bool) -> Any:
    import wdspipes as wds

    return wds.ImageDecoder("rgb8", crop=wds.RandomResizedCrop(CROP)) if recipe else "rgb8"


def wdspipes_pipe(urls: list[str], recipe: bool, threads: int = 0, prefetch: int = 0) -> Any:
    import wdspipes as wds

    pipe = wds.WebDataset(urls, shardshuffle=True)
    if prefetch:
        pipe = pipe.prefetch_items(prefetch)
    pipe = pipe.decode(decoder_spec(recipe), threads=threads)
    return pipe.to_tuple("jpg", "cls").batched(BATCH)


def webdataset_pipe(urls: list[str], recipe: bool) -> Any:
    import webdataset

    dataset = webdataset.WebDataset(urls, shardshuffle=100).decode("rgb8").to_tuple("jpg", "cls")
    if recipe:
        dataset = dataset.map_tuple(FullSizeCrop(), None)
    return dataset.batched(BATCH)


Loader = tuple[Iterable[Any], Callable[[], None]]


def in_process(pipe: Any) -> Loader:
    import torch

    # No intra-op threads of torch's (as DataLoader sets in its workers): they would compete
    # with the decoding threads for the cores (the crop's resize is a torch operation).
    torch.set_num_threads(1)
    return pipe, lambda: None


def dataloader(workers: int) -> Callable[[Any], Loader]:
    def wrap(pipe: Any) -> Loader:
        from torch.utils.data import DataLoader

        loader = DataLoader(pipe, batch_size=None, num_workers=workers, persistent_workers=True)

        def close() -> None:
            iterator = loader._iterator
            if iterator is not None:
                iterator._shutdown_workers()

        return loader, close

    return wrap


def dataloader2(workers: int) -> Callable[[Any], Loader]:
    def wrap(pipe: Any) -> Loader:
        from torchdata.dataloader2 import DataLoader2, MultiProcessingReadingService

        loader = DataLoader2(pipe, reading_service=MultiProcessingReadingService(workers))
        return loader, loader.shutdown

    return wrap


@dataclass(frozen=True)
class Mode:
    """How a mode makes its batches: a pipeline and a loader; or ``alone`` (the bound)."""

    label: str
    make_pipe: Callable[[list[str], bool], Any] | None = None
    wrap: Callable[[Any], Loader] | None = None
    alone: str = ""  # "simplejpeg" or "crop": the decoder alone in threads, no pipeline
    recipe_only: bool = False


def _threads(prefetch: int = 0, threads: int = CORES) -> Callable[[list[str], bool], Any]:
    def make(urls: list[str], recipe: bool) -> Any:
        return wdspipes_pipe(urls, recipe, threads=threads, prefetch=prefetch)

    return make


MODES = {
    mode.label: mode
    for mode in [
        Mode("bound", alone="simplejpeg"),
        Mode("crop bound", alone="crop", recipe_only=True),
        Mode("one thread", wdspipes_pipe, in_process),
        Mode("threads", _threads(), in_process),
        Mode("prefetch + threads", _threads(PREFETCH), in_process),
        Mode("DataLoader", wdspipes_pipe, dataloader(WORKERS)),
        Mode("DataLoader2", wdspipes_pipe, dataloader2(WORKERS)),
        Mode("webdataset", webdataset_pipe, dataloader(WORKERS)),
        Mode("DataLoader2 1x2", _threads(threads=2), dataloader2(1)),
        Mode("DataLoader 1x2", _threads(threads=2), dataloader(1)),
    ]
}
"""The modes by the names ``--only`` takes."""

DESCRIPTIONS = {
    "bound": f"simplejpeg alone, {CORES} threads, bytes in memory",
    "crop bound": f"the crop decoder alone, {CORES} threads, bytes in memory",
    "one thread": "wdspipes, one process, no threads",
    "threads": f"wdspipes, one process, decode threads={CORES}",
    "prefetch + threads": f"wdspipes, one process, prefetch_items({PREFETCH}), threads={CORES}",
    "DataLoader": f"wdspipes + DataLoader, {WORKERS} workers",
    "DataLoader2": f"wdspipes + DataLoader2, {WORKERS} workers",
    "webdataset": f"webdataset + DataLoader, {WORKERS} workers",
    "DataLoader2 1x2": "wdspipes + DataLoader2, 1 worker x 2 threads",
    "DataLoader 1x2": "wdspipes + DataLoader, 1 worker x 2 threads",
}


@dataclass
class Run:
    """One run of a mode, as its process reports it (times in seconds)."""

    images: int = 0
    first_batch: float = 0.0
    from_first: float = 0.0  # images/s from the first batch on
    whole: float = 0.0  # images/s from building the loader to the last batch
    main_cpu: float = 0.0
    workers_cpu: float = 0.0
    peak_rss: float = 0.0  # MiB, the peak of all processes' RSS summed (sampled from outside)
    hwm_sum: float = 0.0  # MiB, each process's own peak RSS, summed (as the last epoch ends)
    pss: float = 0.0  # MiB, all processes' PSS summed as the last epoch ends
    load: float = 0.0  # the 1-minute load average as the run began


def run_loader(mode: Mode, urls: list[str], recipe: bool, epochs: int, images: int) -> Run:
    """Build the mode's loader and read ``epochs`` epochs, checking each."""
    assert mode.make_pipe is not None and mode.wrap is not None
    shape = (CROP, CROP, 3) if recipe else (256, 256, 3)
    cpu_before = _cpu()
    start = time.perf_counter()
    loader, close = mode.wrap(mode.make_pipe(urls, recipe))
    first, first_count, numbers = 0.0, 0, []
    for epoch in range(epochs):
        numbers.clear()
        for pixels, labels in loader:
            if not first:
                first, first_count = time.perf_counter(), len(labels)
            if tuple(pixels.shape[1:]) != shape:
                raise AssertionError(f"images of shape {tuple(pixels.shape)}, expected {shape}")
            numbers.extend(int(label) for label in labels)
        if sorted(numbers) != list(range(images)):
            raise AssertionError(f"epoch {epoch + 1}: not every image exactly once")
    end = time.perf_counter()
    hwm_sum, pss = memory_now()
    close()
    main_cpu, workers_cpu = (b - a for a, b in zip(cpu_before, _cpu(), strict=True))
    total = epochs * images
    return Run(
        images=total,
        first_batch=first - start,
        from_first=(total - first_count) / (end - first),
        whole=total / (end - start),
        main_cpu=main_cpu,
        workers_cpu=workers_cpu,
        hwm_sum=hwm_sum,
        pss=pss,
    )


def run_alone(kind: str, urls: list[str], epochs: int) -> Run:
    """The decoder alone on ``CORES`` threads over the bytes in memory, ``epochs`` times; its
    "first batch" is the moment its first ``BATCH`` images are decoded."""
    import random

    import simplejpeg
    import torch

    import wdspipes as wds

    torch.set_num_threads(1)  # the decoder's own rate, no threads of torch's competing
    jpegs = jpeg_bytes(urls) * epochs
    crop = wds.ImageDecoder("rgb8", crop=wds.RandomResizedCrop(CROP))

    def decode(part: list[bytes], stamps: list[float]) -> None:
        rng = random.Random(len(stamps))
        for data in part:
            if kind == "crop":
                crop("jpg", data, rng)
            else:
                simplejpeg.decode_jpeg(data, colorspace="RGB")
            stamps.append(time.perf_counter())

    cpu_before = _cpu()
    stamps: list[list[float]] = [[] for _ in range(CORES)]
    workers = [
        threading.Thread(target=decode, args=(jpegs[i::CORES], stamps[i])) for i in range(CORES)
    ]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    end = time.perf_counter()
    hwm_sum, pss = memory_now()
    every = sorted(stamp for part in stamps for stamp in part)
    first = every[min(BATCH, len(every)) - 1]
    return Run(
        images=len(jpegs),
        first_batch=first - start,
        from_first=(len(jpegs) - BATCH) / (end - first),
        whole=len(jpegs) / (end - start),
        main_cpu=_cpu()[0] - cpu_before[0],
        hwm_sum=hwm_sum,
        pss=pss,
    )


def _cpu() -> tuple[float, float]:
    times = os.times()
    return times.user + times.system, times.children_user + times.children_system


def child(args: argparse.Namespace) -> None:
    """The body of a mode's own process: import, then time, then print the run as JSON."""
    import_libraries(LIBRARIES)
    with quiet():
        import torchdata.dataloader2  # noqa: F401  (imported before the clock, as the others)

        mode, urls = MODES[args.child], json.loads(args.urls)
        if mode.alone:
            run = run_alone(mode.alone, urls, args.epochs)
        else:
            run = run_loader(mode, urls, args.recipe, args.epochs, args.count)
    print(json.dumps(asdict(run)), flush=True)


# --- running the modes, each in a new process, and sampling its memory ------------------------


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it, from ``/proc/<pid>/task/*/children``."""
    found, todo = [], [pid]
    while todo:
        each = todo.pop()
        found.append(each)
        try:
            tasks = os.listdir(f"/proc/{each}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{each}/task/{task}/children") as children:
                    todo.extend(int(c) for c in children.read().split())
            except OSError:
                continue
    return found


PAGE = os.sysconf("SC_PAGE_SIZE")


def resident(pids: Sequence[int]) -> int:
    """Bytes resident (RSS, ``/proc/<pid>/statm``) of ``pids`` together; those gone count 0."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as statm:
                total += int(statm.read().split()[1]) * PAGE
        except (OSError, ValueError, IndexError):
            continue
    return total


def status_field(pid: int, name: str, source: str = "status") -> int:
    """A ``kB`` field (``VmHWM``, ``Pss``) of ``/proc/<pid>/<source>``, in bytes; 0 if gone."""
    try:
        with open(f"/proc/{pid}/{source}") as fields:
            for line in fields:
                if line.startswith(name + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class Sampler:
    """Samples the summed RSS of a process and its descendants in a thread, keeping the peak.
    Reading ``statm`` costs microseconds; ``smaps_rollup`` (PSS) walks every page of a process,
    which at a sample every few tens of ms took a core away from the modes: the mode reads PSS
    itself once, as its last epoch ends (:func:`memory_now`)."""

    def __init__(self, pid: int, every: float) -> None:
        self.pid, self.every, self.peak = pid, every, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, resident(descendants(self.pid)))
            self.stop.wait(self.every)

    def finish(self) -> int:
        self.stop.set()
        self.thread.join()
        return self.peak


def memory_now() -> tuple[float, float]:
    """MiB of this process and its workers together: the sum of each one's peak RSS
    (``VmHWM``), and of their PSS now."""
    pids = descendants(os.getpid())
    hwm = sum(status_field(pid, "VmHWM") for pid in pids)
    pss = sum(status_field(pid, "Pss", "smaps_rollup") for pid in pids)
    return hwm / 2**20, pss / 2**20


def run_mode(
    label: str, urls: list[str], recipe: bool, count: int, args: argparse.Namespace
) -> Run:
    """Run mode ``label`` in a new process, sampling its memory; its run."""
    command = [
        sys.executable,
        __file__,
        "--child",
        label,
        "--urls",
        json.dumps(urls),
        "--count",
        str(count),
        "--epochs",
        str(args.epochs),
    ] + (["--recipe"] if recipe else [])
    load = os.getloadavg()[0]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    sampler = Sampler(process.pid, args.sample)
    output, _ = process.communicate()
    peak = sampler.finish()
    if process.returncode:
        raise RuntimeError(f"mode {label!r} failed with exit code {process.returncode}")
    run = Run(**json.loads(output.strip().splitlines()[-1]))
    run.peak_rss, run.load = peak / 2**20, load
    return run


def measure(
    labels: Sequence[str], urls: list[str], recipe: bool, count: int, args: argparse.Namespace
) -> dict[str, list[Run]]:
    runs: dict[str, list[Run]] = {label: [] for label in labels}
    for _ in range(args.repeat):
        for label in labels:
            runs[label].append(run_mode(label, urls, recipe, count, args))
    return runs


# --- report ----------------------------------------------------------------------------------


def best(runs: Sequence[Run], name: str, highest: bool) -> float:
    values = [getattr(run, name) for run in runs]
    return max(values) if highest else min(values)


def cpu_per_image(runs: Sequence[Run]) -> float:
    """The least CPU seconds an image of the runs, their processes together."""
    return min((run.main_cpu + run.workers_cpu) / run.images for run in runs)


def cell(runs: Sequence[Run], name: str, highest: bool, digits: int = 0) -> str:
    values = [getattr(run, name) for run in runs]
    top = max(values) if highest else min(values)
    if len(values) == 1:
        return f"{top:,.{digits}f}"
    return f"{top:,.{digits}f} ({min(values):,.{digits}f}-{max(values):,.{digits}f})"


def table(runs: dict[str, list[Run]], bound: str, markdown: bool) -> str:
    base = best(runs[bound], "from_first", True)
    rows = []
    for label, each in runs.items():
        images = each[0].images
        rows.append(
            [
                DESCRIPTIONS[label],
                cell(each, "from_first", True),
                f"{best(each, 'from_first', True) / base:.2f}",
                cell(each, "whole", True),
                cell(each, "first_batch", False, 2),
                cell(each, "peak_rss", False),
                cell(each, "pss", False),
                f"{min(r.main_cpu for r in each) / images * 1e6:,.0f}",
                f"{min(r.workers_cpu for r in each) / images * 1e6:,.0f}",
                f"{min(r.load for r in each):.1f}-{max(r.load for r in each):.1f}",
            ]
        )
    headers = [
        "mode",
        "images/s from 1st batch",
        "of bound",
        "images/s whole run",
        "1st batch s",
        "peak RSS MiB",
        "PSS MiB at end",
        "main µs/img",
        "workers µs/img",
        "load",
    ]
    return format_table(headers, rows, markdown)


def ceiling(runs: dict[str, list[Run]], bound: str) -> str | None:
    """What no arrangement of the pipeline can beat on these cores once they are all busy, as
    a share of the bound: the decoder's CPU an image over the pipeline's in one thread (None
    where either mode did not run)."""
    one = runs.get("one thread")
    if not one or bound not in runs:
        return None
    share = cpu_per_image(runs[bound]) / cpu_per_image(one)
    return (
        f"ceiling: {share:.2f} of the bound (the decoder alone's CPU an image, "
        f"{cpu_per_image(runs[bound]) * 1e6:,.0f} µs, over the pipeline's in one thread, "
        f"{cpu_per_image(one) * 1e6:,.0f} µs)"
    )


def targets(runs: dict[str, list[Run]]) -> list[str]:
    """The issue's targets, where their modes ran."""
    lines: list[str] = []
    if "bound" not in runs:
        return lines
    bound = best(runs["bound"], "from_first", True)
    loader = runs.get("DataLoader2")
    if loader:
        rate = best(loader, "from_first", True)
        lines.append(
            f"DataLoader2 >= {BOUND_TARGET:g} of the bound: {rate / bound:.2f}, "
            f"{verdict(rate >= BOUND_TARGET * bound)}"
        )
    threads = runs.get("threads")
    if threads:
        rate = best(threads, "from_first", True)
        lines.append(
            f"one process, threads >= {BOUND_TARGET:g} of the bound: {rate / bound:.2f}, "
            f"{verdict(rate >= BOUND_TARGET * bound)}"
        )
    if threads and loader:
        checks = [
            ("images/s", "from_first", True, 1.0, ">="),
            ("peak RSS", "peak_rss", False, SHARE_TARGET, "<="),
            ("time to first batch", "first_batch", False, SHARE_TARGET, "<="),
        ]
        for what, name, highest, share, sign in checks:
            ours, theirs = best(threads, name, highest), best(loader, name, highest)
            met = ours >= share * theirs if highest else ours <= share * theirs
            lines.append(
                f"one process, {what} {sign} {share:g} x DataLoader2's: {ours / theirs:.2f}, "
                f"{verdict(met)}"
            )
    return lines


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).parent / "data")
    parser.add_argument("--repeat", type=int, help="runs of each mode, interleaved (3; 1)")
    parser.add_argument("--images", type=int, help="photos38k images per shard (250; 16)")
    parser.add_argument("--recipe-images", type=int, help="imagenet images per shard (250; 8)")
    parser.add_argument("--epochs", type=int, help="epochs each run reads (4; 2)")
    parser.add_argument(
        "--only", action="append", choices=sorted(MODES), help="run only these modes"
    )
    parser.add_argument("--no-recipe", action="store_true", help="skip the crop recipe")
    parser.add_argument("--sample", type=float, default=0.1, help="seconds between samples")
    parser.add_argument("--quick", action="store_true", help="tiny shards, one run: a smoke test")
    parser.add_argument("--markdown", action="store_true", help="tables as Markdown")
    parser.add_argument("--json", type=Path, help="write every run to this file")
    # a mode's own process (run by this script):
    parser.add_argument("--child", choices=sorted(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--urls", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--recipe", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = {"repeat": (3, 1), "images": (250, 16), "recipe_images": (250, 8), "epochs": (4, 2)}
    apply_size_defaults(parser, args, sizes)
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        child(args)
        return
    versions = import_libraries(LIBRARIES)
    print_header(
        versions,
        f"each mode in a new process, {args.epochs} epochs a run; best of {args.repeat} runs "
        "(range); memory: peaks of the summed RSS and PSS of the process and its workers, "
        f"sampled from /proc every {args.sample:g} s",
        args.markdown,
    )
    photos = Dataset("photos38k", 8, args.images, ((256, 256), (256, 256)), 95, 11.0)
    recipe = Dataset("imagenet", 8, args.recipe_images, ((320, 480), (280, 420)), 95, 24.0)
    chosen = args.only or list(MODES)
    results: dict[str, Any] = {"command": sys.argv, "versions": versions, "sets": {}}
    sets = [(photos, False)] + ([] if args.no_recipe else [(recipe, True)])
    for dataset, is_recipe in sets:
        labels = [m for m in chosen if is_recipe or not MODES[m].recipe_only]
        urls = ensure_shards(dataset, args.data)
        what = (
            f"the crop recipe, {dataset.images:,} JPEGs of about 400 x 350 cropped to {CROP}"
            if is_recipe
            else f"{dataset.images:,} JPEGs of 256 x 256 (about 38 kB)"
        )
        print_section(f"{what}, batches of {BATCH}, {args.epochs} epochs", args.markdown)
        runs = measure(labels, urls, is_recipe, dataset.images, args)
        base = "crop bound" if is_recipe and "crop bound" in runs else "bound"
        print(table(runs, base if base in runs else labels[0], args.markdown))
        limit = ceiling(runs, base)
        if limit:
            print(limit)
        for line in targets(runs) if not is_recipe else []:
            print(f"target: {line}")
        results["sets"][dataset.name] = {k: [asdict(r) for r in v] for k, v in runs.items()}
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""The demo from start to end: write the shards, train on them, draw the pictures, report.

It reports on standard output, a line for each step and epoch, and shows tqdm progress bars on
standard error when that is a terminal.
"""

from __future__ import annotations

import os
import re
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import torch

from wdspipes.demo.options import DemoOptions
from wdspipes.demo.pictures import loss_plot, prediction_sheet
from wdspipes.demo.shapes import CLASSES, IMAGE_SIZE, write_split
from wdspipes.demo.training import (
    LEARNING_RATE,
    SHUFFLE_BUFFER,
    EpochStats,
    ShapeNet,
    evaluate,
    loader_name,
    make_loader,
    predict,
    reading_pipe,
    train_epoch,
    training_pipe,
)
from wdspipes.tools.progress import progress

__all__ = ["SHEET_IMAGES", "DemoOptions", "DemoResult", "run_demo"]

SHEET_IMAGES = 32
"""How many validation pictures the prediction sheet shows."""

_SHARD_NAME = re.compile(r"(train|val)-\d{4,}\.tar")


@dataclass
class DemoResult:
    """What a run wrote and measured."""

    output: Path
    """The output directory, absolute."""
    train_shards: list[str] = field(default_factory=list)
    val_shards: list[str] = field(default_factory=list)
    epochs: list[tuple[EpochStats, EpochStats]] = field(default_factory=list)
    """Training and validation figures of each epoch."""
    step_losses: list[float] = field(default_factory=list)
    """The training loss of each step."""
    steps_per_epoch: list[int] = field(default_factory=list)

    @property
    def shard_directory(self) -> Path:
        return self.output / "shards"

    @property
    def predictions(self) -> Path:
        """The prediction sheet."""
        return self.output / "predictions.png"

    @property
    def loss_curve(self) -> Path:
        return self.output / "loss.png"


def run_demo(options: DemoOptions) -> DemoResult:
    """Run the demo as ``options`` say, writing into ``options.output`` (created if missing;
    shards of an earlier run there are replaced).

    Raises:
        ValueError: the output is a file.
        OSError: the output cannot be created or written.
    """
    clock = time.perf_counter()
    result = DemoResult(options.output.resolve())
    if result.output.exists() and not result.output.is_dir():
        raise ValueError(f"output {result.output} is a file, not a directory")
    result.shard_directory.mkdir(parents=True, exist_ok=True)
    _tell(
        f"wdspipes demo: {len(CLASSES)} classes of shapes ({', '.join(CLASSES)}) in "
        f"{IMAGE_SIZE} x {IMAGE_SIZE} RGB pictures drawn with Pillow, seed {options.seed}."
    )
    _write_shards(options, result)
    with torch.random.fork_rng(devices=[]), _torch_threads(_threads_for(options.workers)):
        torch.manual_seed(options.seed)
        model = ShapeNet(len(CLASSES))
        _say_plan(model, options)
        _train(model, options, result)
        _draw_predictions(model, result)
    validation_losses = [validation.loss for _, validation in result.epochs]
    loss_plot(result.step_losses, result.steps_per_epoch, validation_losses).save(result.loss_curve)
    _summarize(result, time.perf_counter() - clock)
    return result


def _write_shards(options: DemoOptions, result: DemoResult) -> None:
    """Write both splits with ShardWriter, after removing the shards of an earlier run."""
    clock = time.perf_counter()
    directory = result.shard_directory
    for old in directory.iterdir():
        if _SHARD_NAME.fullmatch(old.name):
            old.unlink()
    result.train_shards = _write_split(directory, "train", options.train_samples, options)
    result.val_shards = _write_split(directory, "val", options.val_samples, options)
    size = sum(os.path.getsize(path) for path in (*result.train_shards, *result.val_shards))
    _tell(
        f"Wrote {options.train_samples:,} training samples in "
        f"{_count(len(result.train_shards), 'shard')} and {options.val_samples:,} validation "
        f"samples in {_count(len(result.val_shards), 'shard')} (fields jpg and cls, "
        f"{size / 2**20:.1f} MiB) with ShardWriter to {directory} in "
        f"{time.perf_counter() - clock:.1f} s."
    )


def _write_split(directory: Path, split: str, count: int, options: DemoOptions) -> list[str]:
    with _bar(count, f"writing {split} shards") as bar:
        return write_split(directory, split, count, options.seed, options.per_shard, bar.update)


def _train(model: ShapeNet, options: DemoOptions, result: DemoResult) -> None:
    """Train for ``options.epochs`` epochs, evaluating after each; record it in ``result``."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, options.epochs)
    batches = training_pipe(result.train_shards, options.batch_size, options.seed)
    train_loader = make_loader(batches, options.workers)
    val_loader = make_loader(reading_pipe(result.val_shards, options.batch_size), options.workers)
    try:
        for epoch in range(1, options.epochs + 1):
            with _bar(options.train_samples, f"epoch {epoch}/{options.epochs}") as bar:
                steps = _Steps(result.step_losses, bar)
                training = train_epoch(model, optimizer, train_loader, steps)
            result.steps_per_epoch.append(steps.count)
            schedule.step()
            validation = evaluate(model, val_loader)
            result.epochs.append((training, validation))
            _say(
                f"epoch {epoch}/{options.epochs}: train loss {training.loss:.3f}, accuracy "
                f"{training.accuracy:.1%}, {training.samples_per_second:,.0f} samples/s | "
                f"validation loss {validation.loss:.3f}, accuracy {validation.accuracy:.1%}"
            )
    finally:
        train_loader.shutdown()
        val_loader.shutdown()


class _Steps:
    """After each training step: count it, keep its loss, show the loss on the progress bar."""

    def __init__(self, losses: list[float], bar: Any) -> None:
        self.losses = losses
        self.bar = bar
        self.count = 0

    def __call__(self, loss: float, samples: int) -> None:
        self.count += 1
        self.losses.append(loss)
        self.bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
        self.bar.update(samples)


def _draw_predictions(model: ShapeNet, result: DemoResult) -> None:
    """Draw the first validation pictures with the model's predictions (read in this process:
    a pipeline is an iterable like any other)."""
    images, labels = next(iter(reading_pipe(result.val_shards, SHEET_IMAGES)))
    predictions = predict(model, images)
    sheet = prediction_sheet(images, labels.tolist(), predictions.tolist(), CLASSES)
    sheet.save(result.predictions)


def _threads_for(workers: int) -> int:
    """Threads for torch in the training process: the CPUs the reading workers leave free."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cpus or 1) - workers)


@contextmanager
def _torch_threads(count: int) -> Iterator[None]:
    """Run the block with torch on ``count`` threads, then restore the number it had."""
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _say_plan(model: ShapeNet, options: DemoOptions) -> None:
    weights = sum(parameter.numel() for parameter in model.parameters())
    workers = {0: "this process", 1: "1 worker process"}.get(
        options.workers, f"{options.workers} worker processes"
    )
    seed, batch_size = options.seed, options.batch_size
    _tell(
        f"Training a CNN ({weights:,} weights) for {_count(options.epochs, 'epoch')}, torch on "
        f"{_count(torch.get_num_threads(), 'thread')}, on batches that {loader_name()} reads in "
        f"{workers} from:"
    )
    _say(f"    WebDataset(train_shards, shardshuffle=True, seed={seed})")
    _say(f'    .buffer_shuffle({SHUFFLE_BUFFER}, seed={seed}).decode("torchrgb")')
    _say(f'    .to_tuple("jpg", "cls").batched({batch_size})')


def _summarize(result: DemoResult, seconds: float) -> None:
    _, validation = result.epochs[-1]
    last = len(result.train_shards) - 1
    _tell(
        f"Done in {seconds:.0f} s: validation accuracy {validation.accuracy:.1%} after "
        f"{_count(len(result.epochs), 'epoch')}. Wrote:"
    )
    _say(f"  shards:      {result.shard_directory}")
    _say(f"  predictions: {result.predictions}")
    _say(f"  loss curve:  {result.loss_curve}")
    _say(f"Look inside: wdspipes info '{result.shard_directory}/train-{{0000..{last:04d}}}.tar'")


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def _bar(total: int, desc: str) -> Any:
    """A bar counting samples (see :func:`wdspipes.tools.progress.progress`)."""
    return progress(total=total, unit=" samples", desc=desc)


def _say(line: str) -> None:
    click.echo(line)


def _tell(text: str) -> None:
    """Write a paragraph on standard output, wrapped to 100 columns."""
    click.echo(textwrap.fill(text, width=100, break_on_hyphens=False, break_long_words=False))

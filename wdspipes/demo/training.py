"""The demo's model and loops: a small CNN, trained on batches read from shards.

The training batches come from the pipeline a real training job uses (:func:`training_pipe`),
run by torchdata's DataLoader2, or by torch's DataLoader where torchdata has no DataLoader2
(0.10 and later, :func:`make_loader`); the loops themselves are plain PyTorch
and take any iterable of ``(images, labels)`` batches:

>>> model = ShapeNet(classes=3)
>>> optimizer = torch.optim.AdamW(model.parameters())
>>> batch = (torch.rand(4, 3, 32, 32), torch.tensor([0, 1, 2, 0]))
>>> stats = train_epoch(model, optimizer, [batch, batch])
>>> stats.samples, evaluate(model, [batch]).samples
(8, 4)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, IterDataPipe

from wdspipes.errors import TorchdataVersionError
from wdspipes.loaders import dataloader2
from wdspipes.pipeline import WebDataset

__all__ = [
    "LEARNING_RATE",
    "SHUFFLE_BUFFER",
    "EpochStats",
    "ShapeNet",
    "TorchLoader",
    "evaluate",
    "loader_name",
    "make_loader",
    "predict",
    "reading_pipe",
    "train_epoch",
    "training_pipe",
]

LEARNING_RATE = 3e-3
"""The AdamW learning rate of the first epoch; it falls along a cosine to 0 after the last."""

SHUFFLE_BUFFER = 1000
"""Samples held by the training pipeline's shuffle buffer: two shards' worth by default."""

Batch = tuple[Tensor, Tensor]
"""Images (float, batch x 3 x height x width, in [0, 1]) and their labels (int64)."""


class ShapeNet(nn.Module):
    """A small CNN: each picture standardized on its own (the colours are random, the shape is
    what counts), a strided 5 x 5 convolution, three 3 x 3 ones with batch norm, global average
    pooling and a linear classifier. About 62,000 weights with the default ``width``. Weights
    and pictures are kept channels last, where torch's CPU convolutions train the demo with
    about an eighth less CPU time."""

    def __init__(self, classes: int, width: int = 16) -> None:
        super().__init__()
        self.features = nn.Sequential(
            *_conv(3, width, kernel=5, stride=2),
            *_conv(width, 2 * width),
            nn.MaxPool2d(2),
            *_conv(2 * width, 4 * width),
            nn.MaxPool2d(2),
            *_conv(4 * width, 4 * width),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.classifier = nn.Linear(4 * width, classes)
        self.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # not in the stubs

    def forward(self, images: Tensor) -> Tensor:
        centred = images - images.mean(dim=(1, 2, 3), keepdim=True)
        standardized = centred / (centred.std(dim=(1, 2, 3), keepdim=True) + 1e-3)
        standardized = standardized.contiguous(memory_format=torch.channels_last)
        logits: Tensor = self.classifier(self.features(standardized))
        return logits


def _conv(inputs: int, outputs: int, kernel: int = 3, stride: int = 1) -> list[nn.Module]:
    convolution = nn.Conv2d(inputs, outputs, kernel, stride, padding=kernel // 2, bias=False)
    return [convolution, nn.BatchNorm2d(outputs), nn.ReLU(inplace=True)]


def reading_pipe(urls: Sequence[str], batch_size: int) -> IterDataPipe[Batch]:
    """Batches of ``(images, labels)`` from the shards at ``urls``, in order, for evaluation."""
    pipe = WebDataset(list(urls)).decode("torchrgb").to_tuple("jpg", "cls")
    batches: IterDataPipe[Batch] = pipe.batched(batch_size)
    return batches


def training_pipe(urls: Sequence[str], batch_size: int, seed: int) -> IterDataPipe[Batch]:
    """Batches of ``(images, labels)`` from the shards at ``urls``, the shards in a new order
    each epoch and the samples shuffled across shards: the same order for the same seed and
    number of workers.

    The buffer holds samples still encoded (a JPEG is smaller than its decoded picture), and
    batches are made in the workers, so that one item, not ``batch_size``, crosses to the
    training process for each batch.
    """
    pipe = (
        WebDataset(list(urls), shardshuffle=True, seed=seed)
        .buffer_shuffle(SHUFFLE_BUFFER, seed=seed)
        .decode("torchrgb")
        .to_tuple("jpg", "cls")
    )
    batches: IterDataPipe[Batch] = pipe.batched(batch_size)
    return batches


def loader_name() -> str:
    """The loader :func:`make_loader` makes here: ``"DataLoader2"`` or ``"torch's DataLoader"``
    (torchdata 0.10 and later have no DataLoader2)."""
    return TorchLoader.name if _dataloader2() is None else "DataLoader2"


def make_loader(pipe: IterDataPipe[Batch], workers: int) -> Any:
    """A loader running ``pipe`` in ``workers`` processes (0: in this process): torchdata's
    DataLoader2, or torch's DataLoader (its workers kept from epoch to epoch) where torchdata
    has no DataLoader2. Call its ``shutdown()`` when done."""
    dl2 = _dataloader2()
    if dl2 is None:
        return TorchLoader(pipe, workers)
    if workers:
        service = dl2.MultiProcessingReadingService(num_workers=workers)
    else:
        service = dl2.InProcessReadingService()
    return dl2.DataLoader2(pipe, reading_service=service)


def _dataloader2() -> ModuleType | None:
    """torchdata's ``dataloader2`` module, or None where torchdata has none."""
    try:
        return dataloader2()
    except TorchdataVersionError:
        return None


class TorchLoader:
    """torch's DataLoader over a pipeline that makes its own batches, with DataLoader2's
    ``shutdown()``: the demo's loader where torchdata has no DataLoader2."""

    name = "torch's DataLoader"

    def __init__(self, pipe: IterDataPipe[Batch], workers: int) -> None:
        self.loader: DataLoader[Batch] | None = DataLoader(
            pipe, batch_size=None, num_workers=workers, persistent_workers=workers > 0
        )

    def __iter__(self) -> Iterator[Batch]:
        if self.loader is None:
            raise RuntimeError("this loader was shut down")
        return iter(self.loader)

    def shutdown(self) -> None:
        """Stop the worker processes (dropping the loader stops them)."""
        self.loader = None


@dataclass(frozen=True)
class EpochStats:
    """Mean loss and accuracy over the samples of one pass, and how long the pass took."""

    loss: float
    accuracy: float
    samples: int
    seconds: float

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0


class _Tally:
    """Sums of loss and correct predictions over the batches of a pass."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.loss = 0.0
        self.correct = 0
        self.samples = 0

    def add(self, loss: Tensor, logits: Tensor, labels: Tensor) -> None:
        self.loss += loss.item() * len(labels)
        self.correct += int((logits.argmax(dim=1) == labels).sum())
        self.samples += len(labels)

    def stats(self) -> EpochStats:
        seconds = time.perf_counter() - self.start
        if not self.samples:
            return EpochStats(float("nan"), float("nan"), 0, seconds)
        return EpochStats(
            self.loss / self.samples, self.correct / self.samples, self.samples, seconds
        )


def train_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Iterable[Batch],
    on_step: Callable[[float, int], object] = lambda loss, samples: None,
) -> EpochStats:
    """One pass of training over ``batches``, calling ``on_step(loss, batch size)`` after each
    step. The time includes waiting for batches: it measures reading and training together."""
    model.train()
    tally = _Tally()
    for images, labels in batches:
        logits = model(images)
        loss = nn.functional.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        tally.add(loss.detach(), logits.detach(), labels)
        on_step(loss.item(), len(labels))
    return tally.stats()


@torch.no_grad()
def evaluate(model: nn.Module, batches: Iterable[Batch]) -> EpochStats:
    """Loss and accuracy of ``model`` on ``batches``."""
    model.eval()
    tally = _Tally()
    for images, labels in batches:
        logits = model(images)
        tally.add(nn.functional.cross_entropy(logits, labels), logits, labels)
    return tally.stats()


@torch.no_grad()
def predict(model: nn.Module, images: Tensor) -> Tensor:
    """The class ``model`` predicts for each of ``images``."""
    model.eval()
    predictions: Tensor = model(images).argmax(dim=1)
    return predictions

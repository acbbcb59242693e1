"""Train a small model with DistributedDataParallel on WebDataset shards, one process per rank.

Run it on one machine with two processes (gloo on CPU, NCCL when every rank has a GPU):

    torchrun --nproc_per_node=2 examples/distributed_training.py --recipe exact
    torchrun --nproc_per_node=2 examples/distributed_training.py --recipe resampled

The first run writes a small dataset (16 shards of 4-class samples: a 16-number feature vector
as ``.npy`` and a class label as ``.cls``) to ``--data``; later runs reuse it. Two recipes:

- ``exact``: every epoch reads every sample once. ``WebDataset(urls, shardshuffle=True)`` splits
  the shuffled shard list among ranks and workers; DataLoader2's DistributedReadingService ends
  every rank's epoch when the first runs out, so ranks train on equal numbers of batches.
- ``resampled``: shards are drawn with replacement without end (``ResampledShards``), and
  ``with_epoch`` makes each reader's epoch a fixed number of batches: equal on every rank by
  construction.

``--loader dataloader`` uses plain ``torch.utils.data.DataLoader`` instead of DataLoader2; the
training loop then wraps it in ``wdspipes.full_sync`` so that ranks stop together.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import tarfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, IterDataPipe

import wdspipes as wds
from wdspipes.loaders import dataloader2

CLASSES = 4
FEATURES = 16
SHARDS = 16
SAMPLES_PER_SHARD = 250
BATCH_SIZE = 32


def write_dataset(directory: Path) -> list[str]:
    """Write the shards (once): class-dependent feature vectors a linear model can separate."""
    urls = [str(directory / f"train-{shard:04d}.tar") for shard in range(SHARDS)]
    if all(os.path.exists(url) for url in urls):
        return urls
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    for shard, url in enumerate(urls):
        partial = url + ".partial"
        with tarfile.open(partial, "w", format=tarfile.USTAR_FORMAT) as archive:
            for index in range(SAMPLES_PER_SHARD):
                key = f"{shard:04d}{index:05d}"
                label = int(rng.integers(CLASSES))
                features = centres[label] + rng.normal(scale=0.8, size=FEATURES)
                buffer = io.BytesIO()
                np.save(buffer, features.astype(np.float32))
                add_member(archive, f"{key}.npy", buffer.getvalue())
                add_member(archive, f"{key}.cls", str(label).encode())
        os.replace(partial, url)  # a shard appears under its name only when complete
    return urls


def add_member(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def make_pipeline(urls: list[str], recipe: str, readers: int) -> IterDataPipe[Any]:
    """Samples to batches of (features, labels, keys), split among ranks and workers."""
    samples: IterDataPipe[Any]
    if recipe == "exact":
        samples = wds.WebDataset(urls, shardshuffle=True)
    else:
        samples = wds.DataPipeline(wds.ResampledShards(urls), wds.tarfile_to_samples())
    pipe = (
        samples.buffer_shuffle(1000).decode().to_tuple("npy", "cls", "__key__").batched(BATCH_SIZE)
    )
    if recipe == "resampled":  # an epoch of about one pass over the data, over all readers
        pipe = pipe.with_epoch(SHARDS * SAMPLES_PER_SHARD // (BATCH_SIZE * readers))
    return pipe


def make_loader(pipe: IterDataPipe[Any], kind: str, workers: int, seed: int) -> Any:
    if kind == "dataloader":
        generator = torch.Generator().manual_seed(seed)
        return DataLoader(pipe, batch_size=None, num_workers=workers, generator=generator)
    dl2 = dataloader2()
    service = dl2.DistributedReadingService()
    if workers:
        service = dl2.SequentialReadingService(
            service, dl2.MultiProcessingReadingService(num_workers=workers)
        )
    loader = dl2.DataLoader2(pipe, reading_service=service)
    loader.seed(seed)
    return loader


def batches(loader: Any, kind: str) -> Iterator[Any]:
    """One epoch of the loader; plain DataLoader through full_sync so that ranks end together."""
    items: Iterable[Any] = wds.full_sync(loader) if kind == "dataloader" else loader
    yield from items


def gather(value: Any) -> list[Any]:
    values: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("wdspipes-example-data"))
    parser.add_argument("--recipe", choices=["exact", "resampled"], default="exact")
    parser.add_argument("--loader", choices=["dataloader2", "dataloader"], default="dataloader2")
    parser.add_argument("--workers", type=int, default=2, help="reader processes per rank")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--summary", type=Path, help="write per-epoch figures here as JSON")
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else None
    if device is not None:
        torch.cuda.set_device(device)
    torch.manual_seed(args.seed)  # the same initial weights on every rank

    if rank == 0:
        urls = write_dataset(args.data)
        print(
            f"{world} ranks x {args.workers} workers, {args.recipe} epochs, {args.loader}; "
            f"data: {len(urls)} shards in {args.data}",
            flush=True,
        )
    dist.barrier()
    urls = write_dataset(args.data)  # every shard exists now: this only lists them

    pipe = make_pipeline(urls, args.recipe, readers=world * max(args.workers, 1))
    loader = make_loader(pipe, args.loader, args.workers, args.seed)
    network = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))
    model = DistributedDataParallel(network.to(device) if device is not None else network)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    report: dict[str, Any] = {"dataset_size": SHARDS * SAMPLES_PER_SHARD, "epochs": []}

    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        keys: list[str] = []
        count = correct = 0
        loss_sum = 0.0
        for features, labels, batch_keys in batches(loader, args.loader):
            if device is not None:
                features, labels = features.to(device), labels.to(device)
            logits = model(features)
            loss = nn.functional.cross_entropy(logits, labels)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            keys.extend(batch_keys)
            count += 1
            correct += int((logits.argmax(1) == labels).sum())
            loss_sum += loss.item() * len(labels)
        elapsed = time.perf_counter() - start
        all_keys, counts, corrects, losses = zip(
            *gather((keys, count, correct, loss_sum)), strict=True
        )
        samples = sum(len(rank_keys) for rank_keys in all_keys)
        figures = {
            "epoch": epoch,
            "batches_per_rank": list(counts),
            "samples": samples,
            "distinct": len({key for rank_keys in all_keys for key in rank_keys}),
            "loss": sum(losses) / samples,
            "accuracy": sum(corrects) / samples,
        }
        report["epochs"].append(figures)
        if rank == 0:
            print(
                f"epoch {epoch}: {samples} samples ({figures['distinct']} distinct) in "
                f"{elapsed:.1f} s, {samples / elapsed:,.0f} samples/s; batches per rank "
                f"{figures['batches_per_rank']}; loss {figures['loss']:.3f}, "
                f"accuracy {figures['accuracy']:.1%}",
                flush=True,
            )
    if hasattr(loader, "shutdown"):
        loader.shutdown()
    if rank == 0 and args.summary is not None:
        args.summary.write_text(json.dumps(report, indent=2))
        print(f"summary: {args.summary}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Checkpoint a training run mid-epoch and resume it: exactly, or with another number of workers.

Each checkpoint holds the model, the optimizer and the loader's state (a few KB: shard indexes,
byte offsets and seed numbers, not samples). Kill the process at any time; run the same command
again and it goes on from the last checkpoint, with exactly the batches the uninterrupted run
would have had::

    python examples/resume_training.py --shards 'data/train-{0000..0007}.tar' --directory run/

Run it again with another ``--workers`` (0 included) and it goes on too: the rest of the
interrupted epoch trains on every sample it had not trained on yet, once, in an order of the
new count, and the epochs after it are normal epochs of the new count. ``--loader`` picks
DataLoader2 (the default) or torchdata's StatefulDataLoader.

The keys of the samples trained on are logged to ``DIRECTORY/trained.log`` (one line per
step, with its epoch) and, at the end, to ``DIRECTORY/trained.json``; the script prints how many
samples, and how many distinct ones, each epoch trained on.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
from torchdata.stateful_dataloader import StatefulDataLoader

import wdspipes as wds
from wdspipes.loaders import dataloader2

CLASSES = 7


def pipeline(shards: str) -> Any:
    """Shards shuffled, samples shuffled in a buffer of 1000, batches of 16 keys and labels."""
    return (
        wds.WebDataset(shards, shardshuffle=True, seed=0)
        .buffer_shuffle(1000, seed=1)
        .decode()
        .to_tuple("__key__", "cls")
        .batched(16)
    )


def make_loader(kind: str, shards: str, workers: int) -> Any:
    """A DataLoader2 (with ``workers`` worker processes, or none) or a StatefulDataLoader."""
    if kind == "stateful":
        return StatefulDataLoader(pipeline(shards), num_workers=workers, batch_size=None)
    dl2 = dataloader2()  # torchdata.dataloader2, without its deprecation banner
    service = dl2.MultiProcessingReadingService(num_workers=workers) if workers else None
    return dl2.DataLoader2(pipeline(shards), reading_service=service)


def save(path: Path, checkpoint: dict[str, Any]) -> None:
    """Write the checkpoint under a temporary name, then rename it: never a torn one."""
    partial = path.with_suffix(".partial")
    torch.save(checkpoint, partial)
    os.replace(partial, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", required=True, help="a shard spec, as WebDataset takes it")
    parser.add_argument("--directory", type=Path, required=True, help="checkpoint and logs")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="may differ on a restart")
    parser.add_argument("--loader", choices=["dataloader2", "stateful"], default="dataloader2")
    parser.add_argument("--checkpoint-every", type=int, default=50, help="steps")
    parser.add_argument("--slow", action="store_true", help="sleep 50 ms a step")
    args = parser.parse_args()

    args.directory.mkdir(parents=True, exist_ok=True)
    checkpoint_path = args.directory / "checkpoint.pt"
    log_path = args.directory / "trained.log"
    torch.manual_seed(0)
    model = torch.nn.Linear(1, CLASSES)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = make_loader(args.loader, args.shards, args.workers)
    epoch = steps = 0
    if checkpoint_path.exists():
        checkpoint = torch.load(checkpoint_path, weights_only=False)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        loader.load_state_dict(checkpoint["loader"])  # saved with any number of workers
        epoch, steps = checkpoint["epoch"], checkpoint["steps"]
        print(f"resuming epoch {epoch} at step {steps} with {args.workers} workers")
    # The log keeps exactly the steps the checkpoint covers: later ones are trained again.
    lines = log_path.read_text().splitlines()[:steps] if log_path.exists() else []
    log_path.write_text("".join(line + "\n" for line in lines))

    try:
        with log_path.open("a") as log:
            while epoch < args.epochs:
                for keys, labels in loader:
                    features = labels.float().unsqueeze(1) / CLASSES
                    loss = torch.nn.functional.cross_entropy(model(features), labels)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    steps += 1
                    log.write(json.dumps({"epoch": epoch, "keys": list(keys)}) + "\n")
                    log.flush()
                    if steps % args.checkpoint_every == 0:
                        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                        state |= {"loader": loader.state_dict(), "epoch": epoch, "steps": steps}
                        save(checkpoint_path, state)
                    if args.slow:
                        time.sleep(0.05)
                epoch += 1
    finally:
        if hasattr(loader, "shutdown"):
            loader.shutdown()  # DataLoader2's workers
    trained = [json.loads(line) for line in log_path.read_text().splitlines()]
    keys_trained = [key for step in trained for key in step["keys"]]
    (args.directory / "trained.json").write_text(json.dumps(keys_trained))
    for number in range(args.epochs):
        epoch_keys = [key for step in trained if step["epoch"] == number for key in step["keys"]]
        print(f"epoch {number}: {len(epoch_keys)} samples, {len(set(epoch_keys))} distinct")
    print(f"trained {steps} steps on {len(keys_trained)} samples; keys in {log_path}")


if __name__ == "__main__":
    main()

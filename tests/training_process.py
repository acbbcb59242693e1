"""A training process, for tests to kill: it reads shards through a loader with two worker
processes, prints ``training`` once it has had 6 items, and goes on slowly for good (the
shards are resampled). Run as ``python tests/training_process.py LOADER START_METHOD SHARDS
[--stall] [--raw]``, LOADER one of ``dataloader2``, ``dataloader`` (torch's) or ``stateful``;
with ``--stall``, each DataLoader2 worker sticks in a stage at its 4th item, and has no prefetch
thread to answer for it (tests/test_parent_watch.py); with ``--raw``, the items are batches of
4 samples' ``bin`` and ``cls`` fields, raw (tests/test_raw_handover.py)."""

from __future__ import annotations

import argparse
import itertools
import time
from typing import Any

import wdspipes as wds

STALL_AT = 3
"""The item (counted from 0) at which each worker sticks, with ``--stall``."""

_COUNT = itertools.count()  # in each worker: its items


def stall(sample: Any) -> Any:
    """The sample; from the worker's :data:`STALL_AT`-th on, after an hour."""
    if next(_COUNT) >= STALL_AT:
        time.sleep(3600)
    return sample


def make_loader(kind: str, method: str, shards: str, stalled: bool, raw: bool = False) -> Any:
    pipe = wds.WebDataset(shards, resampled=True, nshards=4, seed=0)
    pipe = pipe.to_tuple("bin", "cls").batched(4) if raw else pipe.to_tuple("__key__", "cls")
    if kind == "dataloader2":
        from wdspipes.loaders import dataloader2

        dl2 = dataloader2()
        options = {"worker_prefetch_cnt": 0} if stalled else {}
        service = dl2.MultiProcessingReadingService(
            num_workers=2, multiprocessing_context=method, **options
        )
        return dl2.DataLoader2(pipe.map(stall) if stalled else pipe, reading_service=service)
    if kind == "stateful":
        from torchdata.stateful_dataloader import StatefulDataLoader

        return StatefulDataLoader(
            pipe, num_workers=2, batch_size=None, multiprocessing_context=method
        )
    from torch.utils.data import DataLoader

    return DataLoader(pipe, num_workers=2, batch_size=None, multiprocessing_context=method)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("loader", choices=["dataloader2", "dataloader", "stateful"])
    parser.add_argument("method", choices=["fork", "spawn", "forkserver"])
    parser.add_argument("shards")
    parser.add_argument("--stall", action="store_true")
    parser.add_argument("--raw", action="store_true")
    args = parser.parse_args()
    loader = make_loader(args.loader, args.method, args.shards, args.stall, args.raw)
    for step, _item in enumerate(loader):
        if step == 5:
            print("training", flush=True)
        time.sleep(0.01)


if __name__ == "__main__":
    main()

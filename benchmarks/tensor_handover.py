"""What it costs a loader worker to send one tensor to the training process, by size: torch's
way (every storage moved to a new shared-memory segment, whose descriptor the receiver fetches
over a new authenticated socket connection) against the batching stage's way for small storages
(copied into the pickle; ``wdspipes.samples.handover.send_small_by_value``). The crossing point
is where ``handover.SMALL_BYTES`` belongs (here every size goes by value in the second way).

    python benchmarks/tensor_handover.py --markdown
    python benchmarks/tensor_handover.py --count 200 --repeat 3   # quicker

A forked process puts ``--count`` tensors of each size on a multiprocessing queue and the
parent takes them; the time runs from the first tensor taken to the last, so the process's
start is not in it. Each size and way runs ``--repeat`` times, interleaved; the median is
reported with the fastest beside it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from typing import Any

import torch
from common import format_table, import_libraries, print_header

from wdspipes.samples import handover

SIZES = (512, 4 << 10, 16 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20)


def send(queue: Any, done: Any, count: int, nbytes: int, by_value: bool) -> None:
    if by_value:  # every size by value here (the sender is a forked copy: the parent keeps it)
        handover.SMALL_BYTES = 1 << 40
        handover.send_small_by_value()
    for _ in range(count):
        queue.put(torch.zeros(nbytes, dtype=torch.uint8))
    queue.put(None)
    done.wait()  # the receiver fetches shared segments' descriptors from this process


def microseconds_per_tensor(count: int, nbytes: int, by_value: bool) -> float:
    context = multiprocessing.get_context("fork")
    queue, done = context.Queue(), context.Event()
    sender = context.Process(target=send, args=(queue, done, count, nbytes, by_value))
    sender.start()
    try:
        queue.get()
        start = time.perf_counter()
        taken = 1
        while queue.get() is not None:
            taken += 1
        seconds = time.perf_counter() - start
    finally:
        done.set()
        sender.join()
    assert taken == count
    return seconds / (count - 1) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000, help="tensors per run (1000)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per size and way (5)")
    parser.add_argument("--markdown", action="store_true", help="print tables as Markdown")
    args = parser.parse_args()
    versions = import_libraries(["torch"])
    print_header(versions, "time.perf_counter in the receiving process", args.markdown)
    rows = []
    for nbytes in SIZES:
        runs: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.repeat):
            for by_value in (False, True):
                runs[by_value].append(microseconds_per_tensor(args.count, nbytes, by_value))
        shared, copied = statistics.median(runs[False]), statistics.median(runs[True])
        rows.append(
            [
                f"{nbytes:,}",
                f"{shared:,.0f} ({min(runs[False]):,.0f})",
                f"{copied:,.0f} ({min(runs[True]):,.0f})",
                f"{shared / copied:.2f}",
            ]
        )
    headers = ["bytes", "torch's way, us (fastest)", "by value, us (fastest)", "ratio"]
    print(format_table(headers, rows, args.markdown))
    print(f"handover.SMALL_BYTES = {handover.SMALL_BYTES:,}")


if __name__ == "__main__":
    main()

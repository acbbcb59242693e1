"""Read shards over HTTP with a local shard cache, all on one machine.

It writes a few shards, serves them with Python's own HTTP server on 127.0.0.1, and reads them
through ``WebDataset("http://...", cache_dir=...)``:

- epoch 1 streams every shard from the server and, as the bytes arrive, keeps a copy in the
  cache directory;
- epoch 2 reads the copies: the server gets no request;
- epoch 3 runs under DataLoader2 with two worker processes, which share the cache.

Run it with ``python examples/remote_cache.py`` (``--dir`` keeps the files somewhere you choose).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import wdspipes as wds
from wdspipes.loaders import dataloader2

SHARDS = 4
SAMPLES_PER_SHARD = 50


class CountingHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the files of one directory and counts the GET requests, quietly."""

    requests: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.requests.append(self.path)
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve ``directory`` on 127.0.0.1 (a free port) while the block runs; yields its URL."""
    handler = functools.partial(CountingHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def write_shards(directory: Path) -> None:
    with wds.ShardWriter(str(directory / "train-%03d.tar"), maxcount=SAMPLES_PER_SHARD) as sink:
        for index in range(SHARDS * SAMPLES_PER_SHARD):
            sink.write({"__key__": f"{index:06d}", "cls": index % 10, "txt": f"sample {index}"})


def make_pipeline(base_url: str, cache_dir: Path) -> Any:
    urls = f"{base_url}/train-{{000..{SHARDS - 1:03d}}}.tar"
    return (
        wds.WebDataset(urls, shardshuffle=True, cache_dir=str(cache_dir), cache_size=10**9)
        .decode()
        .to_tuple("__key__", "cls", "__local_path__")
        .batched(16)
    )


def read_epoch(batches: Any) -> tuple[int, set[str]]:
    """Samples read, and the local files they came from."""
    count, local_paths = 0, set()
    for keys, _labels, paths in batches:
        count += len(keys)
        local_paths.update(paths)
    return count, local_paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="where to write (default: a temporary dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wdspipes-remote-") as scratch:
        root = args.dir or Path(scratch)
        served, cache_dir = root / "served", root / "cache"
        write_shards(served)
        with serve(served) as base_url:
            pipe = make_pipeline(base_url, cache_dir)
            total = SHARDS * SAMPLES_PER_SHARD
            for epoch in (1, 2):
                before = len(CountingHandler.requests)
                count, paths = read_epoch(pipe)
                requests = len(CountingHandler.requests) - before
                print(f"epoch {epoch}: {count} samples, {requests} requests to the server")
                check(count == total, f"epoch {epoch} read {count} samples, not {total}")
                check(requests == (SHARDS if epoch == 1 else 0), "unexpected requests")
            cached = sorted(path.name for path in cache_dir.iterdir() if path.suffix == ".tar")
            print(f"cache: {len(cached)} shards in {cache_dir}, e.g. {cached[0]}")
            check(len(cached) == SHARDS, f"{len(cached)} shards cached, not {SHARDS}")
            check(paths <= {str(cache_dir / name) for name in cached}, "samples not from cache")

            dl2 = dataloader2()
            service = dl2.MultiProcessingReadingService(num_workers=2)
            loader = dl2.DataLoader2(pipe, reading_service=service)
            try:
                before = len(CountingHandler.requests)
                count, _ = read_epoch(loader)
                requests = len(CountingHandler.requests) - before
            finally:
                loader.shutdown()
            print(f"epoch 3, DataLoader2 with 2 workers: {count} samples, {requests} requests")
            check(count == total and requests == 0, "the workers did not read the cache")


def check(condition: bool, problem: str) -> None:
    if not condition:
        raise SystemExit(f"remote_cache.py: {problem}")


if __name__ == "__main__":
    main()

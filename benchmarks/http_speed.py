"""HTTP read-speed benchmark: wdspipes' in-process HTTP reader against curl, from a local server.

Generates (or reuses) the datasets of ``read_speed.py`` (100 KB and 1 KB samples, uncompressed
tar shards in ``benchmarks/data/``), serves them from a local static server in a subprocess,
and reads every shard to its end with each reader:

- curl, one process per shard: ``curl -s -o /dev/null URL``, one after the other;
- curl, one process for all shards: ``curl -s -o /dev/null URL1 -o /dev/null URL2 ...``
  (one connection, kept alive);
- ``open_http`` raw: ``wdspipes.io.http.open_http(url)`` read in 1 MiB pieces to the end;
- wdspipes over HTTP: ``DataPipeline(SimpleShardList(urls), tarfile_to_samples())`` on the
  ``http://`` URLs (open, tar walk, grouping into samples);
- wdspipes over ``pipe:curl``: the same pipeline on ``pipe:curl -sf URL`` URLs, the way to read
  HTTP shards before wdspipes read them itself;
- wdspipes, local files: the same pipeline on the shard paths (the page cache is warm).

The server is the standard library's ``ThreadingHTTPServer`` (HTTP/1.1, keep-alive) with a
handler that sends each file with ``socket.sendfile`` (zero-copy ``sendfile(2)``) in a
process of its own, so that it does not share the client's interpreter lock. Each reader runs
``--repeat`` times, interleaved with the others, and the best run is reported. MB means 10**6
bytes; MB/s counts the bytes of the shard files.

Target: reading shards of 100 KB samples over HTTP at 80% or more of the better curl's MB/s,
judged for the raw stream (``open_http``) and for the whole read (wdspipes over HTTP).

Usage::

    python benchmarks/http_speed.py --markdown --repeat 7
    python benchmarks/http_speed.py --quick      # smoke run on tiny shards
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

from common import (
    apply_size_defaults,
    format_table,
    import_libraries,
    print_header,
    print_section,
    quiet,
    verdict,
)
from read_speed import (
    MB,
    DatasetSpec,
    big_dataset,
    ensure_shards,
    small_dataset,
    tally_samples,
)

CURL_TARGET = 0.8  # 100 KB samples: MB/s over HTTP against the better curl's
RAW_PIECE = 1 << 20

Reader = Callable[[list[str]], tuple[int, int]]  # urls -> (samples, file bytes)


# --- the server (run in a subprocess: ``http_speed.py --serve DIR``) --------------------------


class SendfileHandler(BaseHTTPRequestHandler):
    """GET of a file under the served directory, sent with ``socket.sendfile``."""

    protocol_version = "HTTP/1.1"
    root = Path(".")

    def do_GET(self) -> None:
        path = (self.root / unquote(self.path.split("?", 1)[0]).lstrip("/")).resolve()
        if not path.is_relative_to(self.root):  # no ../ out of the served directory
            self.send_error(404)
            return
        try:
            file = open(path, "rb")  # noqa: SIM115 (closed below, after the headers are sent)
        except OSError:
            self.send_error(404)
            return
        with file:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-tar")
            self.send_header("Content-Length", str(os.fstat(file.fileno()).st_size))
            self.end_headers()
            try:
                self.connection.sendfile(file)
            except (BrokenPipeError, ConnectionResetError):  # the client stopped reading
                self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


def serve(directory: Path) -> None:
    SendfileHandler.root = directory.resolve()
    with ThreadingHTTPServer(("127.0.0.1", 0), SendfileHandler) as server:
        server.daemon_threads = True
        print(server.server_address[1], flush=True)
        server.serve_forever()


@dataclass
class Server:
    """The server subprocess and the base URL of the directory it serves."""

    process: subprocess.Popen[str]
    base: str

    @classmethod
    def start(cls, directory: Path) -> Server:
        command = [sys.executable, str(Path(__file__).resolve()), "--serve", str(directory)]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None
        port = int(process.stdout.readline())
        return cls(process, f"http://127.0.0.1:{port}")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


# --- readers: each returns (samples, bytes of the shard files read) ---------------------------


def read_curl_each(urls: list[str], samples_per_shard: int) -> tuple[int, int]:
    for url in urls:
        subprocess.run(["curl", "-sf", "-o", "/dev/null", url], check=True)
    return samples_per_shard * len(urls), -1


def read_curl_all(urls: list[str], samples_per_shard: int) -> tuple[int, int]:
    command = ["curl", "-sf"]
    for url in urls:
        command += ["-o", "/dev/null", url]
    subprocess.run(command, check=True)
    return samples_per_shard * len(urls), -1


def read_open_http(urls: list[str], samples_per_shard: int) -> tuple[int, int]:
    from wdspipes.io.http import open_http

    total = 0
    for url in urls:
        stream = open_http(url)
        try:
            while data := stream.read(RAW_PIECE):
                total += len(data)
        finally:
            stream.close()
    return samples_per_shard * len(urls), total


def read_wdspipes(urls: list[str]) -> tuple[int, int]:
    import wdspipes

    pipe = wdspipes.DataPipeline(wdspipes.SimpleShardList(urls), wdspipes.tarfile_to_samples())
    samples, _ = tally_samples(pipe)
    return samples, -1


# --- measuring ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    reader: str
    samples: int
    seconds: tuple[float, ...]
    file_bytes: int

    @property
    def best(self) -> float:
        return min(self.seconds)

    @property
    def mb_per_second(self) -> float:
        return self.file_bytes / MB / self.best


def measure(
    readers: dict[str, tuple[Reader, list[str]]], repeat: int, samples: int, file_bytes: int
) -> list[Row]:
    """Time each reader ``repeat`` times, interleaved; check every one read everything."""
    seconds: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(repeat):
        for name, (reader, urls) in readers.items():
            with quiet():
                start = time.perf_counter()
                got_samples, got_bytes = reader(urls)
                seconds[name].append(time.perf_counter() - start)
            if got_samples != samples or got_bytes not in (-1, file_bytes):
                raise RuntimeError(f"{name} read {got_samples} samples, {got_bytes} B")
    return [Row(name, samples, tuple(seconds[name]), file_bytes) for name in readers]


def benchmark(
    spec: DatasetSpec, paths: list[str], server: Server, args: argparse.Namespace
) -> dict[str, Row]:
    directory = spec.directory(args.data)
    urls = [f"{server.base}/{Path(path).relative_to(directory)}" for path in paths]
    per_shard = spec.samples_per_shard
    readers: dict[str, tuple[Reader, list[str]]] = {
        "curl, a process per shard": (
            functools.partial(read_curl_each, samples_per_shard=per_shard),
            urls,
        ),
        "curl, one process": (functools.partial(read_curl_all, samples_per_shard=per_shard), urls),
        "open_http, raw bytes": (
            functools.partial(read_open_http, samples_per_shard=per_shard),
            urls,
        ),
        "wdspipes over HTTP": (read_wdspipes, urls),
        "wdspipes over pipe:curl": (read_wdspipes, [f"pipe:curl -sf {url}" for url in urls]),
        "wdspipes, local files": (read_wdspipes, paths),
    }
    file_bytes = sum(os.path.getsize(path) for path in paths)
    samples = per_shard * len(paths)
    rows = measure(readers, args.repeat, samples, file_bytes)
    print_section(f"{spec.title}: {len(paths)} shards x {per_shard} samples", args.markdown)
    print(f"files: {file_bytes / MB:,.1f} MB\n")
    curl = max(row.mb_per_second for row in rows if row.reader.startswith("curl"))
    table = [
        [
            row.reader,
            f"{row.mb_per_second:,.1f}",
            f"{row.samples / row.best:,.0f}",
            f"{row.mb_per_second / curl:.2f}",
            f"{row.best:.3f}",
        ]
        for row in rows
    ]
    headers = ["reader", "MB/s", "samples/s", "vs best curl", "best s"]
    print(format_table(headers, table, args.markdown))
    return {row.reader: row for row in rows}


def print_target(rows: dict[str, Row], markdown: bool, quick: bool) -> None:
    print_section("target", markdown)
    mark = "- " if markdown else "  "
    if quick:
        print(f"{mark}(--quick: shards too small to judge; fixed costs per shard dominate)")
    curl = max(rows[name].mb_per_second for name in rows if name.startswith("curl"))
    for name in ("wdspipes over HTTP", "open_http, raw bytes"):
        ours = rows[name].mb_per_second
        print(
            f"{mark}100 KB samples, {name}: {ours:,.1f} MB/s >= {CURL_TARGET:g} x best curl "
            f"{curl:,.1f} = {CURL_TARGET * curl:,.1f} ({ours / curl:.2f}x): "
            f"{verdict(ours >= CURL_TARGET * curl)}"
        )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default_data = Path(__file__).resolve().parent / "data"
    parser.add_argument("--data", type=Path, default=default_data, help="shard directory")
    parser.add_argument("--big-shards", type=int, help="100 KB dataset shards (4; quick 2)")
    parser.add_argument("--big-samples", type=int, help="100 KB samples per shard (300; 20)")
    parser.add_argument("--small-shards", type=int, help="1 KB dataset shards (8; quick 2)")
    parser.add_argument("--small-samples", type=int, help="1 KB samples per shard (5000; 500)")
    parser.add_argument("--repeat", type=int, help="runs per reader, best reported (5; 1)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--markdown", action="store_true", help="print tables as Markdown")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    defaults = {
        "big_shards": (4, 2),
        "big_samples": (300, 20),
        "small_shards": (8, 2),
        "small_samples": (5000, 500),
        "repeat": (5, 1),
    }
    apply_size_defaults(parser, args, defaults)
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.serve is not None:
        serve(args.serve)
        return
    if shutil.which("curl") is None:
        sys.exit("curl is not installed")
    start = time.perf_counter()
    versions = import_libraries(["urllib3", "wdspipes"])
    curl_version = subprocess.run(["curl", "--version"], capture_output=True, text=True, check=True)
    versions["curl"] = curl_version.stdout.split()[1]
    timing = (
        f"single-threaded client, best of {args.repeat} run(s) per reader (interleaved); "
        "server: ThreadingHTTPServer + socket.sendfile in a subprocess on 127.0.0.1; "
        "MB = 10^6 bytes of shard files"
    )
    print_header(versions, timing, args.markdown)
    big, small = big_dataset(args.big_samples), small_dataset(args.small_samples)
    datasets = [
        (big, ensure_shards(big, args.data, args.big_shards)[0]),
        (small, ensure_shards(small, args.data, args.small_shards)[0]),
    ]
    results = {}
    for spec, paths in datasets:
        server = Server.start(spec.directory(args.data))
        try:
            results[spec.slug] = benchmark(spec, paths, server, args)
        finally:
            from wdspipes.io.http import close_connections

            close_connections()
            server.stop()
    print_target(results["100kb"], args.markdown, args.quick)
    print(f"\ntotal time: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()

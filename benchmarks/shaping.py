"""A network that behaves like an object store's, on 127.0.0.1: a TCP proxy that holds the first
byte of each response for a latency and caps what each connection carries, in front of a
static HTTP server (sendfile, Range honoured) or an S3 server (moto). Used by
``remote_speed.py``; run alone, it serves a directory for a person to try::

    python benchmarks/shaping.py --directory benchmarks/data/100kb-40 --latency 0.1 --rate 40

The proxy moves bytes with ``splice(2)`` (socket to pipe to socket), so that its own cost per
byte is the kernel's, not the interpreter's: it runs beside the reader it measures on the same
cores. Each connection gets two threads, one per direction. A request is the first bytes from
the client after the previous response began; its response's first byte leaves the proxy no
sooner than ``latency`` seconds after the request arrived, and then at most ``rate`` bytes a
second (per connection; the aggregate is not capped). With ``--nagle`` the proxy writes to its
clients with Nagle's algorithm on, as Python's ``http.server`` does; object stores do not.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

SLICE = 1 << 16  # bytes moved per pacing step
PIPE_SIZE = 1 << 20


class _Connection:
    """One client connection through the proxy, and when its pending request arrived."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.requested_at: float | None = None  # a request waits for its first byte

    def close(self) -> None:
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def _spliced(connection: _Connection) -> Iterator[tuple[int, int]]:
    """A pipe to move one direction of ``connection`` through; when the direction ends (or
    fails: either side gone), the pipe is closed and the connection shut down both ways."""
    read, write = os.pipe()
    with contextlib.suppress(OSError):
        import fcntl

        fcntl.fcntl(write, 1031, PIPE_SIZE)  # F_SETPIPE_SZ
    try:
        yield read, write
    except OSError:
        pass
    finally:
        os.close(read)
        os.close(write)
        connection.close()


@dataclass
class Shaping:
    latency: float  # seconds before each response's first byte
    rate: float  # bytes a second, per connection; 0 for no cap
    nagle: bool = False  # write to clients with Nagle's algorithm on


class ShapingProxy:
    """The proxy: listens on 127.0.0.1 (port 0), connects each client to ``upstream``."""

    def __init__(self, upstream: tuple[str, int], shaping: Shaping) -> None:
        self.upstream = upstream
        self.shaping = shaping
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.port = self.listener.getsockname()[1]

    def serve_forever(self) -> None:
        while True:
            client, _ = self.listener.accept()
            upstream = socket.create_connection(self.upstream)
            for sock in (client, upstream) if not self.shaping.nagle else (upstream,):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = _Connection(client, upstream)
            for target in (self._requests, self._responses):
                threading.Thread(target=target, args=(connection,), daemon=True).start()

    def _requests(self, connection: _Connection) -> None:
        """Client to server, unshaped; notes when each request arrives (before the server
        gets it, so that no answer can leave before its latency)."""
        with _spliced(connection) as pipe:
            client, upstream = connection.client.fileno(), connection.upstream.fileno()
            while moved := os.splice(client, pipe[1], SLICE):
                if connection.requested_at is None:
                    connection.requested_at = time.monotonic()
                while moved:
                    moved -= os.splice(pipe[0], upstream, moved)

    def _responses(self, connection: _Connection) -> None:
        """Server to client: the first byte of a response after the latency, then paced."""
        latency, rate = self.shaping.latency, self.shaping.rate
        began = sent = 0.0
        with _spliced(connection) as pipe:
            client, upstream = connection.client.fileno(), connection.upstream.fileno()
            while True:
                moved = os.splice(upstream, pipe[1], SLICE)
                if not moved:
                    break
                requested = connection.requested_at
                if requested is not None:  # the first bytes of a response
                    connection.requested_at = None
                    now = time.monotonic()
                    if requested + latency > now:
                        time.sleep(requested + latency - now)
                    began, sent = time.monotonic(), 0.0
                if rate:
                    ahead = began + sent / rate - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
                sent += moved
                while moved:
                    moved -= os.splice(pipe[0], client, moved)


# --- the origin: a static HTTP server ---------------------------------------------------------


class RangeFileHandler(BaseHTTPRequestHandler):
    """GET (and HEAD) of a file under ``root``, sent with ``socket.sendfile``; honours
    ``Range: bytes=A-B`` and ``bytes=A-``, and sends an ETag."""

    protocol_version = "HTTP/1.1"
    root = Path(".")

    def do_HEAD(self) -> None:
        self.answer(body=False)

    def do_GET(self) -> None:
        self.answer(body=True)

    def answer(self, body: bool) -> None:
        path = (self.root / unquote(self.path.split("?", 1)[0]).lstrip("/")).resolve()
        if not path.is_relative_to(self.root):  # no ../ out of the served directory
            self.send_error(404)
            return
        try:
            file = open(path, "rb")  # noqa: SIM115 (closed below)
        except OSError:
            self.send_error(404)
            return
        with file:
            info = os.fstat(file.fileno())
            size = info.st_size
            start, end = 0, size
            requested = self.headers.get("Range", "")
            if requested.startswith("bytes=") and size:
                first, _, last = requested[len("bytes=") :].partition("-")
                start = int(first)
                end = min(size, int(last) + 1) if last else size
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
            else:
                self.send_response(200)
            self.send_header("Content-Type", "application/x-tar")
            self.send_header("Content-Length", str(end - start))
            self.send_header("ETag", f'"{info.st_mtime_ns:x}-{size:x}"')
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            if body:
                try:
                    self.connection.sendfile(file, start, end - start)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # many connections open at once: no SYN may be dropped


def serve_directory(directory: Path) -> ThreadingHTTPServer:
    RangeFileHandler.root = directory.resolve()
    server = _Server(("127.0.0.1", 0), RangeFileHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# --- run as a process -------------------------------------------------------------------------


@dataclass
class Running:
    """A shaping proxy (and its origin, for a directory) in a subprocess: its base URL."""

    process: subprocess.Popen[str]
    base: str

    @classmethod
    def start(cls, shaping: Shaping, *, directory: Path | None = None, port: int = 0) -> Running:
        """Serve ``directory`` over HTTP behind the proxy, or put the proxy before ``port``
        on 127.0.0.1 (an S3 server, say)."""
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            f"--latency={shaping.latency}",
            f"--rate={shaping.rate / 1e6}",
        ]
        command += ["--nagle"] if shaping.nagle else []
        command += [f"--directory={directory}"] if directory is not None else [f"--port={port}"]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            process.wait()
            raise RuntimeError("the shaping proxy did not start")
        return cls(process, f"http://127.0.0.1:{int(line)}")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.1, help="seconds (0.1)")
    parser.add_argument("--rate", type=float, default=40.0, help="MB/s per connection (40)")
    parser.add_argument("--nagle", action="store_true", help="Nagle's algorithm on, to clients")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--directory", type=Path, help="serve this directory over HTTP")
    where.add_argument("--port", type=int, help="shape the server on this 127.0.0.1 port")
    args = parser.parse_args(argv)
    port = args.port
    if args.directory is not None:
        port = serve_directory(args.directory).server_address[1]
    shaping = Shaping(args.latency, args.rate * 1e6, args.nagle)
    proxy = ShapingProxy(("127.0.0.1", port), shaping)
    print(proxy.port, flush=True)
    proxy.serve_forever()


if __name__ == "__main__":
    main()

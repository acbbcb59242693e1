"""HTTP(S) and AIStore shards, read from a server on 127.0.0.1 that this file starts, scripts
and stops.

What this file proves:

- the samples of ``http://`` and ``ais://`` shards equal those of the same files read locally,
  in process and under a DataLoader with two forked workers (which open connections of their
  own, leaving their parent's alone);
- a connection dropped anywhere (in a header, in a member, before the first byte, in a chunked
  body, by close or by reset) is resumed with ``Range: bytes=N-`` from the exact byte received,
  against a server honouring Range or ignoring it: no byte lost or read twice;
- 404 and 403 fail at once, naming the URL and the status; 429/5xx, refused connections and
  timeouts are retried with doubling waits, and after ``retries`` retries in a row the error
  names the URL and the byte offset reached, with the last failure chained;
- a shard that changes on the server between attempts is an error;
- an epoch abandoned early leaves no socket open in the client and no request hanging in the
  server (the pytest configuration turns ResourceWarning into errors).

The waits between retries are recorded, not slept.
"""

from __future__ import annotations

import gc
import itertools
import os
import random
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from shardgen import make_tar
from torch.utils.data import DataLoader

import wdspipes as wds
from wdspipes.io import http
from wdspipes.io.http import HttpStatusError, close_connections, open_ais, open_http
from wdspipes.io.ranges import open_ranges
from wdspipes.io.readahead import ReadAhead

Sample = dict[str, Any]

NSHARDS = 4
SPEC = "shard-{000..003}.tar"


# --- the server -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    path: str
    range: str | None
    port: int  # the client's: one per connection


class ShardServer(ThreadingHTTPServer):
    """Serves files under ``root`` with Range support, and misbehaves on request.

    ``/v1/objects/BUCKET/OBJ`` answers like an AIStore proxy: a 307 redirect to
    ``/target/v1/objects/BUCKET/OBJ``, which serves ``root/ais/BUCKET/OBJ``.
    """

    daemon_threads = True
    request_queue_size = 64  # read-ahead connects many at once: no SYN may be dropped

    def __init__(self, root: Path) -> None:
        super().__init__(("127.0.0.1", 0), ShardHandler)
        self.root = root
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)  # notified as each request is recorded
        self.requests: list[Request] = []
        self.statuses: list[int] = []  # answered first, one per request
        self.always_status: int | None = None
        self.drops: list[int] = []  # body offsets to stop at and close, each once, in order
        self.always_drop: int | None = None  # a body offset no response gets past
        self.drop_ranged_only = False  # only responses to a Range request drop
        self.reset = False  # drop with a TCP reset instead of a close
        self.ignore_range = False
        self.chunked = False  # Transfer-Encoding: chunked, no Content-Length
        self.range_shift = 0  # answer a Range request from this many bytes earlier
        self.stall_headers = 0  # requests answered only once `release` is set
        self.stall_paths: set[str] = set()  # every request of these, the same
        self.stall_body_at: int | None = None  # once: stop sending there until `release`
        self.etags: list[str] = []  # per request; the last one stays
        self.accept_ranges = False  # say so: read-ahead then reads large shards in ranges
        self.release = threading.Event()
        self.active = 0  # connections open: handling a request or kept alive
        self.errors: list[BaseException | None] = []  # raised while handling requests

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def ranges(self, path: str | None = None) -> list[str | None]:
        """The Range header of each request (of ``path`` only, if given), in order."""
        return [r.range for r in self.requests if path is None or r.path == path]

    def paths(self) -> list[str]:
        return [request.path for request in self.requests]

    def drop_point(self, start: int, length: int, ranged: bool) -> int | None:
        """Where to cut the response of bytes ``[start, length)``: the first drop there."""
        with self.lock:
            if self.drop_ranged_only and not ranged:
                return None
            if self.always_drop is not None and start <= self.always_drop < length:
                return self.always_drop
            for index, drop in enumerate(self.drops):
                if start <= drop < length:
                    return self.drops.pop(index)
        return None

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if not isinstance(error, ConnectionResetError | BrokenPipeError):  # a client's close
            self.errors.append(error)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.lock:
            self.active += 1
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        try:
            super().shutdown_request(request)  # closes the connection's socket
        finally:
            with self.lock:
                self.active -= 1

    def wait_requests(self, count: int, seconds: float = 10.0) -> bool:
        """Wait until ``count`` requests have been recorded (a client may give up on one before
        the handler's thread gets to it); whether they have."""
        with self.arrived:
            return self.arrived.wait_for(lambda: len(self.requests) >= count, seconds)

    def wait_idle(self, seconds: float = 10.0) -> bool:
        deadline = time.monotonic() + seconds
        while self.active and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.active == 0


class ShardHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    timeout = 10
    server: ShardServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        try:
            self.answer()
        except (BrokenPipeError, ConnectionResetError):  # the client went away
            self.close_connection = True

    def answer(self) -> None:
        server = self.server
        path = urlsplit(self.path).path
        with server.lock:
            server.requests.append(Request(path, self.headers.get("Range"), self.client_address[1]))
            server.arrived.notify_all()
            status = server.statuses.pop(0) if server.statuses else server.always_status
            stall = server.stall_headers > 0
            server.stall_headers -= stall
            stall = stall or path in server.stall_paths
            etag = (
                (server.etags.pop(0) if len(server.etags) > 1 else server.etags[0])
                if server.etags
                else None
            )
        if stall:
            server.release.wait(20)
        if status is not None:
            self.send_error(status)
            return
        if path.startswith("/v1/objects/"):
            self.send_response(307)
            self.send_header("Location", "/target" + path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        file = Path(unquote(path.removeprefix("/target/v1/objects/")))
        file = (
            server.root / "ais" / file
            if path.startswith("/target/")
            else server.root / file.relative_to("/")
        )
        if "forbidden" in file.name:
            self.send_error(403)
            return
        if not file.is_file():
            self.send_error(404)
            return
        self.send_body(file.read_bytes(), etag)

    def send_body(self, data: bytes, etag: str | None) -> None:
        server = self.server
        size = length = len(data)  # length: the end of what is sent
        start = 0
        requested = self.headers.get("Range")
        if requested and not server.ignore_range:
            first, _, last = requested.removeprefix("bytes=").partition("-")
            start = int(first) - server.range_shift
            length = min(size, int(last) + 1) if last else size
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{length - 1}/{size}")
        else:
            self.send_response(200)
        if server.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(length - start))
        if etag is not None:
            self.send_header("ETag", etag)
        if server.accept_ranges:
            self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        stop = server.drop_point(start, length, requested is not None)
        if stop is not None:
            self.write_body(data, start, stop)
            self.close_connection = True
            if server.reset:  # close with RST: bytes in flight may be lost
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
            return
        stall, server.stall_body_at = server.stall_body_at, None
        if stall is not None and start <= stall < length:
            self.wfile.write(data[start:stall])
            server.release.wait(20)
            start = stall
        self.write_body(data, start, length, end=True)

    def write_body(self, data: bytes, start: int, stop: int, end: bool = False) -> None:
        """``data[start:stop]``; chunked, in chunks of 10,000 bytes from ``start``, the last
        one cut off at ``stop`` unless ``end``."""
        if not self.server.chunked:
            self.wfile.write(data[start:stop])
            return
        for offset in range(start, stop, 10_000):
            piece = data[offset : offset + 10_000]
            sent = piece[: stop - offset]
            after = b"\r\n" if len(sent) == len(piece) else b""  # none after a cut chunk
            self.wfile.write(b"%x\r\n%s%s" % (len(piece), sent, after))
        if end:
            self.wfile.write(b"0\r\n\r\n")


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ShardServer]:
    root = tmp_path / "www"
    root.mkdir()
    shard_server = ShardServer(root)
    thread = threading.Thread(target=shard_server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield shard_server
    finally:
        shard_server.release.set()
        close_connections()
        shard_server.wait_idle()
        shard_server.shutdown()
        shard_server.server_close()
        thread.join()
    assert not shard_server.errors


@pytest.fixture(autouse=True)
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits between retries, recorded instead of slept."""
    waits: list[float] = []
    monkeypatch.setattr(http, "_sleep", lambda seconds, stop: waits.append(seconds))
    return waits


def shard_bytes(shard: int) -> bytes:
    """A shard of 12 samples: small and large members (up to 300 KB, past a read chunk)."""
    rng = random.Random(shard)
    members = []
    for index in range(12):
        key = f"{shard:03d}-{index:04d}"
        members.append((f"{key}.cls", str(index).encode()))
        members.append((f"{key}.txt", rng.randbytes(rng.randrange(2000))))
        size = 300_000 if index == 5 else rng.choice([0, 511, 512, 513, 4000, 70_000])
        members.append((f"{key}.bin", rng.randbytes(size)))
    return make_tar(members)


@pytest.fixture
def shards(server: ShardServer) -> list[Path]:
    """The shards, under the server's root and under ``ais/bucket/dir/`` for AIStore."""
    (server.root / "ais" / "bucket" / "dir").mkdir(parents=True)
    paths = []
    for shard in range(NSHARDS):
        data = shard_bytes(shard)
        (server.root / f"shard-{shard:03d}.tar").write_bytes(data)
        (server.root / "ais" / "bucket" / "dir" / f"a b#{shard}.tar").write_bytes(data)
        paths.append(server.root / f"shard-{shard:03d}.tar")
    return paths


def local_samples(paths: list[Path]) -> list[Sample]:
    return [without_url(sample) for sample in wds.WebDataset([str(path) for path in paths])]


def without_url(sample: Sample) -> Sample:
    """The sample without where it was read from (local shards' samples carry their path)."""
    return {key: value for key, value in sample.items() if key not in ("__url__", "__local_path__")}


def read_samples(urls: str | list[str]) -> list[Sample]:
    return [without_url(sample) for sample in wds.WebDataset(urls)]


def first_line(error: BaseException) -> str:
    """An error's message without the line torch adds to errors raised in a datapipe."""
    return str(error).split("\n")[0]


def read_all(url: str, **options: Any) -> bytes:
    stream = open_http(url, **options)
    try:
        return stream.read()
    finally:
        stream.close()


# --- reading ------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [1000, http.CHUNK_SIZE], ids=["small-chunks", "default"])
@pytest.mark.parametrize("readahead", [True, False], ids=["readahead", "no-readahead"])
def test_samples_equal_local_reads(
    server: ShardServer,
    shards: list[Path],
    monkeypatch: pytest.MonkeyPatch,
    chunk_size: int,
    readahead: bool,
) -> None:
    monkeypatch.setattr(http, "CHUNK_SIZE", chunk_size)
    samples = wds.WebDataset(f"{server.url}/{SPEC}", readahead=readahead)
    expected = local_samples(shards)
    got = list(samples)
    assert [without_url(sample) for sample in got] == expected
    assert len(expected) == 12 * NSHARDS
    assert got[0]["__url__"] == f"{server.url}/shard-000.tar"
    assert server.ranges() == [None] * NSHARDS
    ports = {request.port for request in server.requests}
    if readahead:  # the shards ahead were requested at once, on connections of their own
        assert 1 < len(ports) <= NSHARDS
    else:
        assert len(ports) == 1  # one kept-alive connection


def test_reads_of_any_size_give_the_bytes_across_drops(
    server: ShardServer, shards: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http, "CHUNK_SIZE", 4096)
    data = shards[1].read_bytes()
    rng = random.Random(7)
    drops = sorted(rng.sample(range(1, len(data)), 6))
    server.drops = list(drops)
    stream = open_http(f"{server.url}/shard-001.tar")
    parts = []
    while True:
        size = rng.choice([0, 1, 511, 512, 1024, 4095, 4096, 4097, 20_000, 100_000])
        part = stream.read(size)
        if size and not part:
            break
        assert len(part) == size or not stream.read(1)
        parts.append(part)
    stream.close()
    assert b"".join(parts) == data
    assert server.ranges() == [None] + [f"bytes={offset}-" for offset in drops]


def test_a_response_is_a_context_manager(server: ShardServer, shards: list[Path]) -> None:
    with wds.open_url(f"{server.url}/shard-000.tar") as stream:
        assert stream.read() == shards[0].read_bytes()
    assert stream.closed


def test_tunables_are_checked() -> None:
    with pytest.raises(ValueError, match="retries must be >= 0, got -1"):
        open_http("http://127.0.0.1:9/x.tar", retries=-1)
    with pytest.raises(ValueError, match="timeout must be > 0"):
        open_http("http://127.0.0.1:9/x.tar", timeout=0)


def test_closed_stream_refuses_reads(server: ShardServer, shards: list[Path]) -> None:
    stream = open_http(f"{server.url}/shard-000.tar")
    assert stream.read(10) == shards[0].read_bytes()[:10]
    stream.close()
    stream.close()
    assert stream.closed
    with pytest.raises(ValueError, match="closed"):
        stream.read(10)


@pytest.mark.loaders
def test_dataloader_workers_read_on_connections_of_their_own(
    server: ShardServer, shards: list[Path]
) -> None:
    assert read_all(f"{server.url}/shard-000.tar") == shards[0].read_bytes()
    parent_port = server.requests[0].port  # kept alive in this process's pool
    loader = DataLoader(
        wds.WebDataset(f"{server.url}/{SPEC}"),
        batch_size=None,
        num_workers=2,
        multiprocessing_context="fork",
    )
    got = sorted((without_url(sample) for sample in loader), key=lambda s: s["__key__"])
    assert got == sorted(local_samples(shards), key=lambda s: s["__key__"])
    worker_ports = {request.port for request in server.requests[1:]}
    assert len(server.requests) == 1 + NSHARDS
    assert parent_port not in worker_ports and len(worker_ports) >= 2
    del loader
    assert read_all(f"{server.url}/shard-001.tar") == shards[1].read_bytes()
    assert server.requests[-1].port == parent_port  # the parent's connection still works


# --- drops and resuming ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "drops",
    [[100], [512 + 7], [0], [512 * 3], [1, 2, 3], [3000, 70_000, 200_000, 200_001]],
    ids=["first-header", "first-member", "before-any-byte", "block-boundary", "thrice", "many"],
)
def test_dropped_connection_resumes_at_the_byte_received(
    server: ShardServer, shards: list[Path], sleeps: list[float], drops: list[int]
) -> None:
    server.drops = list(drops)
    assert read_samples(f"{server.url}/shard-002.tar") == local_samples(shards[2:3])
    assert server.ranges() == [None] + [f"bytes={offset}-" if offset else None for offset in drops]
    assert len(sleeps) == len(drops)


def test_chunked_body_cut_short_resumes(server: ShardServer, shards: list[Path]) -> None:
    server.chunked = True
    server.drops = [4321, 14_321, 25_000]  # mid-chunk, at a chunk's end, mid-chunk
    assert read_samples(f"{server.url}/shard-001.tar") == local_samples(shards[1:2])
    assert server.ranges() == [None, "bytes=4321-", "bytes=14321-", "bytes=25000-"]


def test_reset_connection_resumes(server: ShardServer, shards: list[Path]) -> None:
    server.drops = [5000, 150_000]
    server.reset = True
    assert read_samples(f"{server.url}/shard-003.tar") == local_samples(shards[3:])
    assert len(server.requests) == 3
    assert all(r and r.startswith("bytes=") for r in server.ranges()[1:])


def test_server_ignoring_range_gives_identical_samples(
    server: ShardServer, shards: list[Path]
) -> None:
    server.ignore_range = True
    server.drops = [100, 8000, 200_000]
    assert read_samples(f"{server.url}/{SPEC}") == local_samples(shards)
    resumed = sorted(r for r in server.ranges() if r is not None)  # shards read at once
    assert resumed == ["bytes=100-", "bytes=200000-", "bytes=8000-"]


def test_drops_that_make_progress_are_retried_without_end(
    server: ShardServer, shards: list[Path], sleeps: list[float]
) -> None:
    server.drops = [1000 * k for k in range(1, 8)]
    assert read_all(f"{server.url}/shard-000.tar", retries=1) == shards[0].read_bytes()
    assert sleeps == [http.BACKOFF] * 7  # the count and the wait start afresh after progress


def test_always_dropping_fails_at_the_offset_after_the_retries(
    server: ShardServer, shards: list[Path], sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http, "RETRIES", 3)
    server.always_drop = 5000
    with pytest.raises(wds.ShardError) as caught:
        read_samples(f"{server.url}/shard-000.tar")
    error = caught.value
    assert not isinstance(error, wds.ShardOpenError)
    assert error.url == f"{server.url}/shard-000.tar" and error.offset == 5000
    assert "at byte 5000" in str(error) and "gave up after 4 attempts" in str(error)
    assert error.__cause__ is not None
    assert server.ranges() == [None] + ["bytes=5000-"] * 3
    assert sleeps == [0.5, 1.0, 2.0]


def test_stall_before_headers_times_out_and_is_retried(server: ShardServer) -> None:
    server.stall_headers = 2
    with pytest.raises(wds.ShardOpenError, match=r"at byte 0: timed out; gave up after 2"):
        open_http(f"{server.url}/shard-000.tar", retries=1, timeout=0.2)
    assert server.wait_requests(2) and len(server.requests) == 2


def test_stall_mid_body_times_out_and_resumes(server: ShardServer, shards: list[Path]) -> None:
    server.stall_body_at = 7000
    assert read_all(f"{server.url}/shard-001.tar", timeout=0.3) == shards[1].read_bytes()
    assert server.ranges() == [None, "bytes=7000-"]


def test_refused_connection_is_retried(sleeps: list[float]) -> None:
    with socket.socket() as probe:  # bound, not listening: refuses, and no one else takes it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        url = f"http://127.0.0.1:{port}/shard.tar"
        with pytest.raises(wds.ShardOpenError) as caught:
            open_http(url, retries=2, backoff=0.25)
    assert str(caught.value) == f"{url}, at byte 0: Connection refused; gave up after 3 attempts"
    assert sleeps == [0.25, 0.5]


def test_range_answered_from_another_byte_is_an_error(
    server: ShardServer, shards: list[Path]
) -> None:
    server.drops = [3000]
    server.range_shift = 100
    with pytest.raises(
        wds.ShardError, match=r"at byte 3000: asked for bytes from 3000, got from 2900"
    ):
        read_all(f"{server.url}/shard-000.tar")


def test_changed_shard_is_an_error(server: ShardServer, shards: list[Path]) -> None:
    server.etags = ['"v1"', '"v2"']
    server.drops = [3000]
    with pytest.raises(
        wds.ShardError, match=r'at byte 3000: shard changed on the server: ETag "v2"'
    ):
        read_all(f"{server.url}/shard-000.tar")


# --- statuses -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "status"), [("missing.tar", "404 Not Found"), ("forbidden.tar", "403 Forbidden")]
)
def test_client_errors_fail_at_once(
    server: ShardServer, sleeps: list[float], name: str, status: str
) -> None:
    url = f"{server.url}/{name}"
    with pytest.raises(wds.ShardOpenError) as caught:
        read_samples(url)
    assert first_line(caught.value) == f"{url}: HTTP {status}"
    assert isinstance(caught.value.__cause__, HttpStatusError)
    assert len(server.requests) == 1 and not sleeps


def test_open_errors_go_through_the_handler(server: ShardServer, shards: list[Path]) -> None:
    urls = [f"{server.url}/missing.tar", f"{server.url}/shard-000.tar"]
    with pytest.warns(wds.DataWarning, match="404"):
        got = [without_url(s) for s in wds.WebDataset(urls, handler=wds.warn_and_continue)]
    assert got == local_samples(shards[:1])


def test_server_errors_are_retried(
    server: ShardServer, shards: list[Path], sleeps: list[float]
) -> None:
    server.statuses = [500, 503, 429]
    assert read_samples(f"{server.url}/shard-000.tar") == local_samples(shards[:1])
    assert len(server.requests) == 4
    assert sleeps == [0.5, 1.0, 2.0]


def test_persistent_server_error_fails_after_the_retries(
    server: ShardServer, sleeps: list[float]
) -> None:
    server.always_status = 500
    url = f"{server.url}/shard-000.tar"
    with pytest.raises(wds.ShardOpenError) as caught:
        open_http(url, retries=3)
    message = "at byte 0: HTTP 500 Internal Server Error; gave up after 4 attempts"
    assert str(caught.value) == f"{url}, {message}"
    assert isinstance(caught.value.__cause__, HttpStatusError)
    assert caught.value.__cause__.status == 500
    assert len(server.requests) == 4 and len(sleeps) == 3


def test_client_error_after_a_drop_is_a_read_error(
    server: ShardServer, sleeps: list[float]
) -> None:
    server.drops = [2000]
    url = f"{server.url}/shard-000.tar"
    (server.root / "shard-000.tar").write_bytes(shard_bytes(0))
    stream = open_http(url)
    (server.root / "shard-000.tar").unlink()  # gone before the resume
    with pytest.raises(wds.ShardError) as caught:
        stream.read()
    stream.close()
    assert not isinstance(caught.value, wds.ShardOpenError)
    assert str(caught.value) == f"{url}, at byte 2000: HTTP 404 Not Found"
    assert len(server.requests) == 2


# --- AIStore ------------------------------------------------------------------------------------


def test_ais_objects_read_through_the_endpoint(
    server: ShardServer, shards: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIS_ENDPOINT", server.url + "/")
    server.drops = [600]
    urls = [f"ais://bucket/dir/a b#{shard}.tar" for shard in range(NSHARDS)]
    got = list(wds.WebDataset(urls))
    assert [without_url(sample) for sample in got] == local_samples(shards)
    assert got[0]["__url__"] == urls[0]
    resumed = [r.path for r in server.requests if r.range is not None]
    object_path = resumed[0]  # one shard was dropped at byte 600: the one that got there first
    assert object_path.startswith("/v1/objects/bucket/dir/a%20b%23")
    requests = [r for r in server.requests if r.path.endswith(object_path)]
    assert [request.path for request in requests] == [
        object_path,
        "/target" + object_path,
        object_path,  # the resume goes through the proxy again, with its Range
        "/target" + object_path,
    ]
    assert [request.range for request in requests] == [None, None, "bytes=600-", "bytes=600-"]


def test_ais_errors_name_the_ais_url(
    server: ShardServer, shards: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIS_ENDPOINT", server.url)
    with pytest.raises(wds.ShardOpenError) as caught:
        read_samples("ais://bucket/missing.tar")
    assert first_line(caught.value) == (
        f"ais://bucket/missing.tar: HTTP 404 Not Found "
        f"(GET {server.url}/v1/objects/bucket/missing.tar)"
    )
    with pytest.raises(wds.ShardOpenError, match=r"^ais://bucket: expected ais://BUCKET/OBJECT"):
        open_ais("ais://bucket")
    monkeypatch.setenv("AIS_ENDPOINT", "aistore:51080")
    with pytest.raises(wds.ShardOpenError, match="must be an http:// or https:// URL"):
        open_ais("ais://bucket/a.tar")


def test_ais_ranges_check_the_endpoint_as_streams_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIS_ENDPOINT", "aistore:51080")
    with pytest.raises(wds.ShardOpenError, match="must be an http:// or https:// URL"):
        open_ranges("ais://bucket/a.tar")
    monkeypatch.delenv("AIS_ENDPOINT")
    with pytest.raises(wds.ShardOpenError, match="AIS_ENDPOINT is not set: set it to your"):
        open_ranges("ais://bucket/a.tar")


def test_ais_without_endpoint_says_to_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIS_ENDPOINT", raising=False)
    with pytest.raises(wds.ShardOpenError) as caught:
        read_samples("ais://bucket/shard-000.tar")
    assert first_line(caught.value) == (
        "ais://bucket/shard-000.tar: AIS_ENDPOINT is not set: set it to your AIStore endpoint, "
        "e.g. export AIS_ENDPOINT=http://aistore:51080"
    )


# --- abandoning ---------------------------------------------------------------------------------


def open_sockets() -> set[str]:
    fds = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                fds.add(fd)
        except OSError:
            continue
    return fds


def test_abandoned_epoch_leaves_no_socket_and_no_busy_server(server: ShardServer) -> None:
    big = make_tar((f"{i:04d}.bin", random.Random(i).randbytes(1 << 20)) for i in range(40))
    (server.root / "big.tar").write_bytes(big)  # 40 MiB: more than the socket buffers hold
    before = open_sockets()
    iterator = iter(wds.WebDataset(f"{server.url}/big.tar"))
    assert next(iterator)["__key__"] == "0000"
    assert server.active == 1
    del iterator
    gc.collect()
    assert server.wait_idle(), "the server is still sending the abandoned shard"
    assert open_sockets() == before


def test_closing_a_stream_early_closes_its_connection(server: ShardServer) -> None:
    big = make_tar([("0000.bin", random.Random(0).randbytes(40 << 20))])
    (server.root / "big.tar").write_bytes(big)
    before = open_sockets()
    stream = open_http(f"{server.url}/big.tar")
    assert stream.read(1000) == big[:1000]
    stream.close()  # the stream is still referenced: closing alone must end the connection
    assert server.wait_idle(), "the server is still sending the abandoned shard"
    assert open_sockets() == before


# --- read-ahead ---------------------------------------------------------------------------------

PART = 100_000
RANGED = ReadAhead(part_size=PART, ranged_above=2 * PART)  # shard-001 is read in 6 ranges


def readahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("wdspipes-readahead")]


def part_ranges(size: int, start: int = PART) -> list[str]:
    """The Range headers of the parts of a shard of ``size`` bytes read in ranges."""
    return [f"bytes={a}-{min(a + PART, size) - 1}" for a in range(start, size, PART)]


def test_readahead_reads_a_large_shard_in_ranges_in_parallel(
    server: ShardServer, shards: list[Path]
) -> None:
    server.accept_ranges = True
    size = shards[1].stat().st_size
    assert size > RANGED.ranged_above  # type: ignore[operator]
    got = [without_url(s) for s in wds.WebDataset(f"{server.url}/{SPEC}", readahead=RANGED)]
    assert got == local_samples(shards)
    ranges = server.ranges("/shard-001.tar")
    assert ranges[0] is None  # the first part comes from the first GET, the rest in ranges
    assert sorted(ranges[1:]) == sorted(part_ranges(size))
    ports = {r.port for r in server.requests if r.path == "/shard-001.tar"}
    assert len(ports) > 1  # on connections of their own


def test_readahead_without_accept_ranges_reads_front_to_back(
    server: ShardServer, shards: list[Path]
) -> None:
    got = [without_url(s) for s in wds.WebDataset(f"{server.url}/{SPEC}", readahead=RANGED)]
    assert got == local_samples(shards)
    assert server.ranges() == [None] * NSHARDS


def test_dropped_range_resumes_at_the_exact_byte(
    server: ShardServer, shards: list[Path], sleeps: list[float]
) -> None:
    server.accept_ranges = True
    server.drop_ranged_only = True
    server.drops = [PART + 12_345, 3 * PART + 1]  # in the second and the fourth part
    size = shards[1].stat().st_size
    got = [without_url(s) for s in wds.WebDataset(f"{server.url}/shard-001.tar", readahead=RANGED)]
    assert got == local_samples(shards[1:2])
    ranges = server.ranges("/shard-001.tar")
    resumed = [f"bytes={PART + 12_345}-{2 * PART - 1}", f"bytes={3 * PART + 1}-{4 * PART - 1}"]
    assert sorted(ranges[1:]) == sorted(part_ranges(size) + resumed)
    assert ranges.index(resumed[0]) > ranges.index(part_ranges(size)[0])
    assert len(sleeps) == 2


def test_shard_changed_between_ranges_is_an_error(server: ShardServer, shards: list[Path]) -> None:
    server.accept_ranges = True
    server.etags = ['"v1"', '"v2"']  # the first answer's, then every later one's
    with pytest.raises(wds.ShardError, match=r'shard changed on the server: ETag "v2", was "v1"'):
        list(wds.WebDataset(f"{server.url}/shard-001.tar", readahead=RANGED))


def test_readahead_drops_resume_at_the_exact_byte(server: ShardServer, shards: list[Path]) -> None:
    server.drops = [100, 5000, 70_001, 150_000]  # taken by whichever shards get there first
    assert read_samples(f"{server.url}/{SPEC}") == local_samples(shards)
    resumed = sorted(r for r in server.ranges() if r is not None)
    assert resumed == sorted(f"bytes={offset}-" for offset in (100, 5000, 70_001, 150_000))


def big_shards(server: ShardServer, count: int) -> list[str]:
    """``count`` shards of 4 MiB, more than the socket buffers hold: a server sending one
    that nobody reads stays busy."""
    urls = []
    for shard in range(count):
        members = ((f"{shard}-{i:04d}.bin", random.Random(i).randbytes(1 << 20)) for i in range(4))
        (server.root / f"big-{shard}.tar").write_bytes(make_tar(members))
        urls.append(f"{server.url}/big-{shard}.tar")
    return urls


@pytest.mark.parametrize("stop", ["break", "exception", "islice", "close"])
def test_stopping_early_leaves_no_thread_socket_or_busy_server(
    server: ShardServer, stop: str
) -> None:
    urls = big_shards(server, 6)
    before = open_sockets()
    pipe = wds.WebDataset(urls)
    if stop == "break":
        for _ in pipe:
            break
    elif stop == "exception":
        with pytest.raises(RuntimeError, match="stop"):
            for _ in pipe:
                raise RuntimeError("stop")
    elif stop == "islice":
        got = list(itertools.islice(pipe, 2))
        assert len(got) == 2
    else:
        iterator = iter(pipe)
        next(iterator)
        assert readahead_threads()
        iterator.close()  # type: ignore[attr-defined]
    assert readahead_threads() == []
    close_connections()
    assert server.wait_idle(), "the server is still sending shards nobody reads"
    assert open_sockets() == before


def test_abandoning_shards_that_wait_for_their_first_byte_ends_at_once(
    server: ShardServer, shards: list[Path]
) -> None:
    server.stall_paths = {"/shard-002.tar", "/shard-003.tar"}  # answered once released
    iterator = iter(wds.WebDataset(f"{server.url}/{SPEC}"))
    next(iterator)
    while len([r for r in server.requests if r.path in server.stall_paths]) < 2:
        time.sleep(0.01)  # both requests wait for their answer
    closing = threading.Thread(target=iterator.close)  # type: ignore[attr-defined]
    closing.start()
    closing.join(60)  # without the aborts, it would wait for the server's release
    try:
        assert not closing.is_alive(), "closing waits for requests in flight"
        assert readahead_threads() == []
    finally:
        server.release.set()
        closing.join()


def test_readahead_memory_stays_within_its_bound(server: ShardServer) -> None:
    urls = big_shards(server, 6)  # 24 MiB
    config = ReadAhead(max_bytes=3 << 20, part_size=1 << 20)
    opener = wds.ShardList(urls).open_shards(readahead=config)
    samples = opener.load_tar().group_samples()
    count = 0
    for _ in samples:
        count += 1
        time.sleep(0.002)  # a slow reader: the background fills what the bound lets it
    assert count == 24
    stats = opener.read_stats
    assert (
        stats is not None
        and stats.shards == 6
        and stats.bytes == sum((server.root / f"big-{n}.tar").stat().st_size for n in range(6))
    )
    assert 0 < stats.peak_bytes <= config.max_bytes + config.part_size

"""Shards in object stores through fsspec: an S3-compatible server (moto's, on 127.0.0.1 only)
read through ``s3://`` URLs, fsspec's ``memory://`` store, errors that name the URL and the
package to install, forked loader workers, and streaming that does not download whole shards.

The moto server runs in this process for the module; fake credentials are set in the
environment for the module only, and ``AWS_ENDPOINT_URL`` points at a closed port on
127.0.0.1 unless a test points it at the server: nothing here reaches another address.
"""

from __future__ import annotations

import gc
import os
import re
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import boto3
import fsspec
import pytest
import s3fs
from moto.moto_server import threaded_moto_server
from shardgen import kill_when_ready, make_tar, write_shards

import wdspipes as wds
from wdspipes.io import open_url
from wdspipes.io.ranges import open_ranges
from wdspipes.io.readahead import ReadAhead
from wdspipes.io.stores import FIRST_BLOCK_SIZE, fsspec_protocols

fsspec_registry = sys.modules["fsspec.registry"]  # fsspec.registry is also a mapping's name

BUCKET = "shards"
NSHARDS = 4
NOWHERE = "http://127.0.0.1:9"  # a closed port: the endpoint of a test that names none


class _Counted:
    """A response stream that counts the bytes written to it, for all requests together."""

    sent = 0
    lock = threading.Lock()

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw

    def write(self, data: bytes) -> int:
        with _Counted.lock:
            _Counted.sent += len(data)
        return self._raw.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class _Handler(threaded_moto_server.MotoRequestHandler):
    """moto's handler, quiet, counting bytes sent, and with one ``Server`` header: moto adds
    its own to werkzeug's, and aiohttp (s3fs's client) rejects a response with two
    (getmoto/moto#9930)."""

    def setup(self) -> None:
        super().setup()
        self.wfile = _Counted(self.wfile)

    def send_response(self, code: int, message: str | None = None) -> None:
        self.log_request(code)
        self.send_response_only(code, message)
        self.send_header("Date", self.date_time_string())

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


@dataclass
class Store:
    endpoint: str
    client: Any  # a boto3 S3 client
    local: list[str]  # the local shards uploaded, as train-000.tar ... under two prefixes


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith("AWS_"):
                patch.delenv(name)
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        patch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        patch.setenv("AWS_CONFIG_FILE", os.devnull)
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
        patch.setenv("AWS_ENDPOINT_URL", NOWHERE)
        patch.setenv("NO_PROXY", "127.0.0.1")
        patch.setattr(threaded_moto_server, "MotoRequestHandler", _Handler)
        server = threaded_moto_server.ThreadedMotoServer(
            ip_address="127.0.0.1", port=0, verbose=False
        )
        server.start()
        try:
            host, port = server.get_host_and_port()
            endpoint = f"http://{host}:{port}"
            client = boto3.client("s3", endpoint_url=endpoint)
            try:
                client.create_bucket(Bucket=BUCKET)
                local = write_shards(tmp_path_factory.mktemp("shards"), NSHARDS, 5, prefix="train")
                for path in local:
                    for prefix in ("", "deep/er/prefix/"):
                        client.upload_file(path, BUCKET, prefix + Path(path).name)
                yield Store(endpoint, client, local)
            finally:
                client.close()
        finally:
            s3fs.S3FileSystem.clear_instance_cache()
            server.stop()


@pytest.fixture
def s3(store: Store) -> Iterator[Store]:
    """The store, with s3fs instances made afresh (they keep the endpoint they were made with)."""
    s3fs.S3FileSystem.clear_instance_cache()
    yield store
    s3fs.S3FileSystem.clear_instance_cache()


def contents(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Samples without their URL."""
    return [
        {k: v for k, v in sample.items() if k not in ("__url__", "__local_path__")}
        for sample in samples
    ]


def test_s3_urls_through_the_endpoint_in_the_environment(
    s3: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    expected = contents(list(wds.WebDataset(s3.local)))
    for prefix in ("", "deep/er/prefix/"):
        samples = list(wds.WebDataset(f"s3://{BUCKET}/{prefix}train-{{000..003}}.tar"))
        assert contents(samples) == expected
        urls = [f"s3://{BUCKET}/{prefix}train-{shard:03d}.tar" for shard in range(NSHARDS)]
        assert sorted({s["__url__"] for s in samples}) == urls


def test_s3_urls_through_storage_options(s3: Store) -> None:
    options = {"endpoint_url": s3.endpoint}
    url = f"s3://{BUCKET}/deep/er/prefix/train-002.tar"
    stream = open_url(url, storage_options=options)
    try:
        assert stream.read() == Path(s3.local[2]).read_bytes()
    finally:
        stream.close()
    spec = f"s3://{BUCKET}/train-{{000..003}}.tar"
    expected = contents(list(wds.WebDataset(s3.local)))
    samples = list(wds.WebDataset(spec, storage_options=options))
    assert contents(samples) == expected
    opened = wds.ShardList(spec).open_shards(storage_options=options).load_tar().group_samples()
    assert contents(list(opened)) == expected


def test_memory_store_needs_no_server(tmp_path: Path) -> None:
    memory = fsspec.filesystem("memory")
    try:
        local = write_shards(tmp_path, 2, 3, prefix="train")
        for path in local:
            memory.pipe(f"/wds-test/train/{Path(path).name}", Path(path).read_bytes())
        samples = list(wds.WebDataset("memory://wds-test/train/train-{000..001}.tar"))
        assert contents(samples) == contents(list(wds.WebDataset(local)))
        assert samples[0]["__url__"] == "memory://wds-test/train/train-000.tar"
        with open_url("memory://wds-test/train/train-001.tar") as stream:
            assert stream.read() == Path(local[1]).read_bytes()
        assert stream.closed
    finally:
        memory.rm("/wds-test", recursive=True)


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("missing.tar", "not found"),
        ("deep/er", "is a directory"),
    ],
)
def test_missing_object_names_the_url(s3: Store, key: str, problem: str) -> None:
    url = f"s3://{BUCKET}/{key}"
    with pytest.raises(wds.ShardOpenError, match=problem) as caught:
        open_url(url, storage_options={"endpoint_url": s3.endpoint})
    assert caught.value.url == url and str(caught.value).startswith(f"{url}: ")


def test_missing_bucket_names_the_url(s3: Store) -> None:
    url = "s3://no-such-bucket/train-000.tar"
    with pytest.raises(wds.ShardOpenError, match="not found") as caught:
        open_url(url, storage_options={"endpoint_url": s3.endpoint})
    assert caught.value.url == url
    assert isinstance(caught.value.__cause__, FileNotFoundError)
    with pytest.warns(wds.DataWarning, match="no-such-bucket"):
        urls = [url, f"s3://{BUCKET}/train-000.tar"]
        options = {"endpoint_url": s3.endpoint}
        samples = list(wds.WebDataset(urls, handler=wds.warn_and_continue, storage_options=options))
    assert len(samples) == 5


def test_read_error_names_the_url_and_offset(s3: Store) -> None:
    key = "vanishing.tar"
    s3.client.put_object(Bucket=BUCKET, Key=key, Body=bytes(3 * FIRST_BLOCK_SIZE))
    url = f"s3://{BUCKET}/{key}"
    stream = open_url(url, storage_options={"endpoint_url": s3.endpoint})
    try:
        assert stream.read(10) == bytes(10)  # the first block is fetched
        s3.client.delete_object(Bucket=BUCKET, Key=key)
        assert len(stream.read(FIRST_BLOCK_SIZE - 10)) == FIRST_BLOCK_SIZE - 10
        with pytest.raises(wds.ShardError) as caught:
            stream.read(10)
    finally:
        stream.close()
    assert not isinstance(caught.value, wds.ShardOpenError)
    assert caught.value.url == url and caught.value.offset == FIRST_BLOCK_SIZE
    assert caught.value.__cause__ is not None


@pytest.mark.parametrize(
    ("scheme", "module", "advice"),
    [
        ("s3", "s3fs", "pip install 'wdspipes[s3]'"),
        ("gcs", "gcsfs", "install gcsfs"),  # fsspec's own advice
    ],
)
def test_missing_implementation_names_the_package(
    monkeypatch: pytest.MonkeyPatch, scheme: str, module: str, advice: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # importing it fails
    monkeypatch.delitem(fsspec_registry._registry, scheme, raising=False)
    url = f"{scheme}://bucket/train-000.tar"
    with pytest.raises(wds.ShardOpenError, match=re.escape(advice)) as caught:
        open_url(url)
    assert caught.value.url == url
    assert isinstance(caught.value.__cause__, ImportError)
    with pytest.raises(wds.ShardOpenError, match=re.escape(advice)) as caught:
        open_ranges(url)  # reading by ranges says the same
    assert caught.value.url == url
    assert isinstance(caught.value.__cause__, ImportError)


def test_missing_fsspec_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fsspec", None)
    assert fsspec_protocols() == set()
    with pytest.raises(wds.ShardOpenError, match=r"pip install 'wdspipes\[s3\]'") as caught:
        open_url("s3://bucket/a.tar")
    assert caught.value.url == "s3://bucket/a.tar"
    with pytest.raises(wds.ShardOpenError, match="unknown URL scheme 'gs'"):
        open_url("gs://bucket/a.tar")


def test_unknown_scheme_still_lists_the_supported_ones() -> None:
    assert {"s3", "gs", "gcs", "az", "abfs", "hf", "memory"} <= fsspec_protocols()
    with pytest.raises(wds.ShardOpenError, match=r"unknown URL scheme 'nosuch'.*file:.*pipe:"):
        open_url("nosuch://bucket/a.tar")


_collected_in: set[int] = set()


def read_keys(sample: dict[str, Any]) -> tuple[str, int]:
    if os.getpid() not in _collected_in:  # as a long-running worker does some time
        _collected_in.add(os.getpid())
        gc.collect()  # collects what the process inherited and nobody holds
    return sample["__key__"], os.getpid()


@pytest.mark.loaders
def test_forked_workers_read_every_sample_once(
    s3: Store, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from torch.utils.data import DataLoader

    closed_by = tmp_path / "closed-by"
    closed_by.mkdir()
    close_session = s3fs.S3FileSystem.close_session

    def recording_close(loop: Any, client: Any) -> None:
        (closed_by / str(os.getpid())).touch()
        close_session(loop, client)

    monkeypatch.setattr(s3fs.S3FileSystem, "close_session", staticmethod(recording_close))
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    spec = f"s3://{BUCKET}/train-{{000..003}}.tar"
    expected = Counter(s["__key__"] for s in wds.WebDataset(s3.local))
    # The parent's filesystem exists before the fork: a child must not close its sessions.
    assert Counter(s["__key__"] for s in wds.WebDataset(spec)) == expected
    loader = DataLoader(
        wds.WebDataset(spec).map(read_keys),
        batch_size=None,
        num_workers=2,
        multiprocessing_context="fork",
    )
    read = list(loader)
    assert Counter(key for key, _ in read) == expected
    assert len({pid for _, pid in read} - {os.getpid()}) == 2
    assert [path.name for path in closed_by.iterdir()] == []


@pytest.mark.parametrize("readahead", [False, True], ids=["no-readahead", "readahead"])
def test_first_sample_does_not_wait_for_the_whole_object(s3: Store, readahead: bool) -> None:
    member = bytes(range(256)) * 400  # 100 KiB
    tar = make_tar((f"{i:04d}.bin", member) for i in range(500))  # 50 MiB
    key = "large.tar"
    s3.client.put_object(Bucket=BUCKET, Key=key, Body=tar)
    options = {"endpoint_url": s3.endpoint}
    before = _Counted.sent
    url = f"s3://{BUCKET}/{key}"
    samples = iter(wds.WebDataset(url, storage_options=options, readahead=readahead))
    try:
        assert next(samples)["bin"] == member
        first = _Counted.sent - before
        if readahead:  # parts read ahead in parallel, within the bound
            bound = ReadAhead().max_bytes + ReadAhead().part_size
            assert ReadAhead().part_size <= first <= bound + 64 * 1024
        else:
            assert first < FIRST_BLOCK_SIZE + 64 * 1024  # one small block and a few headers
        assert sum(1 for _ in samples) == 499
        total = _Counted.sent - before
        assert len(tar) < total < len(tar) + 64 * 1024  # each byte fetched once, few requests
    finally:
        del samples
        gc.collect()
        s3.client.delete_object(Bucket=BUCKET, Key=key)


# --- Writing ----------------------------------------------------------------------------------
# Objects appear only when their upload completes: an abort, or a killed writer, leaves none.

PART = 5 << 20  # S3's smallest multipart part: s3fs starts a multipart upload past one block


def write_options(s3: Store) -> dict[str, Any]:
    return {"endpoint_url": s3.endpoint, "default_block_size": PART}


def keys_under(s3: Store, prefix: str) -> list[str]:
    listed = s3.client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return [entry["Key"] for entry in listed.get("Contents", [])]


def unfinished_uploads(s3: Store, prefix: str) -> list[str]:
    listed = s3.client.list_multipart_uploads(Bucket=BUCKET, Prefix=prefix)
    return [upload["Key"] for upload in listed.get("Uploads", [])]


def test_shard_writer_writes_to_s3_and_lists_the_urls(
    s3: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    pattern = f"s3://{BUCKET}/written/x-%06d.tar"
    options = {"endpoint_url": s3.endpoint}
    samples = contents(list(wds.WebDataset(s3.local)))
    try:
        with wds.ShardWriter(pattern, maxcount=6, storage_options=options) as writer:
            for sample in samples:
                writer.write(sample)
        urls = [pattern % n for n in range(4)]
        assert writer.shards == urls
        assert keys_under(s3, "written/") == [f"written/x-{n:06d}.tar" for n in range(4)]
        assert os.listdir(tmp_path) == []  # no local ./s3:/...
        read = list(wds.WebDataset(writer.shards, storage_options=options))
        assert contents(read) == samples and read[0]["__url__"] == urls[0]
    finally:
        for key in keys_under(s3, "written/"):
            s3.client.delete_object(Bucket=BUCKET, Key=key)


def test_an_aborted_upload_leaves_no_object(s3: Store) -> None:
    url = f"s3://{BUCKET}/aborted/a.tar"
    big = {"__key__": "big", "bin": os.urandom(2 * PART)}
    options = write_options(s3)
    with (
        pytest.raises(RuntimeError, match="mid-upload"),
        wds.TarWriter(url, storage_options=options) as writer,
    ):
        writer.write(big)
        assert unfinished_uploads(s3, "aborted/") == ["aborted/a.tar"]  # parts sent
        raise RuntimeError("mid-upload")
    assert keys_under(s3, "aborted/") == [] and unfinished_uploads(s3, "aborted/") == []


KILLED_UPLOAD = """
import os, sys, time
import wdspipes as wds

url, endpoint = sys.argv[1:]
options = {"endpoint_url": endpoint, "default_block_size": 5 << 20}
writer = wds.TarWriter(url, storage_options=options)
writer.write({"__key__": "big", "bin": os.urandom(12 << 20)})
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_killed_upload_leaves_no_object(s3: Store) -> None:
    url = f"s3://{BUCKET}/killed/k.tar"
    kill_when_ready(KILLED_UPLOAD, url, s3.endpoint)
    try:
        assert keys_under(s3, "killed/") == []
        assert unfinished_uploads(s3, "killed/") == ["killed/k.tar"]  # S3 keeps the parts
    finally:
        listed = s3.client.list_multipart_uploads(Bucket=BUCKET, Prefix="killed/")
        for upload in listed.get("Uploads", []):
            s3.client.abort_multipart_upload(
                Bucket=BUCKET, Key=upload["Key"], UploadId=upload["UploadId"]
            )

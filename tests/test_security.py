"""Untrusted datasets (issue 23; docs/guide/security.md): one test per attack, each done the
way a user would meet it. Names, bytes, shard lists and ``{"url": ...}`` items come from the
data: none of them runs a command, reaches Ghostscript, allocates without bound, gets a secret
printed, writes outside the target directory, or writes to the terminal's controls."""

from __future__ import annotations

import glob
import gzip
import http.server
import io
import json
import logging
import os
import re
import subprocess
import sys
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bombs import gzip_of_zeros, large_member_shard, measure, png_of_zeros
from shardgen import make_tar
from torch.utils.data.datapipes.iter import IterableWrapper

import wdspipes as wds
from wdspipes.cli import main
from wdspipes.io import atomic
from wdspipes.io import http as http_io
from wdspipes.tools.reshard import reshard

WDSPIPES = Path(sys.executable).parent / "wdspipes"
POSTSCRIPT = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\nnewpath 0 0 moveto showpage\n"


def shard(path: Path, members: list[tuple[str, bytes]]) -> str:
    path.write_bytes(make_tar(members))
    return str(path)


def keys(samples: list[dict[str, Any]]) -> list[str]:
    return [sample["__key__"] for sample in samples]


# --- commands: only where the program asked for them ----------------------------------------


def test_a_file_named_like_a_command_is_read_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``WebDataset(sorted(glob("*.tar")))`` in a directory holding a file named
    ``pipe:touch PWNED;x.tar``: the file is read, as any file the glob found."""
    monkeypatch.chdir(tmp_path)
    shard(tmp_path / "a.tar", [("a.txt", b"1")])
    shard(tmp_path / "pipe:touch PWNED;x.tar", [("b.txt", b"2")])
    urls = sorted(glob.glob("*.tar"))
    assert keys(list(wds.WebDataset(urls))) == ["a", "b"]
    cached = wds.WebDataset(urls, cache_dir=tmp_path / "cache", commands="never")
    assert [s["__local_path__"] for s in cached] == urls, "a local file, never cached"
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.slow
def test_the_command_reads_a_file_named_like_a_command(tmp_path: Path) -> None:
    """``wdspipes info *.tar``, the shell expanding the glob."""
    shard(tmp_path / "a.tar", [("a.txt", b"1")])
    shard(tmp_path / "pipe:touch PWNED;x.tar", [("b.txt", b"2")])
    result = subprocess.run(
        f"{WDSPIPES} info *.tar", shell=True, cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "pipe:touch PWNED;x.tar: 1 sample" in result.stdout
    assert not (tmp_path / "PWNED").exists()


@pytest.fixture
def json_shard_list(tmp_path: Path) -> tuple[list[dict[str, Any]], Path]:
    """A shard list read from a JSON file, as a colleague might send it, whose one item runs
    a command; and the file that command would make."""
    good = shard(tmp_path / "good.tar", [("a.txt", b"1")])
    marker = tmp_path / "PWNED"
    listing = tmp_path / "shards.json"
    listing.write_text(json.dumps([{"url": f"pipe:touch {marker}; cat {good}", "lang": "en"}]))
    return json.loads(listing.read_text()), marker


@pytest.mark.parametrize("strict", ["argument", "WDSPIPES_COMMANDS", "WDS_SECURE"])
def test_a_command_in_a_json_shard_list_never_runs_in_strict_mode(
    json_shard_list: tuple[list[dict[str, Any]], Path],
    monkeypatch: pytest.MonkeyPatch,
    strict: str,
) -> None:
    items, marker = json_shard_list
    options: dict[str, Any] = {"commands": "any"}  # strict mode wins over any allowance
    if strict == "argument":
        options = {"commands": "never"}
    dataset = wds.WebDataset(items, **options)
    if strict == "WDSPIPES_COMMANDS":  # read when a shard opens, not at import
        monkeypatch.setenv("WDSPIPES_COMMANDS", "never")
        options = {}
        dataset = wds.WebDataset(items)
    elif strict == "WDS_SECURE":  # webdataset 1.0's switch means this too
        monkeypatch.setenv("WDS_SECURE", "1")
        dataset = wds.WebDataset(items)
    with pytest.raises(wds.ShardOpenError, match="refused: pipe: URLs run a shell command"):
        list(dataset)
    assert not marker.exists()


def test_a_command_from_the_data_runs_only_when_allowed(
    json_shard_list: tuple[list[dict[str, Any]], Path], tmp_path: Path
) -> None:
    items, marker = json_shard_list
    with pytest.raises(ValueError, match=r"came from the data .* commands='any'"):
        list(wds.WebDataset(items))
    assert not marker.exists()
    assert keys(list(wds.WebDataset(items, commands="any"))) == ["a"] and marker.exists()
    good = tmp_path / "good.tar"
    assert keys(list(wds.WebDataset(f"pipe:cat {good}"))) == ["a"], "the program's own runs"
    with pytest.raises(wds.ShardOpenError, match="refused"):
        list(wds.WebDataset(f"pipe:cat {good}", commands="never"))
    with pytest.raises(ValueError, match="commands must be one of"):
        wds.WebDataset(items, commands="sometimes")  # type: ignore[arg-type]


def test_webdatasets_url_opener_and_the_index_treat_dict_items_as_data(
    json_shard_list: tuple[list[dict[str, Any]], Path], tmp_path: Path
) -> None:
    """The same rule in wdspipes.tariterators (a program's own reader) and in a map-style
    index, which is data whether read from a file or given as a list of dicts."""
    items, marker = json_shard_list
    with pytest.raises(ValueError, match="came from the data"):
        list(wds.tariterators.url_opener(items))
    assert not marker.exists()
    good = tmp_path / "good.tar"
    opened = list(wds.tariterators.url_opener([f"pipe:cat {good}"]))
    assert [shard["url"] for shard in opened] == [f"pipe:cat {good}"], "the program's own runs"
    index = [{"url": items[0]["url"], "nsamples": 1}]
    with pytest.raises(wds.ShardIndexError, match="came from the data"):
        wds.ShardListDataset(index)
    assert not marker.exists()
    dataset = wds.ShardListDataset(index, commands="any", cache_dir=str(tmp_path / "cache"))
    assert dataset[0]["__key__"] == "a" and marker.exists()


def test_the_no_commands_flag_refuses_commands_to_read_and_to_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = shard(tmp_path / "good.tar", [("a.txt", b"1")])
    assert main(["info", "--no-commands", f"pipe:cat {good}"]) == 1
    assert "refused: pipe: URLs run a shell command" in capsys.readouterr().out
    out = tmp_path / "out.tar"
    assert main(["cat", "--no-commands", good, "-o", f"pipe:cat > {out}"]) == 1
    assert "refused" in capsys.readouterr().err and not out.exists()
    assert "WDSPIPES_COMMANDS" not in os.environ, "the variable is as it was afterwards"
    assert main(["cat", good, "-o", f"pipe:cat > {out}"]) == 0 and out.exists()


# --- image fields: only the format their extension names -------------------------------------


@pytest.fixture
def fake_gs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``gs`` first on PATH that notes it ran, and Pillow made to look for Ghostscript
    again; the file it writes if it runs."""
    from PIL import EpsImagePlugin

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ran = tmp_path / "gs-ran"
    script = bin_dir / "gs"
    script.write_text(f'#!/bin/sh\necho "$@" >> {ran}\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(EpsImagePlugin, "gs_binary", None)
    return ran


@pytest.mark.parametrize("spec", ["rgb8", "pil", "torchrgb"])
@pytest.mark.parametrize("field", ["jpg", "png", "eps"])
def test_postscript_in_an_image_field_never_reaches_ghostscript(
    fake_gs: Path, spec: str, field: str
) -> None:
    sample = {"__key__": "k", "__url__": "s.tar", field: POSTSCRIPT}
    try:
        outcome: list[dict[str, Any]] | wds.DecodeError = list(
            IterableWrapper([sample]).decode(spec)
        )
    except wds.DecodeError as error:
        outcome = error
    assert not fake_gs.exists(), "Ghostscript ran"
    if field == "eps":
        assert outcome == [sample], "no image format for .eps: its bytes stay bytes"
        return
    assert isinstance(outcome, wds.DecodeError)
    assert (outcome.url, outcome.key, outcome.field) == ("s.tar", "k", field)
    expected = "JPEG" if field == "jpg" else "PNG"
    assert f"a .{field} field holds EPS data, not {expected}" in str(outcome)
    assert isinstance(outcome.__cause__, wds.ImageFormatError)


def test_show_never_opens_postscript(
    fake_gs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = shard(tmp_path / "s.tar", [("0.cls", b"1"), ("0.jpg", POSTSCRIPT)])
    assert main(["show", path, "-o", str(tmp_path / "sheet.png")]) == 1
    assert not fake_gs.exists(), "Ghostscript ran"
    error = capsys.readouterr().err
    assert "key '0', field 'jpg'" in error and "holds EPS data, not JPEG" in error
    assert not (tmp_path / "sheet.png").exists()


# --- bounded memory --------------------------------------------------------------------------


@pytest.mark.slow
def test_a_gzip_bomb_is_a_decode_error_within_bounded_memory(tmp_path: Path) -> None:
    bomb = gzip_of_zeros(1 << 30)  # 1 GiB of zeros in about 1 MB
    assert len(bomb) < 2 << 20
    warm = shard(tmp_path / "warm.tar", [("0.txt.gz", gzip.compress(b"hello"))])
    path = shard(tmp_path / "bomb.tar", [("0.txt.gz", bomb)])
    measured = measure(warm, path, "rgb8")
    assert measured["outcome"].startswith("DecodeError <- DataLimitError"), measured
    assert "decompresses to more than 268,435,456 bytes" in measured["outcome"]
    assert measured["growth_mib"] < 400, measured


@pytest.mark.slow
def test_a_144_megapixel_png_is_a_decode_error_within_bounded_memory(tmp_path: Path) -> None:
    bomb = png_of_zeros(12_000, 12_000)
    assert len(bomb) < 1 << 20
    warm = shard(tmp_path / "warm.tar", [("0.png", png_of_zeros(8, 8))])
    path = shard(tmp_path / "bomb.tar", [("0.png", bomb)])
    measured = measure(warm, path, "torchrgb")
    assert measured["outcome"].startswith("DecodeError <- ImageTooLargeError"), measured
    assert (
        "12000 x 12000 = 144,000,000 pixels, over the limit of 89,478,485" in (measured["outcome"])
    )
    assert measured["growth_mib"] < 400, measured
    assert measured["warnings"] == [], "an error, not Pillow's warning"


def forged_npy(shape: tuple[int, ...], body: bytes) -> bytes:
    """An .npy whose header declares an array of ``shape`` (float64), followed by ``body``."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": shape}
    )
    return header.getvalue() + body


def test_an_array_header_that_declares_a_terabyte_is_refused_before_allocation() -> None:
    """numpy allocates what an .npy header declares before it reads the data: 100 bytes must not
    ask for a terabyte, in an .npy field or an .npz member."""
    npy = forged_npy((2**37,), bytes(100))  # 2**37 float64: 1 TiB
    npz = io.BytesIO()
    with zipfile.ZipFile(npz, "w") as archive:
        archive.writestr("a.npy", npy)
    samples = [{"__key__": "k", "npy": npy}, {"__key__": "k", "npz": npz.getvalue()}]
    whats = ["the .npy field", "the .npz member 'a.npy'"]
    for sample, what in zip(samples, whats, strict=True):
        with pytest.raises(wds.DecodeError) as caught:
            list(IterableWrapper([sample]).decode())
        assert f"{what} declares 1,099,511,627,776 bytes of array in its header, but holds 100" in (
            str(caught.value)
        )
    held = np.arange(6.0).reshape(2, 3)
    whole = forged_npy((2, 3), held.tobytes())
    (decoded,) = IterableWrapper([{"__key__": "k", "npy": whole}]).decode()
    assert (decoded["npy"] == held).all()


@pytest.mark.slow
def test_a_large_member_is_read_into_one_buffer(tmp_path: Path) -> None:
    """A 256 MiB member takes about its size to read, not twice (parts joined)."""
    path = large_member_shard(tmp_path / "large.tar", 256 << 20)
    warm = shard(tmp_path / "warm.tar", [("0.bin", bytes(1 << 20))])
    measured = measure(warm, path, "rgb8")
    assert measured["outcome"] == "1 samples, no error", measured
    assert measured["growth_mib"] < 1.5 * 256, measured


# --- secrets ---------------------------------------------------------------------------------

SECRETS = ("pw", "SIG", "AKIA", "SEKRET")


class _Handler(http.server.BaseHTTPRequestHandler):
    shard = b""

    def do_GET(self) -> None:
        status = 200 if self.path.startswith("/ok.tar") else 404
        status = 503 if self.path.startswith("/busy.tar") else status
        self.send_response(status)
        body = self.shard if status == 200 else b"no"
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 serving ``/ok.tar``, 503 at ``/busy.tar``, 404 else; its
    base URL with a user and password in it."""
    _Handler.shard = make_tar([("a.txt", b"1")])
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://ann:pw@127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, (secret, text)


def test_secrets_are_absent_from_errors_and_reprs(server: str) -> None:
    options = {"key": "AKIA", "secret": "SEKRET"}
    url = f"{server}/missing.tar?X-Amz-Signature=SIG"
    with pytest.raises(wds.ShardOpenError) as caught:
        list(wds.WebDataset(url, storage_options=options))
    message = str(caught.value)
    assert "ann:***@127.0.0.1" in message and "X-Amz-Signature=***" in message
    assert_no_secret(message)
    assert_no_secret(caught.value.url or "")
    for stage in (
        wds.tarfile_to_samples(storage_options=options),
        wds.url_opener(storage_options=options),
        wds.DataPipeline(wds.SimpleShardList(url), wds.tarfile_to_samples()),
        wds.WebDataset(url, storage_options=options),
    ):
        assert_no_secret(repr(stage))
    with pytest.warns(wds.DataWarning) as warned:
        list(wds.WebDataset(url, handler=wds.warn_and_continue))
    assert_no_secret(str(warned[0].message))


def test_secrets_are_absent_from_samples_logs_and_the_cache(
    server: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"{server}/ok.tar?X-Amz-Signature=SIG"
    cache = tmp_path / "cache"
    (sample,) = wds.WebDataset(url, cache_dir=cache)
    assert sample["__url__"] == url.replace(":pw@", ":***@").replace("SIG", "***")
    (meta,) = cache.glob(".*.meta")
    assert meta.stat().st_mode & 0o777 == 0o600
    assert_no_secret(meta.read_text())
    (sample,) = wds.WebDataset(url, cache_dir=cache)  # the entry is found again
    assert sample["__local_path__"] != url
    monkeypatch.setattr(http_io, "RETRIES", 1)
    monkeypatch.setattr(http_io, "BACKOFF", 0)
    with caplog.at_level(logging.WARNING), pytest.raises(wds.ShardOpenError) as caught:
        list(wds.WebDataset(f"{server}/busy.tar?X-Amz-Signature=SIG"))
    assert "retry 1 of 1" in caplog.text
    assert_no_secret(caplog.text)
    assert_no_secret(str(caught.value))


# --- names that escape the target directory --------------------------------------------------


def test_writers_refuse_keys_that_escape(tmp_path: Path) -> None:
    for key in ("../evil", "a/../../evil", "/etc/evil"):
        with wds.TarWriter(str(tmp_path / "out.tar")) as writer:
            with pytest.raises(wds.EncodeError, match=r"escapes the directory .* unsafe_names"):
                writer.write({"__key__": key, "txt": "x"})
            with pytest.raises(wds.EncodeError, match="escapes the directory"):
                writer.add_member(f"{key}.txt", b"x")
            writer.write({"__key__": "fine", "txt": "x"})
        with tarfile.open(tmp_path / "out.tar") as archive:
            assert archive.getnames() == ["fine.txt"]
    with (
        wds.ShardWriter(str(tmp_path / "s-%d.tar")) as shards,
        pytest.raises(wds.EncodeError, match="escapes"),
    ):
        shards.write({"__key__": "../evil", "txt": "x"})
    with wds.TarWriter(str(tmp_path / "unsafe.tar"), unsafe_names=True) as writer:
        writer.write({"__key__": "../evil", "txt": "x"})
        writer.add_member("/abs/evil.txt", b"x")
    with tarfile.open(tmp_path / "unsafe.tar") as archive:
        assert archive.getnames() == ["../evil.txt", "/abs/evil.txt"]


def test_cat_and_reshard_refuse_input_names_that_escape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    evil = str(tmp_path / "evil.tar")
    with tarfile.open(evil, "w") as archive:  # tarfile writes such names without a word
        for name in ("good.txt", "../evil.txt"):
            info = tarfile.TarInfo(name)
            archive.addfile(info, io.BytesIO(b""))
    out = tmp_path / "out.tar"
    assert main(["cat", evil, "-o", str(out)]) == 1
    error = capsys.readouterr().err
    assert "member '../evil.txt' escapes the directory" in error and "--unsafe-names" in error
    assert not out.exists()
    assert main(["cat", evil, "-o", str(out), "--unsafe-names"]) == 0
    pattern = str(tmp_path / "r" / "r-%02d.tar")
    with pytest.raises(wds.EncodeError, match="escapes the directory"):
        reshard(evil, pattern)
    assert not (tmp_path / "r").exists() or not os.listdir(tmp_path / "r")
    assert reshard(evil, pattern, unsafe_names=True).samples == 2


# --- the terminal ----------------------------------------------------------------------------


def test_the_command_prints_no_control_character_from_the_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clear = "\x1b[2J\x1b]0;owned\x07"
    name = tmp_path / f"s{clear}.tar"
    data = make_tar([(f"k{clear}.txt", b"1"), (f"k{clear}.f{clear}", b"2")])
    name.write_bytes(data[:1540])  # cut in the second member: a problem to report too
    assert main(["info", str(name)]) == 1
    assert main(["info", "--json", str(name)]) == 1
    source = tmp_path / "src"
    source.mkdir()
    (source / "a.txt").write_bytes(b"a")
    (source / f"link{clear}").symlink_to("a.txt")
    assert main(["create", str(tmp_path / "out.tar"), str(source)]) == 0
    printed = capsys.readouterr()
    for text in (printed.out, printed.err):
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text), text
    assert "\\x1b[2J" in printed.out and "\\x1b[2J" in printed.err, "shown escaped"


# --- temporary files -------------------------------------------------------------------------


def test_a_link_planted_at_a_writers_temporary_name_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    out = tmp_path / "out"
    out.mkdir()
    for name in ("a.tar", "s-0.tar"):  # the temporary names there were before: guessable
        (out / f".{name}.partial-{os.getpid()}").symlink_to(victim)
    with wds.TarWriter(str(out / "a.tar")) as writer:
        writer.write({"__key__": "k", "txt": "x"})
    with wds.ShardWriter(str(out / "s-%d.tar")) as writer:
        writer.write({"__key__": "k", "txt": "x"})
    assert victim.read_bytes() == b"precious"
    assert keys(list(wds.WebDataset([str(out / "a.tar"), str(out / "s-0.tar")]))) == ["k", "k"]


def test_a_writer_never_writes_through_a_name_taken_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even a name guessed right (the random one it draws) is skipped, not followed."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    drawn = iter(["guessed1", "fresh123"])
    monkeypatch.setattr(atomic, "random_suffix", lambda: next(drawn))
    (tmp_path / ".a.tar.partial-guessed1").symlink_to(victim)
    with wds.TarWriter(str(tmp_path / "a.tar")) as writer:
        writer.write({"__key__": "k", "txt": "x"})
    assert victim.read_bytes() == b"precious"
    assert keys(list(wds.WebDataset(str(tmp_path / "a.tar")))) == ["k"]


def test_a_link_planted_at_the_caches_temporary_name_is_not_followed(tmp_path: Path) -> None:
    from wdspipes.io.cache import entry_name

    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    good = shard(tmp_path / "good.tar", [("a.txt", b"1")])
    url = f"pipe:cat {good}"
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / f".{entry_name(url)}.tmp").symlink_to(victim)  # its name before: guessable
    assert keys(list(wds.WebDataset(url, cache_dir=cache))) == ["a"]
    assert victim.read_bytes() == b"precious"
    assert (cache / entry_name(url)).read_bytes() == Path(good).read_bytes()


def test_error_messages_escape_control_characters_of_urls() -> None:
    error = wds.ShardError("bad", url="a\x1b[2J\rb.tar")
    assert str(error) == "a\\x1b[2J\\rb.tar: bad"
    assert error.url == "a\x1b[2J\rb.tar"  # the URL itself, to open it again

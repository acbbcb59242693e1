"""``wdspipes demo`` and ``python -m wdspipes.demo`` on tiny configurations: the shards they
write, the pictures they draw and what they print; and the dataset they draw."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from wdspipes.cli import main
from wdspipes.demo import training
from wdspipes.demo.pictures import PAD, SCALE
from wdspipes.demo.run import SHEET_IMAGES
from wdspipes.demo.shapes import CLASSES, IMAGE_SIZE, shape_samples
from wdspipes.errors import TorchdataVersionError
from wdspipes.pipeline import WebDataset

TINY = ["--train-samples", "120", "--val-samples", "60", "--per-shard", "50", "--epochs", "1"]


def read_back(shards: list[Path]) -> list[dict[str, Any]]:
    return list(WebDataset([str(shard) for shard in shards]).decode("rgb8"))


def assert_shards(directory: Path, split: str, count: int, shards: int) -> None:
    paths = sorted(directory.glob(f"{split}-*.tar"))
    assert [path.name for path in paths] == [f"{split}-{n:04d}.tar" for n in range(shards)]
    samples = read_back(paths)
    assert len(samples) == count
    assert len({sample["__key__"] for sample in samples}) == count
    labels = Counter(sample["cls"] for sample in samples)
    assert labels == dict.fromkeys(range(len(CLASSES)), count // len(CLASSES))
    for sample in samples:
        assert set(sample) >= {"jpg", "cls"}
        assert sample["jpg"].shape == (IMAGE_SIZE, IMAGE_SIZE, 3)


def assert_pictures(output: Path) -> None:
    with Image.open(output / "predictions.png") as sheet:
        assert sheet.format == "PNG"
        assert sheet.width == 8 * (IMAGE_SIZE * SCALE + 2 * PAD)
        assert sheet.height > SHEET_IMAGES // 8 * IMAGE_SIZE * SCALE
    with Image.open(output / "loss.png") as plot:
        assert plot.format == "PNG"
        assert plot.size == (720, 440)
        colours = plot.convert("RGB").getcolors(maxcolors=100_000)
        assert colours is not None and len(colours) > 10  # drawn on, not blank


def assert_report(text: str, output: Path, epochs: int) -> None:
    for name in ("shards", "predictions.png", "loss.png"):
        assert str(output / name) in text
    epoch_lines = re.findall(
        r"epoch \d+/\d+: train loss \d\.\d+, accuracy \d+\.\d%, [\d,]+ samples/s \| "
        r"validation loss \d\.\d+, accuracy \d+\.\d%",
        text,
    )
    assert len(epoch_lines) == epochs
    assert re.search(r"validation accuracy \d+\.\d% after", text)


@pytest.mark.slow
def test_demo_writes_shards_trains_and_draws(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path.resolve() / "demo"
    assert main(["demo", "-o", str(output), *TINY, "--workers", "0", "--seed", "3"]) == 0
    assert_shards(output / "shards", "train", 120, shards=3)
    assert_shards(output / "shards", "val", 60, shards=2)
    assert_pictures(output)
    assert_report(capsys.readouterr().out, output, epochs=1)


def test_without_dataloader2_the_demo_trains_through_torchs_dataloader(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_dataloader2() -> None:
        raise TorchdataVersionError.lacking("DataLoader2 exists in torchdata 0.8 and 0.9", "")

    monkeypatch.setattr(training, "dataloader2", no_dataloader2)
    output = tmp_path.resolve() / "demo"
    args = ["--train-samples", "30", "--val-samples", "12", "--epochs", "2", "--workers", "0"]
    assert main(["demo", "-o", str(output), *args]) == 0
    text = capsys.readouterr().out
    assert "on batches that torch's DataLoader reads in this process" in " ".join(text.split())
    assert_report(text, output, epochs=2)
    loader = training.make_loader(training.reading_pipe(["unread.tar"], 4), 0)
    assert isinstance(loader, training.TorchLoader)
    loader.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        iter(loader)


def test_a_second_run_replaces_the_shards_of_the_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "demo"
    (output / "shards").mkdir(parents=True)
    for stale in ("train-0007.tar", "val-0003.tar"):
        (output / "shards" / stale).write_bytes(b"an earlier run")
    (output / "shards" / "notes.txt").write_text("mine")
    args = ["demo", "-o", str(output), "--train-samples", "30", "--val-samples", "12"]
    assert main([*args, "--epochs", "1", "--workers", "0"]) == 0
    names = sorted(path.name for path in (output / "shards").iterdir())
    assert names == ["notes.txt", "train-0000.tar", "val-0000.tar"]


@pytest.mark.loaders  # with torchdata 0.11 too, where torch's DataLoader runs the worker
def test_python_m_wdspipes_demo_runs_with_a_worker_process(tmp_path: Path) -> None:
    output = tmp_path.resolve() / "out"
    run = subprocess.run(
        [sys.executable, "-m", "wdspipes.demo", "--output", str(output), *TINY, "--workers", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    plan = f"on batches that {training.loader_name()} reads in 1 worker process"
    assert plan in " ".join(run.stdout.split())
    assert_shards(output / "shards", "train", 120, shards=3)
    assert_shards(output / "shards", "val", 60, shards=2)
    assert_pictures(output)
    assert_report(run.stdout, output, epochs=1)


def test_an_output_that_is_a_file_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "taken"
    output.write_text("not a directory")
    assert main(["demo", "-o", str(output), *TINY]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"wdspipes: error: output {output.resolve()} is a file, not a directory"
    ]
    assert captured.out == ""
    assert output.read_text() == "not a directory"


def test_a_bad_count_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--epochs", "0"]) == 2
    assert "--epochs" in capsys.readouterr().err


def test_the_dataset_is_deterministic_balanced_and_varied() -> None:
    first = list(shape_samples(60, seed=5, split="train"))
    again = list(shape_samples(30, seed=5, split="train"))
    for a, b in zip(first, again, strict=False):
        assert a["__key__"] == b["__key__"] and a["cls"] == b["cls"]
        assert np.array_equal(a["jpg"], b["jpg"])
    assert Counter(sample["cls"] for sample in first) == dict.fromkeys(range(len(CLASSES)), 10)
    pictures = np.stack([sample["jpg"] for sample in first])
    assert len({picture.tobytes() for picture in pictures}) == len(pictures)
    assert pictures.reshape(len(pictures), -1).std(axis=1).min() > 10  # a shape on a background
    for other in (shape_samples(60, seed=6, split="train"), shape_samples(60, 5, "val")):
        assert not np.array_equal(pictures, np.stack([sample["jpg"] for sample in other]))

"""From a folder of image files to shuffled training shards, with the ``wdspipes`` command.

The steps, each printed as the shell command it is:

1. ``wdspipes create``: one shard per folder of files (``circles-0001.png`` and
   ``circles-0001.cls`` make the sample ``circles-0001``);
2. ``wdspipes info``: count the samples and fields, and find problems;
3. ``wdspipes reshard --shuffle``: rewrite all samples into new shards of at most 25 samples,
   in a uniformly random order, in bounded memory;
4. ``wdspipes show``: a contact sheet of the first images of a shard;
5. read the new shards back with ``WebDataset`` and check that every sample arrived once.

Run it with ``python examples/write_and_reshard.py`` (``--dir`` keeps the files).
"""

from __future__ import annotations

import argparse
import os
import shlex
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

import wdspipes as wds
from wdspipes.cli import main as wdspipes_command

CLASSES = ["circles", "squares", "triangles"]
IMAGES_PER_CLASS = 30
SIZE = 32


def draw(label: int, rng: np.random.Generator) -> Image.Image:
    """A shape of the class's kind, at a random place and colour, on a noisy background."""
    background = rng.integers(0, 60, (SIZE, SIZE, 3), dtype=np.uint8)
    image = Image.fromarray(background)
    colour = tuple(int(c) for c in rng.integers(120, 256, 3))
    x, y = (int(v) for v in rng.integers(2, SIZE // 2 - 2, 2))
    box = (x, y, x + SIZE // 2, y + SIZE // 2)
    pen = ImageDraw.Draw(image)
    if label == 0:
        pen.ellipse(box, fill=colour)
    elif label == 1:
        pen.rectangle(box, fill=colour)
    else:
        pen.polygon(
            [(box[0], box[3]), (box[2], box[3]), ((box[0] + box[2]) // 2, box[1])], fill=colour
        )
    return image


def write_files(directory: Path) -> None:
    """A folder per class of small PNG images, each with a ``.cls`` file holding its label."""
    rng = np.random.default_rng(0)
    for label, name in enumerate(CLASSES):
        folder = directory / name
        folder.mkdir(parents=True)
        for index in range(IMAGES_PER_CLASS):
            draw(label, rng).save(folder / f"{name}-{index:04d}.png")
            (folder / f"{name}-{index:04d}.cls").write_text(str(label))


def run(*args: str) -> None:
    """Run one ``wdspipes`` command, as the shell would, and stop on a failure."""
    print(f"$ wdspipes {shlex.join(args)}", flush=True)
    status = wdspipes_command(list(args))
    if status != 0:
        raise SystemExit(f"write_and_reshard.py: wdspipes {args[0]} failed with status {status}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="where to work (default: a temporary dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wdspipes-reshard-") as scratch:
        root = args.dir or Path(scratch)
        root.mkdir(parents=True, exist_ok=True)
        os.chdir(root)
        write_files(Path("images"))
        for number, name in enumerate(CLASSES):
            run("create", f"raw-{number:03d}.tar", f"images/{name}")
        run("info", "raw-{000..002}.tar")
        run(
            "reshard", "raw-{000..002}.tar", "-o", "train/train-%04d.tar",
            "--maxcount", "25", "--shuffle", "--seed", "0", "--memory", "1M",
        )  # fmt: skip
        run("show", "train/train-0000.tar", "-o", "train-0000.png", "--count", "8")

        shards = sorted(str(path) for path in Path("train").glob("train-*.tar"))
        pipe = wds.WebDataset(shards).decode("rgb8").to_tuple("__key__", "png", "cls")
        keys, labels = [], []
        for key, image, label in pipe:
            keys.append(key)
            labels.append(label)
            assert image.shape == (SIZE, SIZE, 3), image.shape
        print(f"read back {len(keys)} samples from {len(shards)} shards; first keys: {keys[:4]}")
        total = len(CLASSES) * IMAGES_PER_CLASS
        if len(keys) != total or len(set(keys)) != total:
            raise SystemExit(f"write_and_reshard.py: expected each of {total} samples once")
        if keys == sorted(keys):
            raise SystemExit("write_and_reshard.py: the samples were not shuffled")
        os.chdir("/")  # leave the temporary directory before it is removed


if __name__ == "__main__":
    main()

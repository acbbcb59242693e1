"""Start-up of the ``wdspipes`` command: how long each command takes as a whole process, its
``--help`` and a small real run on a generated shard, and whether it loaded torch.

    python benchmarks/cli_startup.py --markdown --repeat 7
    python benchmarks/cli_startup.py --quick          # 3 runs each

Each command runs in a new process, the runs of the commands interleaved; the table gives the
median and the fastest wall time. For reference: an empty Python, and ``import torch`` alone.
Whether torch was loaded is asked of a process that runs the command as the entry point does
(through the launcher ``wdspipes_command``) and then looks in ``sys.modules``.

Target: every command under 0.5 s (median), its ``--help`` and its run here alike, but for
``show`` drawing images, which may load torch as it decodes.
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import format_table, print_header, print_section, verdict
from PIL import Image

import wdspipes

TARGET = 0.5  # seconds, median
EXEMPT = ("python", "wdspipes show SHARD")
"""Labels (by their start) the target does not apply to: the references, and show decoding."""
WATCH = (
    "import sys; from wdspipes_command import main; code = main(sys.argv[1:]); "
    "print('torch' in sys.modules, file=sys.stderr); sys.exit(code)"
)


def cases(directory: Path) -> dict[str, list[str]]:
    """The commands to time, by label: argument lists for the ``wdspipes`` command (the
    references run Python itself)."""
    tree = directory / "tree"
    tree.mkdir()
    for index in range(20):
        (tree / f"{index:04d}.png").write_bytes(_picture(index))
        (tree / f"{index:04d}.cls").write_text(str(index % 3))
    shard = str(directory / "shard.tar")
    subprocess.run([_command(), "create", shard, str(tree)], check=True, capture_output=True)
    out = str(directory / "out")
    helps = {f"wdspipes {name} --help": [name, "--help"] for name in COMMANDS}
    return {
        "python (nothing imported)": [],
        "python -c 'import torch'": [],
        "wdspipes --help": ["--help"],
        "wdspipes --version": ["--version"],
        **helps,
        "wdspipes create OUT DIR": ["create", f"{out}.tar", str(tree)],
        "wdspipes create OUT-%02d DIR --maxcount 8": [
            "create",
            f"{out}-series-%02d.tar",
            str(tree),
            "--maxcount",
            "8",
        ],
        "wdspipes info SHARD": ["info", shard],
        "wdspipes index SHARD -o INDEX": ["index", shard, "-o", f"{out}.json"],
        "wdspipes cat SHARD -o OUT": ["cat", shard, "-o", f"{out}-copy.tar"],
        "wdspipes reshard SHARD -o PATTERN": ["reshard", shard, "-o", f"{out}-re-%03d.tar"],
        "wdspipes show SHARD -o PNG (decodes)": ["show", shard, "-o", f"{out}.png"],
    }


COMMANDS = ("create", "info", "index", "cat", "reshard", "show")
"""The commands whose ``--help`` is timed (``demo`` is not a shard tool)."""


def _picture(index: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (index * 12, 80, 160)).save(buffer, "PNG")
    return buffer.getvalue()


def _command() -> str:
    return str(Path(sys.executable).parent / "wdspipes")


def argv(label: str, args: list[str]) -> list[str]:
    if label.startswith("python (nothing"):
        return [sys.executable, "-c", "pass"]
    if label.startswith("python -c"):
        return [sys.executable, "-W", "ignore", "-c", "import torch"]
    return [_command(), *args]


def loads_torch(label: str, args: list[str]) -> str:
    if label.startswith("python"):
        return "no" if "nothing" in label else "yes"
    done = subprocess.run(
        [sys.executable, "-c", WATCH, *args], capture_output=True, text=True, check=True
    )
    return "yes" if done.stderr.strip().splitlines()[-1] == "True" else "no"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="runs of each command (7)")
    parser.add_argument("--quick", action="store_true", help="3 runs each: a smoke run")
    parser.add_argument("--markdown", action="store_true", help="print tables as Markdown")
    options = parser.parse_args()
    repeat = 3 if options.quick else options.repeat
    print_header(
        {"wdspipes": wdspipes.__version__},
        f"wall time of a new process, median of {repeat} runs",
        options.markdown,
    )
    with tempfile.TemporaryDirectory() as temporary:
        commands = cases(Path(temporary))
        times: dict[str, list[float]] = {label: [] for label in commands}
        for _ in range(repeat):
            for label, args in commands.items():
                start = time.perf_counter()
                subprocess.run(argv(label, args), check=True, capture_output=True)
                times[label].append(time.perf_counter() - start)
        torch = {label: loads_torch(label, args) for label, args in commands.items()}
    medians = {label: statistics.median(runs) for label, runs in times.items()}
    rows = [
        [label, f"{medians[label]:.2f} s", f"{min(runs):.2f} s", torch[label]]
        for label, runs in times.items()
    ]
    print_section("Start-up", options.markdown)
    print(format_table(["command", "median", "fastest", "loads torch"], rows, options.markdown))
    print_section("target", options.markdown)
    bound = {label: t for label, t in medians.items() if not label.startswith(EXEMPT)}
    slow = [label for label, seconds in bound.items() if seconds >= TARGET]
    mark = "- " if options.markdown else ""
    print(
        f"{mark}every command but show decoding under {TARGET} s (median): "
        f"{verdict(not slow)}; slowest {max(bound.values()):.2f} s"
    )
    for label in slow:
        print(f"{mark}over: {label} ({medians[label]:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

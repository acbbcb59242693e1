"""Draw the plots of docs/performance.md from the recorded results in benchmarks/results.json.

The numbers come from the benchmark scripts of this directory (each table in results.json
names the command that measured it); this script only draws them, and prints the tables in
the Markdown that docs/performance.md holds:

    .venv/bin/python benchmarks/plots.py               # writes docs/images/*.png
    .venv/bin/python benchmarks/plots.py --markdown    # prints every table, to paste

After a new benchmark run, update results.json, run both, and replace the tables on the page;
tests/test_docs.py checks that the page holds every table of results.json as printed here.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results.json"
IMAGES = ROOT / "docs" / "images"

WDSPIPES = "#2a6fb0"  # wdspipes' bars
OTHER = "#a6a6a6"  # other libraries
BOUND = "#5a5a5a"  # upper bounds: raw reads, curl, cat
TARGET = "#c0392b"  # target lines

Table = dict[str, Any]


def load(path: Path = RESULTS) -> dict[str, Any]:
    results: dict[str, Any] = json.loads(path.read_text())
    return results


def tables(results: dict[str, Any]) -> dict[str, Table]:
    """Every table of the results, by id."""
    return {table["id"]: table for bench in results["benchmarks"] for table in bench["tables"]}


def cell(column: dict[str, str], value: Any) -> str:
    if value is None:
        return "-"
    if "format" in column and not isinstance(value, str):
        return column["format"].format(value)
    return str(value)


def render_table(table: Table) -> str:
    """The table in Markdown: the first column left-aligned, the others right-aligned."""
    columns = table["columns"]
    lines = [
        "| " + " | ".join(column["label"] for column in columns) + " |",
        "| " + " | ".join(":---" if i == 0 else "---:" for i in range(len(columns))) + " |",
    ]
    for row in table["rows"]:
        lines.append("| " + " | ".join(cell(c, row.get(c["key"])) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def markdown(results: dict[str, Any]) -> str:
    """Every table, each under its id and title, as docs/performance.md holds them."""
    parts = []
    for bench in results["benchmarks"]:
        for table in bench["tables"]:
            parts.append(f"<!-- {table['id']}: {table['title']} -->\n\n{render_table(table)}")
    return "\n".join(parts)


# --- plots ------------------------------------------------------------------------------------


def plain(label: str) -> str:
    return label.replace("`", "").replace("(informative)", "").strip()


def colour(label: str) -> str:
    label = label.lower()
    if label.startswith("wdspipes") or label.startswith("open_http"):
        return WDSPIPES
    if label.startswith(("raw", "curl", "cat")):
        return BOUND
    return OTHER


def bars(
    axes: Any,
    labels: Sequence[str],
    values: Sequence[float],
    title: str,
    unit: Callable[[float], str],
    target: tuple[float, str] | None = None,
    colours: Sequence[str] | None = None,
) -> None:
    """Horizontal bars, first label on top, each with its value at its end."""
    from matplotlib.ticker import FuncFormatter

    positions = list(range(len(labels)))[::-1]
    colours = list(colours) if colours is not None else [colour(label) for label in labels]
    axes.barh(positions, values, color=colours, height=0.62)
    axes.set_yticks(positions, [plain(label) for label in labels])
    top = max(values + ([target[0]] if target else []))
    axes.set_xlim(0, top * 1.28)
    for position, value in zip(positions, values, strict=True):
        axes.text(value + top * 0.015, position, unit(value), va="center", fontsize=9)
    if target is not None:
        axes.axvline(target[0], color=TARGET, linestyle="--", linewidth=1.2)
        axes.text(
            target[0], len(labels) - 0.45, f" {target[1]}", color=TARGET, fontsize=8.5, va="bottom"
        )
        axes.set_ylim(-0.6, len(labels) + 0.1)
    axes.set_title(title, fontsize=10.5, loc="left")
    axes.xaxis.set_major_formatter(FuncFormatter(lambda tick, _: f"{tick:,.0f}"))
    axes.spines[["top", "right"]].set_visible(False)
    axes.tick_params(axis="x", labelsize=8.5)
    axes.xaxis.grid(True, color="#e6e6e6")
    axes.set_axisbelow(True)


def thousands(value: float) -> str:
    return f"{value:,.0f}"


def column(table: Table, key: str, skip: Sequence[str] = ()) -> tuple[list[str], list[float]]:
    """Labels (the first column) and the values of column ``key``, without the rows named in
    ``skip`` and rows without a value."""
    first = table["columns"][0]["key"]
    rows = [r for r in table["rows"] if r[first] not in skip and r.get(key) is not None]
    return [r[first] for r in rows], [float(r[key]) for r in rows]


def value(table: Table, label: str, key: str) -> float:
    first = table["columns"][0]["key"]
    return float(next(r[key] for r in table["rows"] if r[first] == label))


def read_speed(results: dict[str, Any], plt: Any) -> Any:
    by_id = tables(results)
    small, big = by_id["read-1kb"], by_id["read-100kb"]
    figure, (left, right) = plt.subplots(2, 1, figsize=(8, 5.4))
    labels, values = column(small, "samples_per_second", skip=["raw read"])
    raw = value(small, "raw read", "samples_per_second")
    target = 10 * value(small, "webdataset", "samples_per_second")
    bars(left, labels, values, "1 KB samples: samples/s, one process", thousands,
         target=(target, "target: 10x webdataset"))  # fmt: skip
    left.set_xlabel(f"(a raw read of the shards: {raw:,.0f} samples/s)", fontsize=8.5)
    labels, values = column(big, "file_mb_per_second")
    target = 0.5 * value(big, "raw read", "file_mb_per_second")
    bars(right, labels, values, "100 KB samples: MB/s of shard files, one process", thousands,
         target=(target, "target: half the raw read"))  # fmt: skip
    figure.subplots_adjust(hspace=0.6)
    return figure


def pipeline_speed(results: dict[str, Any], plt: Any) -> Any:
    by_id = tables(results)
    small, jpeg = by_id["pipeline-1kb"], by_id["pipeline-jpeg"]
    figure, (left, right) = plt.subplots(2, 1, figsize=(8, 5.4))
    labels, values = column(small, "epoch1")
    target = 3 * value(small, "webdataset + DataLoader", "epoch1")
    bars(left, labels, values, "1 KB samples, 2 workers: samples/s (epoch 1)", thousands,
         target=(target, "target: 3x webdataset"))  # fmt: skip
    labels, values = column(jpeg, "epoch1")
    bars(right, labels, values, "256 x 256 JPEG, 2 workers: samples/s (epoch 1)", thousands)
    figure.subplots_adjust(hspace=0.45)
    return figure


def jpeg_time(results: dict[str, Any], plt: Any) -> Any:
    table = tables(results)["pipeline-jpeg-time"]
    figure, axes = plt.subplots(figsize=(8, 2.6))
    labels, values = column(table, "microseconds")
    shares = {r["part"]: r["share"] for r in table["rows"]}
    bars(axes, labels, values, "Where the time of a JPEG goes: µs per 256 x 256 image",
         lambda v: f"{v:,.0f} µs", colours=[WDSPIPES] * len(values))  # fmt: skip
    for text, label in zip(axes.texts, labels, strict=True):
        text.set_text(f"{text.get_text()}  ({shares[label]:.0%})")
    return figure


def reshard(results: dict[str, Any], plt: Any) -> Any:
    by_id = tables(results)
    runs = [by_id["reshard-256m"], by_id["reshard-64m"]]
    budgets = [f"--memory {table['memory_mib']}M" for table in runs]
    figure, (left, right) = plt.subplots(2, 1, figsize=(8, 5.4))
    labels, values, colours = [], [], []
    for table, budget in zip(runs, budgets, strict=True):
        for command in ("reshard --shuffle", "reshard (in order)"):
            labels.append(f"{command}, {budget}")
            values.append(value(table, command, "mb_per_second_after_startup"))
            colours.append(WDSPIPES if "shuffle" in command else OTHER)
    cat = max(value(table, "cat", "mb_per_second_after_startup") for table in runs)
    bars(left, labels, values, "1.6 GB of 100 KB samples: MB/s after startup", thousands,
         colours=colours)  # fmt: skip
    left.set_xlabel(f"(cat copies the same bytes at up to {cat:,.0f} MB/s)", fontsize=8.5)
    labels, values, colours = [], [], []
    for table, budget in zip(runs, budgets, strict=True):
        labels += [f"budget {budget}", f"peak RSS over imports, {budget}"]
        peak = value(table, "reshard --shuffle", "over_imports_mib")
        values += [float(table["memory_mib"]), peak]
        colours += [OTHER, WDSPIPES]
    bars(right, labels, values, "reshard --shuffle: memory (MiB) against the budget",
         lambda v: f"{v:,.0f} MiB", colours=colours)  # fmt: skip
    figure.subplots_adjust(hspace=0.55)
    return figure


def http_speed(results: dict[str, Any], plt: Any) -> Any:
    by_id = tables(results)
    big, small = by_id["http-100kb"], by_id["http-1kb"]
    figure, (left, right) = plt.subplots(2, 1, figsize=(8, 6.4))
    labels, values = column(big, "mb_per_second")
    target = 0.8 * value(big, "curl, one process", "mb_per_second")
    bars(left, labels, values, "100 KB samples over HTTP from 127.0.0.1: MB/s", thousands,
         target=(target, "target: 0.8x curl"))  # fmt: skip
    labels, values = column(small, "mb_per_second")
    bars(right, labels, values, "1 KB samples over HTTP from 127.0.0.1: MB/s", thousands)
    figure.subplots_adjust(hspace=0.4)
    return figure


def resume_speed(results: dict[str, Any], plt: Any) -> Any:
    from matplotlib.ticker import FuncFormatter

    table = tables(results)["resume-1kb"]
    rows = table["rows"]
    cuts = [row["cut"] for row in rows]
    figure, axes = plt.subplots(figsize=(8, 3.2))
    axes.plot(cuts, [row["restore_ms"] for row in rows], marker="o", color=WDSPIPES,
              label="load_state_dict, then the first sample")  # fmt: skip
    axes.plot(cuts, [row["read_again_ms"] for row in rows], marker="o", color=OTHER,
              label="without a state: a new pipeline reads them again")  # fmt: skip
    axes.set_title("Getting back to sample k of an epoch (buffer_shuffle(1000)): ms",
                   fontsize=10.5, loc="left")  # fmt: skip
    axes.set_xlabel("k: samples read before the state was taken", fontsize=9)
    axes.xaxis.set_major_formatter(FuncFormatter(lambda tick, _: f"{tick:,.0f}"))
    axes.set_ylim(bottom=0)
    axes.legend(frameon=False, fontsize=8.5)
    axes.spines[["top", "right"]].set_visible(False)
    axes.grid(True, color="#e6e6e6")
    axes.set_axisbelow(True)
    return figure


PLOTS: dict[str, Callable[[dict[str, Any], Any], Any]] = {
    "read-speed.png": read_speed,
    "pipeline-speed.png": pipeline_speed,
    "jpeg-time.png": jpeg_time,
    "reshard-speed.png": reshard,
    "http-speed.png": http_speed,
    "resume-speed.png": resume_speed,
}


def draw(results: dict[str, Any], directory: Path) -> list[Path]:
    """Write every plot into ``directory``; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9.5, "figure.dpi": 100, "savefig.dpi": 100})
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, plot in PLOTS.items():
        figure = plot(results, plt)
        path = directory / name
        # no Software entry: the bytes do not depend on matplotlib's version string
        figure.savefig(path, bbox_inches="tight", metadata={"Software": None})
        plt.close(figure)
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the recorded results")
    parser.add_argument("--out", type=Path, default=IMAGES, help="where to write the PNGs")
    parser.add_argument("--markdown", action="store_true", help="print the tables instead")
    args = parser.parse_args(argv)
    results = load(args.results)
    if args.markdown:
        print(markdown(results), end="")
        return
    for path in draw(results, args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()

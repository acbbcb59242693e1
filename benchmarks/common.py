"""What the benchmark scripts share: quiet imports, the header of a run, plain or Markdown
tables. Imported by the scripts beside it (``python benchmarks/<script>.py``)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import platform
import shlex
import sys
import warnings
from collections.abc import Iterator, Sequence

__all__ = ["format_table", "import_libraries", "print_header", "print_section", "quiet", "verdict"]


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence webdataset's warnings and the ResourceWarnings of the files it leaves open (forked
    workers inherit the filters), and torchdata's deprecation notice."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=ResourceWarning)
        warnings.filterwarnings("ignore", module=r"webdataset(\.|$)")
        warnings.filterwarnings("ignore", message=r"(?s).*deprecated", category=UserWarning)
        yield


def import_libraries(names: Sequence[str]) -> dict[str, str]:
    """Import the libraries before anything is timed (``import wdspipes`` loads torch and
    every stage: 2 s or more that the first reader timed would pay otherwise); their versions
    by name."""
    versions = {}
    with quiet():
        for name in names:
            module = importlib.import_module(name)
            versions[name] = str(getattr(module, "__version__", "?"))
    return versions


def print_header(versions: dict[str, str], timing: str, markdown: bool) -> None:
    """The command, the machine, the library versions and how timing was done."""
    cpu = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        cpu = next(
            (ln.split(":", 1)[1].strip() for ln in cpuinfo if ln.startswith("model name")), ""
        )
    lines = [
        "command: " + shlex.join([sys.executable, *sys.argv]),
        f"python {platform.python_version()} on {platform.platform()}",
        f"os.cpu_count(): {os.cpu_count()}" + (f" ({cpu})" if cpu else ""),
        "versions: " + ", ".join(f"{name} {version}" for name, version in versions.items()),
        f"timing: {timing}",
    ]
    mark = "- " if markdown else ""
    print("\n".join(mark + line for line in lines))


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> str:
    """A table with the first column left-aligned and the others right-aligned."""
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        padded = [
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return f"| {' | '.join(padded)} |" if markdown else "  ".join(padded)

    if markdown:
        rule = [
            f":{'-' * (w - 1)}" if i == 0 else f"{'-' * (w - 1)}:" for i, w in enumerate(widths)
        ]
    else:
        rule = ["-" * w for w in widths]
    return "\n".join([line(headers), line(rule), *(line(row) for row in rows)])


def print_section(title: str, markdown: bool) -> None:
    print(f"\n### {title}\n" if markdown else f"\n== {title} ==")


def apply_size_defaults(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    defaults: dict[str, tuple[int, int]],
) -> None:
    """Fill each unset size option with its ``(full, quick)`` default (``--quick`` picks the
    second), and refuse sizes below 1."""
    for name, (full, quick) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")


def verdict(met: bool) -> str:
    return "MET" if met else "NOT MET"

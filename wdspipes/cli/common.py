"""What every ``wdspipes`` command shares: messages, progress bars, reading shards, sizes,
compression names and outputs that appear whole or not at all.

Commands report bad input by raising :class:`click.ClickException`, a
:class:`~wdspipes.errors.WdsError`, ``OSError`` or ``ValueError``; ``wdspipes.cli.main`` turns
each into one line on stderr (see :func:`error_line`) and exit status 1.

Everything a command prints goes through :func:`shown`: names from the data (members, fields,
files a glob found) with their control characters escaped, so that an escape sequence in a
shard cannot act on the terminal, and URLs without their secrets.

>>> parse_size("500M"), parse_size("1.5GB"), format_size(1536)
(524288000, 1500000000, '1.5 KiB')
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
import time
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click
from tqdm import tqdm

from wdspipes.read.specs import expand_urls
from wdspipes.redaction import printable, redact
from wdspipes.tools.progress import progress

if TYPE_CHECKING:
    from wdspipes.core.stage import Sample
    from wdspipes.write import TarWriter

__all__ = [
    "COMPRESSIONS",
    "NO_COMMANDS",
    "PROG",
    "SIZE",
    "UNSAFE_NAMES",
    "SizeType",
    "Stopwatch",
    "counted",
    "echo",
    "error_line",
    "expand_shards",
    "format_size",
    "one_line",
    "output_compression",
    "parse_size",
    "progress",
    "read_samples",
    "shard_writer",
    "shown",
    "summarize",
    "warn",
]

PROG = "wdspipes"
T = TypeVar("T")

COMPRESSIONS = ("gz", "bz2", "xz", "zst")
"""Values of ``--compress``: whole-shard gzip, bzip2, xz or zstd."""

_COMPRESSION_SUFFIXES = {
    ".gz": "gz",
    ".tgz": "gz",
    ".bz2": "bz2",
    ".tbz2": "bz2",
    ".xz": "xz",
    ".txz": "xz",
    ".zst": "zst",
    ".tzst": "zst",
}


def _refuse_commands(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--no-commands``: ``WDSPIPES_COMMANDS=never`` while the command runs, for every
    reader and writer it uses and every process it starts; as it was afterwards."""
    if not value:
        return
    from wdspipes.io.pipe import COMMANDS_VARIABLE  # the URL layer: when the option is given

    previous = os.environ.get(COMMANDS_VARIABLE)
    os.environ[COMMANDS_VARIABLE] = "never"

    def restore() -> None:
        if previous is None:
            os.environ.pop(COMMANDS_VARIABLE, None)
        else:
            os.environ[COMMANDS_VARIABLE] = previous

    ctx.call_on_close(restore)


NO_COMMANDS = click.option(
    "--no-commands",
    is_flag=True,
    expose_value=False,
    callback=_refuse_commands,
    help="Run no shell command: refuse pipe: URLs, to read or to write (as the environment "
    "variable WDSPIPES_COMMANDS=never does).",
)
"""The option of every command that opens URLs: no ``pipe:`` URL runs."""

UNSAFE_NAMES = click.option(
    "--unsafe-names",
    is_flag=True,
    help="Write member names that leave the directory they are extracted into (a .. "
    "component, a leading /); refused by default.",
)
"""The option of the commands that write shards of names read from elsewhere."""

_TORCH_NOTE = "This exception is thrown by __iter__ of "
"""The line torch appends to the message of any error raised while a DataPipe iterates."""


def shown(text: object) -> str:
    """``text`` as a command prints it: control characters escaped (see
    :func:`~wdspipes.redaction.printable`), the secrets of URLs hidden (see
    :func:`~wdspipes.redaction.redact`).

    >>> shown("member 'a\\x1b[31m.txt' of https://ann:pw@host/a.tar")
    "member 'a\\\\x1b[31m.txt' of https://ann:***@host/a.tar"
    """
    return printable(redact(str(text)))


def echo(text: object, err: bool = False) -> None:
    """Print a line of a command's output (on stderr with ``err``), as :func:`shown`."""
    click.echo(shown(text), err=err)


def one_line(message: object) -> str:
    """``message`` as a single line: line breaks become spaces, and the note that torch adds to
    errors raised inside DataPipes (naming the DataPipe, not the data) is left out.

    >>> one_line("a.tar: bad\\nThis exception is thrown by __iter__ of TarLoader(...)")
    'a.tar: bad'
    >>> one_line("first\\n  second")
    'first second'
    """
    lines = (line.strip() for line in str(message).splitlines())
    return " ".join(line for line in lines if line and not line.startswith(_TORCH_NOTE))


def counted(number: int, noun: str) -> str:
    """``number`` with thousands separators and ``noun``, plural unless it is 1.

    >>> counted(1, "shard"), counted(12345, "sample")
    ('1 shard', '12,345 samples')
    """
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def describe_error(exn: Exception) -> str:
    """What went wrong: an OSError about a file as ``<file>: <problem>``, as ``wdspipes``
    reports any error; any other error by its message.

    >>> describe_error(FileNotFoundError(2, "No such file or directory", "out"))
    'out: No such file or directory'
    """
    if isinstance(exn, OSError) and exn.filename is not None and exn.strerror:
        return f"{os.fsdecode(exn.filename)}: {exn.strerror}"
    return str(exn)


def error_line(message: object) -> str:
    """The line that reports a failure: ``wdspipes: error: <message>``.

    >>> error_line("a.tar: no such file")
    'wdspipes: error: a.tar: no such file'
    """
    return f"{PROG}: error: {shown(one_line(message))}"


def warn(message: object) -> None:
    """Write ``wdspipes: warning: <message>`` on stderr (above any progress bar)."""
    tqdm.write(f"{PROG}: warning: {shown(one_line(message))}", file=sys.stderr)


def summarize(text: str, err: bool = False) -> None:
    """Write a command's closing summary on stdout (on stderr where stdout carries the output):
    one paragraph, wrapped at the terminal's width on a terminal, one line when piped or
    redirected (for ``grep`` and logs)."""
    line = shown(one_line(text))
    if (sys.stderr if err else sys.stdout).isatty():
        line = textwrap.fill(line, width=shutil.get_terminal_size().columns)
    click.echo(line, err=err)


def expand_shards(specs: Sequence[str]) -> list[str]:
    """The URLs of shard arguments, each expanded like any wdspipes shard spec (braces, ``::``).

    >>> expand_shards(["a-{0..1}.tar", "b.tar::c.tar"])
    ['a-0.tar', 'a-1.tar', 'b.tar', 'c.tar']
    """
    return [url for spec in specs for url in expand_urls(spec)]


def read_samples(
    urls: Sequence[str], desc: str = "reading", *, ignore_zeros: bool = False
) -> Generator[Sample, None, None]:
    """The samples of the shards at ``urls``, in order, as the read pipeline groups them
    (``__key__``, ``__url__`` and raw ``bytes`` fields), counted by a progress bar.
    ``ignore_zeros`` reads on past zero blocks (see :class:`~wdspipes.read.tar.TarLoader`).

    Raises:
        WdsError: a shard cannot be opened or read, or a sample has a duplicate field.
    """
    from wdspipes.read.grouping import tar_samples  # the core stages: no torch

    samples = tar_samples(urls, ignore_zeros=ignore_zeros)
    with progress(unit=" samples", desc=desc) as bar:
        for sample in samples:
            bar.update()
            yield sample


def parse_size(text: str) -> int:
    """A byte count written with an optional unit: ``K M G T P`` (and ``KiB``, ...) are powers
    of 1024, ``KB MB GB TB PB`` powers of 1000; case does not matter, ``B`` may follow.

    >>> [parse_size(s) for s in ("4096", "3G", "500m", "2KiB", "1kb", "0.5K")]
    [4096, 3221225472, 524288000, 2048, 1000, 512]

    Raises:
        ValueError: the text is not a size.
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:([kmgtp])(i?b?))?\s*(b?)\s*", text, re.I)
    if match is None:
        raise ValueError(f"not a size: {text!r} (examples: 4096, 500M, 3G, 1.5GB)")
    number, prefix, tail, _ = match.groups()
    if prefix is None:
        return int(float(number))
    power = "kmgtp".index(prefix.lower()) + 1
    base = 1000 if tail.lower() == "b" else 1024
    return int(float(number) * base**power)


class SizeType(click.ParamType[int]):
    """A click parameter type for sizes, parsed by :func:`parse_size`."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except ValueError as exn:
            self.fail(str(exn), param, ctx)


SIZE = SizeType()


def format_size(size: int) -> str:
    """A byte count for people, in powers of 1024.

    >>> [format_size(n) for n in (0, 999, 1024, 5 * 2**30 + 2**29)]
    ['0 B', '999 B', '1.0 KiB', '5.5 GiB']
    """
    if size < 1024:
        return f"{size} B"
    units = ("KiB", "MiB", "GiB", "TiB")
    value = size / 1024
    index = 0
    while value >= 1024 and index < len(units) - 1:
        value /= 1024
        index += 1
    return f"{value:.1f} {units[index]}"


def output_compression(path: str, choice: str | None) -> str | None:
    """The compression to write ``path`` with: ``choice`` if given, else the one its suffix
    names (``.gz``/``.tgz``, ``.bz2``, ``.xz``, ``.zst``), else none.

    >>> output_compression("a.tar.gz", None), output_compression("a.tar", "xz"), \
output_compression("-", None)
    ('gz', 'xz', None)
    """
    if choice is not None:
        return choice
    return _COMPRESSION_SUFFIXES.get(os.path.splitext(path)[1].lower())


def shard_writer(output: str, compress: str | None, unsafe_names: bool = False) -> TarWriter:
    """A ``TarWriter(encoder=False)`` for the output argument ``output``: any URL the writers
    take (a path, ``-`` for standard output, ``pipe:COMMAND``, ``s3://...``; see
    :mod:`wdspipes.io.sinks`). Used with ``with``, it is complete under its name only when the
    block succeeds; when the block fails it is aborted: a path or an object is never created,
    and standard output or a command is left without the end-of-archive marker, so that
    whoever reads it sees that it is cut short. Names that escape are refused unless
    ``unsafe_names`` (``--unsafe-names``).
    """
    from wdspipes.write import TarWriter  # numpy and the URL layer: only commands that write

    return TarWriter(output, encoder=False, compress=compress, unsafe_names=unsafe_names)


class Stopwatch:
    """Seconds since it was made, for summaries.

    >>> f"{Stopwatch().elapsed():.0f}"
    '0'
    """

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

"""The ``wdspipes`` command: create, inspect, concatenate, reshard, index and view WebDataset
shards, and the demo.

Every failure is reported here, once: bad arguments as click's usage message (exit status
2); bad input (a missing file, a file that is not a tar archive, a truncated shard, ...) as
one line ``wdspipes: error: <message>`` (exit status 1); an interrupt with status 130.
Commands raise :class:`click.ClickException`, :class:`~wdspipes.errors.WdsError`,
``OSError`` or ``ValueError`` and leave the reporting to :func:`main`.

>>> main(["--version"])  # doctest: +ELLIPSIS
wdspipes, version ...
0
"""

from __future__ import annotations

import io
import os
import sys
import warnings
from collections.abc import Sequence
from typing import TextIO

import click

from wdspipes import __version__
from wdspipes.cli.cat import cat
from wdspipes.cli.common import PROG, describe_error, error_line, shown
from wdspipes.cli.create import create
from wdspipes.cli.demo import demo
from wdspipes.cli.index import index
from wdspipes.cli.info import info
from wdspipes.cli.reshard import reshard
from wdspipes.cli.show import show
from wdspipes.errors import WdsError

__all__ = ["cli", "main"]

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


@click.group(
    name=PROG,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "-V", "--version", prog_name=PROG)
def cli() -> None:
    """Create, inspect, concatenate, reshard, index and view WebDataset shards (tar files in
    which the files that share a basename form one sample); demo trains a small model on
    shards it writes.

    Shard arguments are wdspipes shard specs: local paths, file: and pipe: URLs, - for
    standard input, with brace expansion (train-{000..009}.tar) and :: to join specs.
    """


for _command in (create, info, cat, reshard, index, show, demo):
    cli.add_command(_command)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``wdspipes`` command with ``argv`` (default: ``sys.argv[1:]``); return its exit
    status."""
    args = list(sys.argv[1:] if argv is None else argv)
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            result = cli.main(args=args, prog_name=PROG, standalone_mode=False)
        except click.UsageError as exn:
            _show_usage_error(exn)
            return EXIT_USAGE
        except click.ClickException as exn:
            return _fail(exn.format_message())
        except (WdsError, ValueError) as exn:
            return _fail(exn)
        except BrokenPipeError:
            return _broken_pipe()
        except OSError as exn:
            return _fail(describe_error(exn))
        except (click.Abort, KeyboardInterrupt):
            click.echo(error_line("interrupted"), err=True)
            return EXIT_INTERRUPTED
    return result if isinstance(result, int) else 0


def _show_usage_error(exn: click.UsageError) -> None:
    """click's usage message, each line as :func:`~wdspipes.cli.common.shown`: it may quote an
    argument, the name of a file a glob found."""
    text = io.StringIO()
    exn.show(file=text)
    for line in text.getvalue().splitlines():
        click.echo(shown(line), err=True)


def _fail(message: object) -> int:
    click.echo(error_line(message), err=True)
    return EXIT_FAILURE


def _broken_pipe() -> int:
    """The reader of stdout went away (``wdspipes cat ... -o - | head``): end quietly, as a
    command killed by SIGPIPE would, without Python's complaint when it flushes stdout."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_FAILURE


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """Warnings of the library, as one ``wdspipes: warning:`` line each."""
    click.echo(f"{PROG}: warning: {shown(' '.join(str(message).split()))}", err=True)

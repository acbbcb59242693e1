"""``pipe:CMD`` shards: run CMD through the shell and read its standard output, where the
program asked for it.

The command runs in a process group of its own. Closing the stream before the end of the
output ends the whole group and does not look at its status; closing it after the end waits
for the command and raises :class:`~wdspipes.errors.CommandError` for a failure status. Exit
status 141 (killed by SIGPIPE) is not a failure. No child outlives its stream as a zombie.

Which commands run is a policy, ``commands`` (:data:`Commands`), given as an argument to the
readers and writers, else read from the environment variable ``WDSPIPES_COMMANDS`` when a URL
is opened (:func:`commands_policy`):

- ``"program"`` (the default): a ``pipe:`` URL that the program gave runs, as in webdataset;
  one that came from the data does not (the ``"url"`` of a ``{"url": ...}`` shard item, as
  shard lists read from files give them).
- ``"never"``: no ``pipe:`` URL runs, for reading or for writing (webdataset 1.0's
  ``WDS_SECURE=1`` means this too).
- ``"any"``: ``pipe:`` URLs from the data run too.

A refused URL is a :class:`~wdspipes.errors.ShardOpenError` (also a ``ValueError``, as
webdataset's refusal) that says how to allow it. A URL that names an existing file is that
file, whatever its prefix (:func:`~wdspipes.io.local.reading_path`): it never runs.

>>> check_command("pipe:cat a.tar", "never")
Traceback (most recent call last):
...
wdspipes.errors.ShardOpenError: pipe:cat a.tar: refused: pipe: URLs run a shell command, and \
commands='never' (or WDSPIPES_COMMANDS=never) runs none
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import subprocess
from typing import Literal, cast, get_args

from wdspipes.errors import CommandError, ShardOpenError
from wdspipes.io.cancel import on_cancel
from wdspipes.io.local import BUFFER_SIZE, ClosingStream
from wdspipes.redaction import redact

__all__ = [
    "COMMANDS_VARIABLE",
    "Commands",
    "PipeStream",
    "check_command",
    "commands_policy",
    "describe_status",
    "end_group",
    "open_pipe",
]

Commands = Literal["program", "never", "any"]
"""Which ``pipe:`` URLs run: those the program gave, none, or those from the data too."""

COMMANDS_VARIABLE = "WDSPIPES_COMMANDS"
"""The environment variable that sets :data:`Commands` where no argument does."""

_WEBDATASET_VARIABLE = "WDS_SECURE"

log = logging.getLogger(__name__)

_OK_STATUS = frozenset({0, 141, -signal.SIGPIPE})
_READ1_SIZE = 1 << 18  # most bytes one read1 asks for (what it allocates)
_TERMINATE_GRACE = 2.0


class PipeStream(ClosingStream):
    """The standard output of a shell command, readable like a binary file."""

    def __init__(self, command: str, url: str) -> None:
        self.command = command
        self.url = url
        self._process = subprocess.Popen(
            command,
            shell=True,
            stdout=subprocess.PIPE,
            bufsize=BUFFER_SIZE,
            start_new_session=True,
        )
        assert self._process.stdout is not None  # guaranteed by stdout=PIPE
        self._stdout = self._process.stdout
        self._at_end = False
        self._aborted = False
        self.closed = False
        on_cancel(self.abort)

    def read(self, size: int = -1, /) -> bytes:
        data = self._stdout.read(size)
        if size < 0 or len(data) < size:
            self._at_end = True
        return data

    def read1(self, size: int = -1, /) -> bytes:
        """Up to ``size`` bytes (at most 256 KiB), as soon as the command has written any;
        empty at the end."""
        stdout: io.BufferedReader = self._stdout  # type: ignore[assignment]  # bufsize > 0
        data = stdout.read1(_READ1_SIZE if size < 0 else min(size, _READ1_SIZE))
        if not data and size != 0:
            self._at_end = True
        return data

    def abort(self) -> None:
        """End the command's group from another thread (a read waiting for it then ends); its
        status is not looked at. Close the stream after."""
        self._aborted = True
        end_group(self._process, self.command)

    def close(self) -> None:
        """Close the output and reap the command; raise if it failed after writing everything."""
        if self.closed:
            return
        self.closed = True
        self._stdout.close()
        if not self._at_end or self._aborted:
            self._end_early()
            return
        status = self._process.wait()
        if status not in _OK_STATUS:
            raise CommandError(
                describe_status(status), command=self.command, status=status, url=self.url
            )

    def _end_early(self) -> None:
        """The reader stopped before the end: end the command's group, ignore its status."""
        end_group(self._process, self.command)

    def __del__(self) -> None:
        if not getattr(self, "closed", True):
            try:
                self.close()
            except Exception:  # a finaliser must not raise; the stream was abandoned anyway
                log.debug("closing abandoned %r failed", redact(self.url), exc_info=True)


def end_group(process: subprocess.Popen[bytes], command: str) -> None:
    """End the process group of a command started in a session of its own: SIGTERM, then
    SIGKILL if it is still there after a grace period; nothing if it has ended already."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=_TERMINATE_GRACE)
            return
        except subprocess.TimeoutExpired:
            log.warning("command %r ignored %s", redact(command), signal.Signals(sig).name)
    process.wait()


def describe_status(status: int) -> str:
    """What a command's exit status says, for errors: a status, or the signal that killed it.

    >>> describe_status(2), describe_status(-9)
    ('command exited with status 2', 'command was killed by signal SIGKILL')
    """
    if status < 0:
        return f"command was killed by signal {signal.Signals(-status).name}"
    return f"command exited with status {status}"


def open_pipe(url: str) -> PipeStream:
    """Start the command of a ``pipe:CMD`` URL and return its output stream."""
    return PipeStream(url[len("pipe:") :], url)


def commands_policy(commands: Commands | None = None) -> Commands:
    """The policy in force: ``commands`` if given; else ``WDSPIPES_COMMANDS``, read now (not
    when wdspipes was imported); else ``"never"`` if webdataset's ``WDS_SECURE`` is set to a
    number other than 0; else ``"program"``.

    >>> commands_policy("any"), commands_policy()
    ('any', 'program')

    Raises:
        ValueError: ``commands`` or the variable is none of the three.
    """
    if commands is None:
        value = os.environ.get(COMMANDS_VARIABLE, "").strip()
        if value:
            return _checked(value, f"the environment variable {COMMANDS_VARIABLE}")
        secure = os.environ.get(_WEBDATASET_VARIABLE, "").strip()
        return "never" if secure not in ("", "0") else "program"
    return _checked(commands, "commands")


def _checked(value: str, what: str) -> Commands:
    known = get_args(Commands)
    if value not in known:
        raise ValueError(f"{what} must be one of {', '.join(map(repr, known))}, got {value!r}")
    return cast(Commands, value)


def check_command(url: str, commands: Commands | None = None, from_data: bool = False) -> None:
    """Raise unless the policy (:func:`commands_policy`) runs the ``pipe:`` URL ``url``, given
    by the program or, with ``from_data``, found in the data.

    Raises:
        ShardOpenError: refused, saying how to allow it (also a ``ValueError``).
        ValueError: an unknown policy.
    """
    policy = commands_policy(commands)
    if policy == "never":
        problem = (
            "pipe: URLs run a shell command, and commands='never' (or "
            f"{COMMANDS_VARIABLE}=never) runs none"
        )
    elif from_data and policy == "program":
        problem = (
            'this pipe: URL came from the data (the "url" of a shard item), and commands from '
            "the data do not run unless allowed: commands='any' (or "
            f"{COMMANDS_VARIABLE}=any) runs them, for data you trust"
        )
    else:
        return
    raise ShardOpenError.like(ValueError)(f"refused: {problem}", url=url)

"""``pipe:CMD`` shards: run CMD through the shell and read its standard output.

The command runs in a process group of its own. Closing the stream before the end of the
output ends the whole group and does not look at its status; closing it after the end waits
for the command and raises :class:`~wdspipes.errors.CommandError` for a failure status. Exit
status 141 (killed by SIGPIPE) is not a failure. No child outlives its stream as a zombie.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import subprocess

from wdspipes.errors import CommandError
from wdspipes.io.cancel import on_cancel
from wdspipes.io.local import BUFFER_SIZE

__all__ = ["PipeStream", "describe_status", "end_group", "open_pipe"]

log = logging.getLogger(__name__)

_OK_STATUS = frozenset({0, 141, -signal.SIGPIPE})
_READ1_SIZE = 1 << 18  # most bytes one read1 asks for (what it allocates)
_TERMINATE_GRACE = 2.0


class PipeStream:
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
                log.debug("closing abandoned %r failed", self.url, exc_info=True)


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
            log.warning("command %r ignored %s", command, signal.Signals(sig).name)
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

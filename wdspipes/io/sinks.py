"""Writing to URLs: the other half of :func:`~wdspipes.io.open_url`, for the writers of shards.

``open_url(url, "wb")`` (:func:`open_sink`) takes the URLs the readers take, as webdataset's
``gopen(url, "wb")`` does: a path, a ``file:`` URL, ``-`` (standard output), ``pipe:COMMAND``
(the command reads what is written on its standard input), and the schemes fsspec knows
(``s3://`` with ``pip install 'wdspipes[s3]'``, ``gs://``, ``az://``, ``memory://``, ...). It
returns a :class:`ByteSink`: ``write`` and ``flush`` like a binary file, :meth:`ByteSink.close`
to complete what was written, :meth:`ByteSink.abort` to give it up. Used with ``with``, an
exception aborts.

Where the target allows it, what is written appears under its name only when ``close()``
completes, and never in part (``ByteSink.atomic`` says which):

- **Paths and** ``file:`` **URLs**: written to ``.NAME.partial-XXXXXXXX`` beside the name
  (eight random characters; created exclusively, never through a link planted there), then
  flushed, synced to disk (``fsync``) and renamed to the name
  (:class:`~wdspipes.io.atomic.AtomicFile`). ``abort()`` deletes the temporary file; a
  killed process leaves it, never a cut file under the name. A symbolic link is followed. A
  device or FIFO (``/dev/null``) is written directly.
- **Object stores** (``s3``, ``gs``, ``az`` and the like: :data:`OBJECT_STORES`): the store's
  own atomic put. The object is created when the upload completes in ``close()`` (a single
  PUT, or a multipart upload's completion); ``abort()`` discards the upload. A killed process
  leaves no object; S3 keeps the parts of an unfinished multipart upload until a lifecycle
  rule removes them.
- **Other fsspec filesystems** (``memory://``, ``sftp://``, ...): written to
  ``.NAME.partial-XXXXXXXX`` beside the name and moved to it by ``close()`` with the filesystem's
  ``mv`` (a rename where it has one); ``abort()`` removes the temporary file.
- ``pipe:COMMAND`` **and** ``-``: no atomicity. The command (or whoever reads standard output)
  gets the bytes as they are written. ``close()`` closes the command's input and waits for it:
  a failure status (any but 0) is a :class:`~wdspipes.errors.CommandError` naming the command
  and the status, and so is a command that exits before reading all its input. ``abort()``
  ends the command's process group before its input ends, so an uploading command (``pipe:aws
  s3 cp - s3://...``) does not complete the upload; what the command did already stays done.

An unknown scheme is a :class:`~wdspipes.errors.ShardOpenError` (also a ``ValueError``, as in
webdataset) naming the URL and the schemes writers take, never a local file of that name.
A sink dropped without ``close()`` is aborted, with a ``ResourceWarning``.

>>> import os, tempfile
>>> directory = tempfile.mkdtemp()
>>> with open_sink(os.path.join(directory, "a.bin")) as sink:
...     _ = sink.write(b"all of it")
...     [name[:-8] for name in os.listdir(directory)]
['.a.bin.partial-']
>>> os.listdir(directory)
['a.bin']
>>> with open_sink("pipe:cat > " + os.path.join(directory, "b.bin")) as sink:
...     _ = sink.write(b"through a command")
>>> import pathlib
>>> pathlib.Path(directory, "b.bin").read_bytes()
b'through a command'
>>> open_sink("gopher://host/a.tar")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
wdspipes.errors.ShardOpenError: gopher://host/a.tar: cannot write: unknown URL scheme 'gopher'; \
writers take paths, file:, pipe:COMMAND, '-' for stdout and the schemes fsspec knows ...
>>> __import__("shutil").rmtree(directory)
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import warnings
from collections.abc import Mapping
from typing import IO, Any

from wdspipes.errors import CommandError, ShardOpenError, ShardWriteError, WdsError
from wdspipes.io.atomic import AtomicFile, random_suffix
from wdspipes.io.local import BUFFER_SIZE, ClosingStream, local_path, url_scheme
from wdspipes.io.pipe import Commands, check_command, describe_status, end_group
from wdspipes.io.stores import STORE_EXTRAS, fsspec_filesystem, fsspec_protocols
from wdspipes.redaction import redact

__all__ = ["OBJECT_STORES", "ByteSink", "ClosesOrAborts", "open_sink"]

OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss", "hf"})
"""fsspec protocols whose files create the object only when the upload completes (on close):
written in place, atomically by the store."""

_NOT_WRITABLE = {
    "http": "write locally or to a store, or through a command: pipe:curl -sf -T - URL",
    "https": "write locally or to a store, or through a command: pipe:curl -sf -T - URL",
    "ais": "write through the ais command: pipe:ais put - ais://BUCKET/OBJECT",
}


class ClosesOrAborts(ClosingStream):
    """What writers share: used with ``with``, :meth:`close` completes what was written when
    the block succeeds, :meth:`abort` gives it up when the block raises."""

    def abort(self) -> None:
        raise NotImplementedError


class ByteSink(ClosesOrAborts):
    """Bytes being written to a URL: ``write`` and ``flush`` as a binary file, :meth:`close`
    to complete them, :meth:`abort` to give them up (see the module).

    Attributes:
        url: the URL written to.
        atomic: whether the data appears under the URL only once ``close()`` completed.
        closed: whether ``close()`` or ``abort()`` was called.
    """

    def __init__(self, url: str, atomic: bool) -> None:
        self.url = url
        self.atomic = atomic
        self.closed = False
        self._pid = os.getpid()

    def write(self, data: bytes, /) -> int:
        """Write ``data``; returns its length.

        Raises:
            ShardWriteError: the target failed (a full disk, a refused upload).
            CommandError: a ``pipe:`` command stopped reading its input.
        """
        if self.closed:
            raise ValueError(f"write to a closed sink ({redact(self.url)})")
        try:
            self._write(data)
        except WdsError:
            raise
        except (OSError, ValueError) as exn:
            raise self._failed(exn) from exn
        return len(data)

    def flush(self) -> None:
        """Pass buffered bytes on (not a commit: only :meth:`close` completes)."""
        if self.closed:
            return
        try:
            self._flush()
        except WdsError:
            raise
        except (OSError, ValueError) as exn:
            raise self._failed(exn) from exn

    def close(self) -> None:
        """Complete what was written: it appears under the URL now (see the module). If that
        fails, the sink is aborted and the error raised. Closing again does nothing.

        Raises:
            ShardWriteError: completing failed (syncing, renaming, the upload).
            CommandError: a ``pipe:`` command exited with a failure status.
        """
        if self.closed:
            return
        self.closed = True
        try:
            self._complete()
        except BaseException as exn:
            with contextlib.suppress(Exception):
                self._discard()
            if isinstance(exn, (OSError, ValueError)) and not isinstance(exn, WdsError):
                raise self._failed(exn, "completing") from exn
            raise

    def abort(self) -> None:
        """Give up what was written: nothing appears under the URL where the target allows
        it (see the module). Never raises for the target; once closed or aborted, does
        nothing."""
        if self.closed:
            return
        self.closed = True
        self._discard()

    def writable(self) -> bool:
        return not self.closed

    def __del__(self) -> None:
        if getattr(self, "closed", True) or getattr(self, "_pid", None) != os.getpid():
            return  # done, or a copy in a forked child: the parent's to finish
        with contextlib.suppress(Exception):  # a finaliser must not raise
            self.abort()
            warnings.warn(
                f"a sink for {redact(self.url)} was dropped without close(): aborted",
                ResourceWarning,
                stacklevel=1,
            )

    def _failed(self, exn: Exception, doing: str = "writing") -> ShardWriteError:
        return ShardWriteError.like(exn)(f"{doing} failed: {_describe(exn)}", url=self.url)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<{type(self).__name__} {redact(self.url)!r} {state}>"

    # What each target does.
    def _write(self, data: bytes) -> None:
        raise NotImplementedError

    def _flush(self) -> None:
        pass

    def _complete(self) -> None:
        raise NotImplementedError

    def _discard(self) -> None:
        raise NotImplementedError


def open_sink(
    url: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None = None,
    *,
    commands: Commands | None = None,
) -> ByteSink:
    """Open ``url`` for writing (see the module): ``open_url(url, "wb")``.

    Args:
        url: a path (a ``pathlib.Path`` is always a local path), a ``file:`` URL, ``-``,
            ``pipe:COMMAND``, or a URL fsspec opens.
        storage_options: options for fsspec's filesystem (credentials, ``endpoint_url``, ...);
            other URLs ignore them.
        commands: ``"never"`` refuses ``pipe:COMMAND``; None for ``WDSPIPES_COMMANDS`` (see
            :mod:`wdspipes.io.pipe`). A URL to write to is the program's own: ``"program"``
            and ``"any"`` run it.

    Raises:
        ShardOpenError: an unknown or read-only scheme (also a ``ValueError``), a command the
            policy refuses (also a ``ValueError``), a missing directory or no permission (also
            the ``OSError`` open raised), a store package not installed, a store refusing.
    """
    if isinstance(url, os.PathLike):
        return _open_file(os.fspath(url), os.fspath(url))
    if not isinstance(url, str):
        raise ShardOpenError.like(TypeError)(
            f"a URL to write to must be a string or a path, got {type(url).__name__}: {url!r}"
        )
    if url == "-":
        return _StdoutSink(url)
    scheme = url_scheme(url)
    if scheme is None or scheme == "file":
        return _open_file(url, local_path(url) or url)
    if scheme == "pipe":
        check_command(url, commands)
        return _PipeSink(url)
    if scheme in _NOT_WRITABLE:
        raise ShardOpenError.like(ValueError)(
            f"cannot write: {scheme}: URLs are read-only here; {_NOT_WRITABLE[scheme]}", url=url
        )
    if scheme in STORE_EXTRAS or scheme in fsspec_protocols():
        return _open_fsspec(url, storage_options)
    raise ShardOpenError.like(ValueError)(
        f"cannot write: unknown URL scheme {scheme!r}; writers take paths, file:, pipe:COMMAND, "
        "'-' for stdout and the schemes fsspec knows (s3:, gs:, az:, memory:, ...)",
        url=url,
    )


# --- Local files ------------------------------------------------------------------------------


class _FileSink(ByteSink):
    """A local file: through an AtomicFile (temporary name, fsync, rename), or written
    directly for a device or FIFO."""

    def __init__(self, url: str, path: str) -> None:
        special = _special_file(path)
        super().__init__(url, atomic=not special)
        self._atomic: AtomicFile | None = None
        if special:
            self._file: IO[bytes] = open(path, "wb")  # noqa: SIM115  # closed by close()
        else:
            self._atomic = AtomicFile(path)
            self._file = self._atomic.file

    def _write(self, data: bytes) -> None:
        self._file.write(data)

    def _flush(self) -> None:
        self._file.flush()

    def _complete(self) -> None:
        if self._atomic is not None:
            self._atomic.commit()
        else:
            self._file.close()

    def _discard(self) -> None:
        if self._atomic is not None:
            self._atomic.abort()
        else:
            with contextlib.suppress(OSError):
                self._file.close()


def _special_file(path: str) -> bool:
    """Whether ``path`` exists and is no regular file or directory (a device, a FIFO)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _open_file(url: str, path: str) -> _FileSink:
    if os.path.isdir(path):
        raise ShardOpenError.like(IsADirectoryError)("cannot write: is a directory", url=url)
    target = os.path.realpath(path) if os.path.islink(path) else path
    try:
        return _FileSink(url, target)
    except FileNotFoundError as exn:
        directory = os.path.dirname(target) or "."
        raise ShardOpenError.like(exn)(
            f"cannot write: no directory {directory!r}", url=url
        ) from exn
    except OSError as exn:
        raise ShardOpenError.like(exn)(f"cannot write: {_describe(exn)}", url=url) from exn


class _StdoutSink(ByteSink):
    """Standard output, for ``-``: flushed, never closed."""

    def __init__(self, url: str) -> None:
        super().__init__(url, atomic=False)
        self._stdout = sys.stdout.buffer

    def _write(self, data: bytes) -> None:
        self._stdout.write(data)

    def _flush(self) -> None:
        self._stdout.flush()

    def _complete(self) -> None:
        self._stdout.flush()

    def _discard(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stdout.flush()


# --- Commands ---------------------------------------------------------------------------------


class _PipeSink(ByteSink):
    """The standard input of a shell command, run in a process group of its own."""

    def __init__(self, url: str) -> None:
        super().__init__(url, atomic=False)
        self.command = url[len("pipe:") :]
        self._process = subprocess.Popen(
            self.command,
            shell=True,
            stdin=subprocess.PIPE,
            bufsize=BUFFER_SIZE,
            start_new_session=True,
        )
        assert self._process.stdin is not None  # guaranteed by stdin=PIPE
        self._stdin = self._process.stdin

    def _write(self, data: bytes) -> None:
        try:
            self._stdin.write(data)
        except BrokenPipeError as exn:
            raise self._stopped_reading() from exn

    def _flush(self) -> None:
        try:
            self._stdin.flush()
        except BrokenPipeError as exn:
            raise self._stopped_reading() from exn

    def _complete(self) -> None:
        try:
            self._stdin.close()
        except BrokenPipeError as exn:
            raise self._stopped_reading() from exn
        status = self._process.wait()
        if status != 0:
            raise CommandError(
                describe_status(status), command=self.command, status=status, url=self.url
            )

    def _discard(self) -> None:
        end_group(self._process, self.command)
        with contextlib.suppress(OSError):
            self._stdin.close()
        self._process.wait()

    def _stopped_reading(self) -> CommandError:
        status = self._process.wait()
        return CommandError(
            f"command stopped reading its input before the end ({describe_status(status)})",
            command=self.command,
            status=status,
            url=self.url,
        )


# --- fsspec stores ----------------------------------------------------------------------------


class _StoreSink(ByteSink):
    """A file of an object store, created by the store when its upload completes."""

    def __init__(self, url: str, file: Any) -> None:
        super().__init__(url, atomic=True)
        self._file = file

    def _write(self, data: bytes) -> None:
        self._file.write(data)

    def _flush(self) -> None:
        self._file.flush()

    def _complete(self) -> None:
        self._file.close()  # the single PUT, or the multipart upload's completion

    def _discard(self) -> None:
        with contextlib.suppress(Exception):  # the store may refuse: nothing was created
            self._file.discard()  # s3fs: aborts the multipart upload
        with contextlib.suppress(Exception):
            self._file.closed = True  # so that closing, or collecting, uploads nothing


class _MovedSink(ByteSink):
    """A file of another fsspec filesystem: written beside its name, moved to it at the end."""

    def __init__(self, url: str, fs: Any, path: str) -> None:
        super().__init__(url, atomic=True)
        parent, slash, name = path.rpartition("/")
        self._fs = fs
        self._path = path
        self._temporary = f"{parent}{slash}.{name}.partial-{random_suffix()}"
        self._file = fs.open(self._temporary, "wb")

    def _write(self, data: bytes) -> None:
        self._file.write(data)

    def _flush(self) -> None:
        self._file.flush()

    def _complete(self) -> None:
        self._file.close()
        self._fs.mv(self._temporary, self._path)

    def _discard(self) -> None:
        with contextlib.suppress(Exception):
            self._file.close()
        with contextlib.suppress(Exception):
            self._fs.rm(self._temporary)


def _open_fsspec(url: str, storage_options: Mapping[str, Any] | None) -> ByteSink:
    fs, path = fsspec_filesystem(url, storage_options, writing=True)
    protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
    try:
        if protocols & OBJECT_STORES:
            return _StoreSink(url, fs.open(path, "wb"))
        return _MovedSink(url, fs, path)
    except Exception as exn:
        raise ShardOpenError.like(exn)(f"cannot write: {_describe(exn)}", url=url) from exn


def _describe(exn: BaseException) -> str:
    return f"{type(exn).__name__}: {exn}"

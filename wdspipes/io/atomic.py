"""A file that appears under its final name only when complete, for the writers of shards.

:class:`AtomicFile` writes to a temporary name in the final directory, ``.NAME.partial-XXXXXXXX``
(hidden, never a name of a shard pattern, with eight random characters); :meth:`~AtomicFile.commit`
flushes it, syncs it to disk with ``fsync`` and renames it to its final name with ``os.replace``
(atomic on POSIX file systems, replacing a file of that name); :meth:`~AtomicFile.abort` closes
and deletes it. A process killed on the way leaves at most the temporary file, and an older file
under the final name stays as it was until the commit. :class:`~wdspipes.write.ShardWriter`,
:class:`~wdspipes.write.stream_shards.CborWriter` and
:class:`~wdspipes.write.stream_shards.MsgpackWriter` write through it.

The temporary file is made by :func:`create_new`: created exclusively (``O_EXCL``), so that
nothing already there under its name is used, a symbolic link planted there is not followed,
and two writers (two processes of one pid in two containers, say) never share one.

>>> import os, pathlib, tempfile
>>> directory = pathlib.Path(tempfile.mkdtemp())
>>> target = AtomicFile(directory / "a.bin")
>>> _ = target.file.write(b"all of it")
>>> [name[:-8] for name in os.listdir(directory)]
['.a.bin.partial-']
>>> target.commit()
>>> os.listdir(directory), (directory / "a.bin").read_bytes()
(['a.bin'], b'all of it')
>>> other = AtomicFile(directory / "a.bin")
>>> _ = other.file.write(b"half")
>>> other.abort()
>>> os.listdir(directory), (directory / "a.bin").read_bytes()
(['a.bin'], b'all of it')
>>> __import__("shutil").rmtree(directory)
"""

from __future__ import annotations

import contextlib
import os
import secrets
from typing import BinaryIO

__all__ = ["AtomicFile", "create_new", "random_suffix"]

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_ATTEMPTS = 100
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def random_suffix() -> str:
    """Eight random characters (41 bits) for a temporary name, from the system's source."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(8))


def create_new(directory: str, prefix: str, mode: int = 0o666) -> tuple[int, str]:
    """A file newly made in ``directory`` under ``prefix`` and a random suffix, opened for
    writing: its descriptor and path. As ``tempfile.mkstemp``, it is created exclusively
    (``O_EXCL``: never a file or link already there, never through a symbolic link), but with
    ``mode`` less the umask, so that a file renamed into place gets the permissions any new
    file would (``0o600`` for a file of secrets).

    Raises:
        OSError: it cannot be made (a missing directory, no permission), or every name tried
            was taken.
    """
    for _ in range(_ATTEMPTS):
        path = os.path.join(directory, prefix + random_suffix())
        try:
            return os.open(path, _NEW, mode), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name {prefix}XXXXXXXX in {directory or '.'}")


class AtomicFile:
    """A binary file written under a temporary name beside ``path``, renamed to ``path`` by
    :meth:`commit`.

    Args:
        path: the final name. Its directory must exist.

    Attributes:
        path: the final name.
        temporary: the name written to: ``.NAME.partial-XXXXXXXX`` in the same directory,
            created exclusively (see :func:`create_new`).
        file: the open file to write to; :meth:`commit` and :meth:`abort` close it.

    Raises:
        OSError: the temporary file cannot be made.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        directory, name = os.path.split(self.path)
        fd, self.temporary = create_new(directory, f".{name}.partial-")
        self.file: BinaryIO = os.fdopen(fd, "wb")  # commit or abort closes it
        self._done = False

    def commit(self) -> None:
        """Flush, sync to disk, close, and rename to the final name. If any step fails, the
        temporary file is deleted and the error raised. Once committed or aborted, nothing
        more happens."""
        if self._done:
            return
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            os.replace(self.temporary, self.path)
        except BaseException:
            self.abort()
            raise
        self._done = True

    def abort(self) -> None:
        """Close and delete the temporary file; the final name is left as it was. Once
        committed or aborted, nothing more happens."""
        if self._done:
            return
        self._done = True
        with contextlib.suppress(OSError):  # flushing what is thrown away may fail: no matter
            self.file.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.temporary)

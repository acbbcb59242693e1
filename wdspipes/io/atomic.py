"""A file that appears under its final name only when complete, for the writers of shards.

:class:`AtomicFile` writes to a temporary name in the final directory, ``.NAME.partial-PID``
(hidden, and never a name of a shard pattern); :meth:`~AtomicFile.commit` flushes it, syncs it
to disk with ``fsync`` and renames it to its final name with ``os.replace`` (atomic on POSIX
file systems, replacing a file of that name); :meth:`~AtomicFile.abort` closes and deletes it.
A process killed on the way leaves at most the temporary file, and an older file under the
final name stays as it was until the commit. :class:`~wdspipes.write.ShardWriter`,
:class:`~wdspipes.write.streams.CborWriter` and :class:`~wdspipes.write.streams.MsgpackWriter` write
through it.

>>> import os, pathlib, tempfile
>>> directory = pathlib.Path(tempfile.mkdtemp())
>>> target = AtomicFile(directory / "a.bin")
>>> _ = target.file.write(b"all of it")
>>> os.listdir(directory) == [f".a.bin.partial-{os.getpid()}"]
True
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
from typing import BinaryIO

__all__ = ["AtomicFile"]


class AtomicFile:
    """A binary file written under a temporary name beside ``path``, renamed to ``path`` by
    :meth:`commit`.

    Args:
        path: the final name. Its directory must exist.

    Attributes:
        path: the final name.
        temporary: the name written to: ``.NAME.partial-PID`` in the same directory.
        file: the open file to write to; :meth:`commit` and :meth:`abort` close it.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        directory, name = os.path.split(self.path)
        self.temporary = os.path.join(directory, f".{name}.partial-{os.getpid()}")
        self.file: BinaryIO = open(self.temporary, "wb")  # noqa: SIM115  # commit or abort
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

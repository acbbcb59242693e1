"""Writers of stream shards: samples as concatenated CBOR or msgpack items, one item each,
read back by ``load_cbor`` and ``load_msgpack`` (:mod:`wdspipes.read.stream_shards`).

An item holds a sample's fields and its ``__key__``; the other ``__`` entries (``__url__``,
``__local_path__``) are left out. A file written to a path is put under its name only once it
is complete (a local file: temporary name, fsync, rename; an object store: when the upload
completes; see :func:`~wdspipes.io.open_url` with ``"wb"``): the format cannot show a shard cut
between two items, which reads as a shorter valid one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, BinaryIO

import cbor2
import msgpack

from wdspipes.errors import EncodeError
from wdspipes.io.sinks import ByteSink, ClosesOrAborts, open_sink

__all__ = ["CborWriter", "MsgpackWriter"]


class _StreamWriter(ClosesOrAborts):
    """Append samples to a stream shard, one item each; see :class:`CborWriter`."""

    kind = ""

    def __init__(
        self,
        target: str | os.PathLike[str] | BinaryIO,
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._sink: ByteSink | None = None
        if isinstance(target, str | os.PathLike):
            # closed by close(), aborted by __exit__
            self._sink = open_sink(target, storage_options)
            self.stream: BinaryIO | ByteSink = self._sink
        else:
            self.stream = target
        self.count = 0
        self.closed = False

    def encode(self, item: dict[str, Any]) -> bytes:
        raise NotImplementedError

    def write(self, sample: Mapping[str, Any]) -> int:
        """Append one sample; ``__`` entries other than ``__key__`` are left out. Returns the
        bytes written.

        Raises:
            EncodeError: a value the encoding cannot represent, naming key and field.
        """
        if self.closed:
            raise ValueError(f"write to a closed {type(self).__name__}")
        item = {k: v for k, v in sample.items() if k == "__key__" or not k.startswith("__")}
        try:
            data = self.encode(item)
        except (TypeError, ValueError, cbor2.CBOREncodeError) as exn:
            key = sample.get("__key__")
            raise EncodeError(
                f"cannot encode the sample as {self.kind}: {exn}",
                key=key if isinstance(key, str) else None,
            ) from exn
        self.stream.write(data)
        self.count += 1
        return len(data)

    def close(self) -> None:
        """Flush the stream; a file written to a URL is then completed (a local file synced
        to disk and renamed to its name). Closing again does nothing."""
        if self.closed:
            return
        self.closed = True
        if self._sink is None:
            self.stream.flush()
        else:
            self._sink.close()

    def abort(self) -> None:
        """Stop writing: a file written to a URL is given up, never put under its name where
        the target allows it. Once closed or aborted, nothing happens."""
        if self.closed:
            return
        self.closed = True
        if self._sink is not None:
            self._sink.abort()
        else:
            self.stream.flush()


class CborWriter(_StreamWriter):
    """Write samples as concatenated CBOR items, readable by ``load_cbor``.

    Args:
        target: a URL (``open_url(target, "wb")``: a path, ``file:``, ``-``, ``pipe:CMD``, an
            fsspec store's URL), or a binary stream (flushed, not closed, by ``close()``). A
            path is written under a temporary name beside it, ``.NAME.partial-XXXXXXXX``, and
            ``close()`` syncs it to disk and renames it to its name (replacing a file there);
            an exception in the ``with`` block deletes it instead. An object store creates
            the object when ``close()`` completes the upload (see :mod:`wdspipes.io.sinks`).
        storage_options: for an fsspec store's URL, its filesystem's options.

    The format cannot tell a file cut between two items from a shorter shard: it reads as a
    valid one. So the writer only ever puts a complete file under the name; a process killed
    on the way leaves at most its temporary file (see docs/guide/writing.md).

    >>> import io
    >>> buffer = io.BytesIO()
    >>> with CborWriter(buffer) as writer:
    ...     writer.write({"__key__": "a", "txt": "hello", "__url__": "x"})
    21
    >>> cbor2.loads(buffer.getvalue())
    {'__key__': 'a', 'txt': 'hello'}
    """

    kind = "CBOR"

    def encode(self, item: dict[str, Any]) -> bytes:
        return cbor2.dumps(item)


class MsgpackWriter(_StreamWriter):
    """Write samples as concatenated msgpack items, readable by ``load_msgpack``.

    Args:
        target: a path or a binary stream, as for :class:`CborWriter`: a path is written
            under a temporary name and renamed to its name by ``close()``, never left
            truncated under its name.

    >>> import os, tempfile
    >>> directory = tempfile.mkdtemp()
    >>> with MsgpackWriter(os.path.join(directory, "a.msgpack")) as writer:
    ...     size = writer.write({"__key__": "a", "cls": 1})
    ...     [name[:-8] for name in os.listdir(directory)]
    ['.a.msgpack.partial-']
    >>> os.listdir(directory)
    ['a.msgpack']
    >>> __import__("shutil").rmtree(directory)
    """

    kind = "msgpack"

    def encode(self, item: dict[str, Any]) -> bytes:
        return msgpack.packb(item, use_bin_type=True)  # type: ignore[no-any-return]

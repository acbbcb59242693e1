"""webdataset's ``webdataset.gopen`` (``wdspipes.gopen``): ``gopen(url, mode)`` opens a URL
to read or write, through :func:`wdspipes.io.open_url`.

``wds.gopen`` is the function, as in webdataset; ``from wdspipes.gopen import gopen`` too.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "a.txt")
>>> with gopen(path, "wb") as sink:
...     _ = sink.write(b"hello")
>>> with gopen(f"pipe:cat {path}") as stream:
...     stream.read()
b'hello'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wdspipes.io.pipe import Commands
from wdspipes.io.sinks import ByteSink
from wdspipes.io.urls import SCHEMES, ByteStream, open_url
from wdspipes.webdataset.missing import no_counterpart

__all__ = ["gopen", "gopen_schemes", "reader"]

gopen_schemes = SCHEMES
"""wdspipes' table of URL schemes: a function added under a scheme is called with the URL
alone (webdataset's take ``mode`` and ``bufsize`` too, with defaults) to read shards of that
scheme, in ``gopen`` and in every stage that opens shards."""


def gopen(
    url: str,
    mode: str = "rb",
    bufsize: int = 8192,
    *,
    storage_options: Mapping[str, Any] | None = None,
    commands: Commands | None = None,
    from_data: bool = False,
) -> ByteStream | ByteSink:
    """Open ``url`` to read (``"rb"``) or write (``"wb"``), as webdataset's ``gopen``: a local
    path, ``file:``, ``-``, ``pipe:COMMAND``, ``http(s)://``, ``ais://`` or a store fsspec
    reads (see :func:`~wdspipes.io.urls.open_url`). The stream is a context manager.

    Args:
        url: what to open.
        mode: ``"rb"`` or ``"wb"``.
        bufsize: taken and left aside, as webdataset's local files do (wdspipes' streams
            buffer by themselves).
        storage_options: options of a remote store (credentials, ...).
        commands: which ``pipe:`` URLs run (see :mod:`wdspipes.io.pipe`).
        from_data: the URL came from the data (a shard item's ``"url"``): a ``pipe:`` URL
            then runs only where ``commands`` runs commands from the data.

    Raises:
        ShardOpenError: the URL cannot be opened (also the ``OSError`` or ``ValueError``
            webdataset raised).
        ValueError: another mode.
    """
    if mode == "wb":
        return open_url(url, "wb", storage_options=storage_options, commands=commands)
    if mode != "rb":
        raise ValueError(f"gopen: mode must be 'rb' or 'wb', got {mode!r}")
    return open_url(url, storage_options=storage_options, commands=commands, from_data=from_data)


def reader(url: str, **kw: Any) -> ByteStream | ByteSink:
    """``gopen(url, "rb", ...)``, as webdataset's ``reader``."""
    return gopen(url, "rb", **kw)


MISSING = {
    name: "wdspipes opens every scheme through wdspipes.io.open_url (gopen here); add a "
    "scheme's opening function to gopen_schemes"
    for name in (
        "Pipe",
        "gopen_file",
        "gopen_pipe",
        "gopen_curl",
        "gopen_htgs",
        "gopen_hf",
        "gopen_gsutil",
        "gopen_ais",
        "gopen_error",
        "set_options",
        "rewrite_url",
        "info",
    )
}
"""webdataset's names that wdspipes does not provide here, and what to use instead."""


def __getattr__(name: str) -> Any:
    raise no_counterpart("wdspipes.gopen", name, MISSING)

"""Reads served from received chunks: what the HTTP stream (:mod:`wdspipes.io.http`) and the
streams of read-ahead (:mod:`wdspipes.io.readahead`) share."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["read_across"]


def read_across(
    tail: memoryview, size: int, fetch: Callable[[int], bytes]
) -> tuple[bytes, bytes, int]:
    """``size`` bytes (all that come, if negative): ``tail``, then the chunks that
    ``fetch(wanted)`` gives (empty at the end), joined with one copy, or none for a single
    chunk. Returns them, and the last chunk with the position where its unread rest starts
    (``b""`` and 0 if nothing is left of it).

    >>> chunks = iter([b"cde", b"fgh"])
    >>> read_across(memoryview(b"ab"), 4, lambda wanted: next(chunks, b""))
    (b'abcd', b'cde', 2)
    >>> read_across(memoryview(b""), -1, lambda wanted: next(chunks, b""))
    (b'fgh', b'', 0)
    """
    parts: list[bytes | memoryview] = [tail] if tail else []
    got = len(tail)
    rest, position = b"", 0
    while size < 0 or got < size:
        wanted = size - got
        chunk = fetch(wanted)
        if not chunk:
            break
        if 0 <= wanted < len(chunk):
            rest, position = chunk, wanted
            parts.append(memoryview(chunk)[:wanted])
            break
        parts.append(chunk)
        got += len(chunk)
    if len(parts) == 1 and type(parts[0]) is bytes:
        return parts[0], rest, position
    return b"".join(parts), rest, position

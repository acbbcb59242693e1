"""Member names in a shard: how a name splits into a sample's key and a field, and which
names are meta files (FORMAT.md sections 3 and 4). The grouper reads samples by these rules
(:mod:`wdspipes.read.grouping`) and the writers check names by them
(:mod:`wdspipes.write.encoders`), so both take them from here.

A member name splits into a *key* (the directory part plus the last component up to its first
dot) and a *field* (everything after that dot, lower-cased).

>>> split_name("dir.x/0001.seg.JPG")
('dir.x/0001', 'seg.jpg')
>>> split_name(".hidden") is None
True
"""

from __future__ import annotations

import re

__all__ = ["is_meta", "split_name"]

# webdataset's rule, used verbatim where the fast path below cannot decide.
_KEY_AND_FIELD = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_META_DIR = re.compile(r"__[^/]*__($|/)")


def split_name(name: str) -> tuple[str, str] | None:
    """The key and the lower-cased field of a member name; None for a name without a field.

    >>> split_name("a/b.c/d.e"), split_name("a/.jpg"), split_name("a..b")
    (('a/b.c/d', 'e'), ('a/', 'jpg'), ('a', '.b'))
    """
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    # Common case: a dot in the last component with something before it. The regular
    # expression agrees there unless a newline stops its ".*" early.
    if dot > slash + 1 and "\n" not in name:
        return name[:dot], name[dot + 1 :].lower()
    match = _KEY_AND_FIELD.match(name)
    return None if match is None else (match.group(1), match.group(2).lower())


def is_meta(name: str) -> bool:
    """Whether a member is a meta file, skipped by the grouper: ``__name__`` at the top
    level, or anything under a ``__name__/`` directory.

    >>> is_meta("__meta__"), is_meta("__x__/a.jpg"), is_meta("a/__x__.jpg")
    (True, True, False)
    """
    if "/" not in name and name.startswith("__") and name.endswith("__"):
        return True
    return _META_DIR.match(name) is not None

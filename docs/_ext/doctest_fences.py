"""A griffe extension for the API reference: docstrings written for the test runner and for
Sphinx-style readers, made into Markdown before mkdocstrings renders them.

- wdspipes' docstrings hold runnable examples as bare ``>>>`` lines (the test suite runs them).
  Markdown reads such a line as a quotation nested three deep, so each run of example lines
  goes into a fenced ``pycon`` block, without its ``# doctest:`` directives, which only matter
  to the test runner.
- Cross-references written as roles (``:func:`~wdspipes.read.shards.expand_urls` ``) become
  optional autorefs: a link where the target is rendered on some page, plain code otherwise,
  never a warning. A name without a dot is looked up in the object's own module.

The source is untouched. mkdocs.yml loads this file through the Python handler's
``extensions`` option.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

__all__ = ["DoctestFences", "fence_examples", "link_roles"]

_DIRECTIVE = re.compile(r"\s*#\s*doctest:.*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj):`(~?)([\w.]+)`")


def link_roles(text: str, module: str) -> str:
    """``text`` with Sphinx-style cross-reference roles as optional autorefs."""

    def autoref(match: re.Match[str]) -> str:
        short, target = match.groups()
        title = target.rsplit(".", 1)[-1] if short else target
        identifier = target if "." in target else f"{module}.{target}"
        return f'<autoref identifier="{identifier}" optional><code>{title}</code></autoref>'

    return _ROLE.sub(autoref, text)


def fence_examples(text: str) -> str:
    """``text`` with every run of doctest lines (a ``>>>`` line and the lines after it, up to
    a blank or a less indented line) inside a pycon fence."""
    lines = text.split("\n")
    out: list[str] = []
    index = 0
    in_fence = False
    while index < len(lines):
        line = lines[index]
        if _FENCE.match(line):
            in_fence = not in_fence
        stripped = line.lstrip()
        if in_fence or not stripped.startswith(">>>"):
            out.append(line)
            index += 1
            continue
        indent = line[: len(line) - len(stripped)]
        out.append(f"{indent}```pycon")
        while index < len(lines):
            line = lines[index]
            if not line.strip() or not line.startswith(indent):
                break
            if line.lstrip().startswith((">>>", "...")):
                line = _DIRECTIVE.sub("", line)
            out.append(line)
            index += 1
        out.append(f"{indent}```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Rewrite every docstring once the package is loaded: examples fenced, roles linked."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is None:
            return
        text = obj.docstring.value
        if ">>>" in text:
            text = fence_examples(text)
        obj.docstring.value = link_roles(text, obj.module.path)

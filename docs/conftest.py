"""Runs the examples of the documentation pages as doctests.

pytest collects every ``docs/**/*.md`` page with ``>>>`` examples (``--doctest-glob`` in
pyproject.toml) as one test: the page's examples run in order, in one namespace, the way a
reader would type them. Each page starts in an empty directory of its own, so its examples
write their shards under relative paths and leave nothing behind. A page's namespace is a
module as a script's is, so that the classes and functions it defines pickle (torch traverses a
pipeline's graph by pickling it). Pages whose examples start loader worker processes get the
``loaders`` mark, like the tests that do. Whitespace in the expected output is normalized
(doctest's ``NORMALIZE_WHITESPACE``), so that a long output line can wrap to fit the page's
88 columns.
"""

from __future__ import annotations

import doctest
import sys
import types
from pathlib import Path
from typing import Any

import pytest

DOCS = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def _page_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


class _PageModule(types.ModuleType):
    """A page's namespace seen as a module: what the page defines is found there by name."""

    def __init__(self, name: str, namespace: dict[str, Any]) -> None:
        super().__init__(name)
        self._namespace = namespace

    def __getattr__(self, name: str) -> Any:
        try:
            return self._namespace[name]
        except KeyError:
            raise AttributeError(name) from None


@pytest.fixture(autouse=True)
def _page_module(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    test = getattr(request.node, "dtest", None)
    if test is None or not Path(request.node.path).is_relative_to(DOCS):
        return
    name = "docs_page_" + Path(request.node.path).stem.replace("-", "_")
    test.globs["__name__"] = name
    for example in test.examples:
        example.options.setdefault(doctest.NORMALIZE_WHITESPACE, True)
    monkeypatch.setitem(sys.modules, name, _PageModule(name, test.globs))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(item.path)
        page = path.suffix == ".md" and path.is_relative_to(DOCS)
        if page and "num_workers=" in path.read_text():
            item.add_marker(pytest.mark.loaders)

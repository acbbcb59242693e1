"""Runs the examples of the documentation pages as doctests.

pytest collects every ``docs/**/*.md`` page with ``>>>`` examples (``--doctest-glob`` in
pyproject.toml) as one test: the page's examples run in order, in one namespace, the way a
reader would type them. Each page starts in an empty directory of its own, so its examples
write their shards under relative paths and leave nothing behind. Pages whose examples start
loader worker processes get the ``loaders`` mark, like the tests that do.
"""

from __future__ import annotations

from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def _page_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(item.path)
        page = path.suffix == ".md" and path.is_relative_to(DOCS)
        if page and "num_workers=" in path.read_text():
            item.add_marker(pytest.mark.loaders)

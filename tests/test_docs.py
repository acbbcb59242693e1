"""The documentation site: it builds with ``mkdocs build --strict`` (a warning of any kind, such
as a broken link or anchor, a page missing from the nav or a docstring griffe cannot parse,
fails the build), and its pages cover what they promise: every stage on the Stages page, every
public name in the API reference, every recorded benchmark table on the Performance page.

The ``>>>`` examples of the pages run as doctests, collected from docs/ (see docs/conftest.py).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from torch.utils.data import IterDataPipe

import wdspipes as wds
from wdspipes.core.curried import is_stage_factory
from wdspipes.core.protocol import functional_names

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for this module; any warning fails with mkdocs' whole output."""
    directory = tmp_path_factory.mktemp("site")
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet"]
    command += ["--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(directory)]
    # The theme prints a banner about its successor unless told not to; it is no warning.
    environment = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=240
    )
    output = result.stdout + result.stderr
    if result.returncode != 0 or "WARNING" in output:
        pytest.fail(f"mkdocs build --strict failed (status {result.returncode}):\n{output}")
    return directory


@pytest.mark.slow
def test_the_site_builds_strictly(site: Path) -> None:
    for page in ["index.html", "getting-started/index.html", "api/pipeline/index.html"]:
        assert (site / page).is_file(), page
    assert not (site / "conftest.py").exists(), "docs/conftest.py is no page"
    # Code in tables keeps whole words (docs/stylesheets/extra.css, via mkdocs.yml).
    assert "stylesheets/extra.css" in (site / "performance" / "index.html").read_text()
    css = (site / "stylesheets" / "extra.css").read_text()
    assert "white-space: nowrap" in css
    # ... but for the type annotations of the API reference's tables, which wrap at spaces.
    assert ".md-typeset tr.doc-section-item > td:nth-child(2) > code {" in css
    # Code blocks hold CODE_WIDTH columns at the widths of the three-column page.
    assert re.search(r"\.md-typeset pre > code \{\s*font-size: \.76em;", css)


def inventory(site: Path) -> set[str]:
    """The objects mkdocstrings rendered, and the aliases that reach them."""
    header_and_body = (site / "objects.inv").read_bytes().split(b"\n", 4)
    body = zlib.decompress(header_and_body[4]).decode()
    return {line.split(" ", 1)[0] for line in body.splitlines()}


@pytest.mark.slow
def test_every_public_name_is_in_the_api_reference(site: Path) -> None:
    documented = inventory(site)
    missing = [name for name in wds.__all__ if f"wdspipes.{name}" not in documented]
    assert not missing, (
        f"public names not rendered by any ::: directive under docs/api/: {missing} "
        "(add their module to a page there)"
    )


def stage_names() -> tuple[set[str], set[str]]:
    """The functional names wdspipes registers, and its curried stages for DataPipeline."""
    functional = set(functional_names())
    assert functional <= set(IterDataPipe.functions)
    curried = {name for name in wds.__all__ if is_stage_factory(getattr(wds, name))}
    return functional, curried


def test_every_stage_has_an_example_on_the_stages_page() -> None:
    page = (DOCS / "guide" / "stages.md").read_text()
    examples = "\n".join(line for line in page.splitlines() if line.startswith((">>>", "...")))
    functional, curried = stage_names()
    assert functional and curried
    sources = {"ShardList", "SimpleShardList", "ResampledShards", "IteratorStage", "Stage"}
    wanted = [rf"\.{name}\(" for name in sorted(functional)]
    wanted += [rf"\bwds\.{name}\b" for name in sorted(curried | sources)]
    wanted += [r"\bwds\.split_by_node\b", r"\bwds\.split_by_worker\b"]
    missing = [pattern for pattern in wanted if not re.search(pattern, examples)]
    assert not missing, f"docs/guide/stages.md has no example of {missing}"


# The widest line a code block shows without a scroll bar, on screens from 1220 pixels wide
# (docs/stylesheets/extra.css sizes the font of code blocks for it).
CODE_WIDTH = 88
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def page_lines(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, line, part) for each line of a page, the part being "prose", "fence"
    (a line that opens or closes a fenced code block) or "code" (a line inside one)."""
    fence = ""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = _FENCE.match(line)
        if not fence:
            fence = match.group(1) if match else ""
            yield number, line, "fence" if fence else "prose"
        elif match and match.group(1).startswith(fence) and line.strip() == match.group(1):
            fence = ""
            yield number, line, "fence"
        else:
            yield number, line, "code"


def wide_code_lines(path: Path) -> list[tuple[int, int]]:
    """(line number, width) of each line inside a fenced code block wider than CODE_WIDTH."""
    return [
        (number, len(line))
        for number, line, part in page_lines(path)
        if part == "code" and len(line) > CODE_WIDTH
    ]


def test_code_lines_in_the_docs_fit_their_boxes() -> None:
    pages = sorted(DOCS.rglob("*.md"))
    assert len(pages) > 20
    wide = [
        f"docs/{page.relative_to(DOCS).as_posix()}:{number}: {width} columns"
        for page in pages
        for number, width in wide_code_lines(page)
    ]
    assert not wide, f"code lines over {CODE_WIDTH} columns (wrap them):\n" + "\n".join(wide)


def test_wide_code_lines_are_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    lines = ["prose " * 20, "", "```sh", "short", "x" * 89, "```", "", "  ~~~~", "```"]
    lines += ["y" * 88, "    " + "z" * 85, "  ~~~~", "w" * 100]
    page.write_text("\n".join(lines) + "\n")
    assert wide_code_lines(page) == [(5, 89), (11, 89)]


def unfenced_examples(path: Path) -> list[int]:
    """The numbers of the ``>>>`` lines of a page outside any fenced code block. The doctest
    runner reads them all the same, but Markdown shows them as a quotation nested three deep,
    the lines run together; a page fences each run of examples as ```` ```pycon ````."""
    return [
        number
        for number, line, part in page_lines(path)
        if part == "prose" and line.lstrip().startswith(">>>")
    ]


def test_doctest_examples_in_the_docs_are_fenced() -> None:
    # The site's pages, and the README, which the code host renders the same way.
    pages = [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]
    assert len(pages) > 20
    bare = [
        f"{page.relative_to(ROOT).as_posix()}:{number}"
        for page in pages
        for number in unfenced_examples(page)
    ]
    assert not bare, (
        "'>>>' lines outside a fenced code block, shown as a quotation with the lines run "
        "together (put each run of examples in a ```pycon fence, a blank line before its "
        "closing ```):\n" + "\n".join(bare)
    )


# Markdown reads ">>> " as three quotation marks: a bare example line becomes a quotation
# nested three deep, its ">>>" gone and its lines run together.
_QUOTED_EXAMPLE = re.compile(r"<blockquote>\s*<blockquote>\s*<blockquote>")


@pytest.mark.slow
def test_no_page_of_the_site_shows_examples_as_a_quotation(site: Path) -> None:
    # The pages' sources are checked above; this also covers the API reference's docstrings.
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20
    quoted = [
        page.relative_to(site).as_posix()
        for page in pages
        if _QUOTED_EXAMPLE.search(page.read_text())
    ]
    assert not quoted, f"pages showing '>>>' examples as a quotation nested three deep: {quoted}"


def test_quoted_examples_are_found() -> None:
    # Imported here: .venv-torchdata-0.11 collects this module too and has no docs tools.
    import markdown

    bare = markdown.markdown("Text:\n\n>>> import wdspipes as wds\n>>> wds.__name__\n'wdspipes'")
    assert _QUOTED_EXAMPLE.search(bare)
    fenced = markdown.markdown(
        "```pycon\n>>> wds.__name__\n```", extensions=["pymdownx.superfences"]
    )
    assert not _QUOTED_EXAMPLE.search(fenced + "<blockquote><p>a quotation</p></blockquote>")


def test_unfenced_examples_are_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    lines = ["Text with `>>>` inside.", "", ">>> bare()", "1", "", "```pycon", ">>> fenced()"]
    lines += ["", "```", "", "!!! note", "", "    ~~~~pycon", "    >>> in_a_note()", "    ```"]
    lines += ["    >>> still_fenced()", "    ~~~~", "", "- a list item:", "", "    >>> bare"]
    page.write_text("\n".join(lines) + "\n")
    assert unfenced_examples(page) == [3, 21]


_LIST_ITEM = re.compile(r"^(\s*)([-*+]|1[.)])\s+\S")
_NOT_A_PARAGRAPH = ("|", "#", "<", ">", "!!!", "???")


def lists_without_a_blank_line(path: Path) -> list[int]:
    """The numbers of the lines of a page that start a list right under a line of a paragraph.
    The site's Markdown (Python-Markdown) starts a list only after a blank line, so such items
    run into the paragraph as one line of text with dashes in it."""
    found = []
    previous, previous_part = "", "fence"
    for number, line, part in page_lines(path):
        item = _LIST_ITEM.match(line)
        if item and part == previous_part == "prose" and previous.strip():
            indent = len(item.group(1))
            same_level = len(previous) - len(previous.lstrip()) == indent
            paragraph = not previous.lstrip().startswith(_NOT_A_PARAGRAPH)
            if same_level and paragraph and not _LIST_ITEM.match(previous):
                found.append(number)
        previous, previous_part = line, part
    return found


def test_lists_in_the_docs_follow_a_blank_line() -> None:
    pages = [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]
    glued = [
        f"{page.relative_to(ROOT).as_posix()}:{number}"
        for page in pages
        for number in lists_without_a_blank_line(page)
    ]
    assert not glued, (
        "lists right under a paragraph line, which the site runs into the paragraph (put a "
        "blank line before them):\n" + "\n".join(glued)
    )


def test_lists_without_a_blank_line_are_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    lines = ["Images:", "- numpy arrays,", "  wrapped;", "- torch tensors.", "", "Fine:", ""]
    lines += ["- one", "", "```text", "x", "- not a list", "```", "", "!!! note", ""]
    lines += ["    Inside a note:", "    1. glued", "", "2026 saw", "1999. Not a list.", "| a |"]
    lines += ["- after a table row", "", "wrapped prose", "0. not a list item either"]
    page.write_text("\n".join(lines) + "\n")
    assert lists_without_a_blank_line(page) == [2, 18]


@pytest.fixture(scope="module")
def plots() -> ModuleType:
    return load_module(ROOT / "benchmarks" / "plots.py")


def test_the_performance_page_holds_the_recorded_results(plots: ModuleType) -> None:
    # A command wrapped to fit its box counts as the one line it stands for.
    page = re.sub(r" \\\n\s*", " ", (DOCS / "performance.md").read_text())
    results = plots.load()
    stale = [
        table_id
        for table_id, table in plots.tables(results).items()
        if plots.render_table(table) not in page
    ]
    assert not stale, (
        f"tables of benchmarks/results.json not on docs/performance.md as printed by "
        f"`python benchmarks/plots.py --markdown`: {stale}"
    )
    for benchmark in results["benchmarks"]:
        assert benchmark["command"] in page or all(
            table.get("command", "") in page for table in benchmark["tables"]
        ), benchmark["id"]


@pytest.mark.slow
def test_the_plots_are_drawn_from_the_results(plots: ModuleType, tmp_path: Path) -> None:
    written = plots.draw(plots.load(), tmp_path)
    assert sorted(path.name for path in written) == sorted(plots.PLOTS)
    for path in written:
        assert path.read_bytes().startswith(b"\x89PNG")
        committed = DOCS / "images" / path.name
        assert committed.is_file(), f"{committed} is missing: run benchmarks/plots.py"
        assert f"images/{path.name}" in (DOCS / "performance.md").read_text()


def test_docstring_examples_are_fenced_for_the_api_reference() -> None:
    fences = load_module(DOCS / "_ext" / "doctest_fences.py")
    docstring = "Summary.\n\n>>> f(1)  # doctest: +ELLIPSIS\n2\n>>> g(\n...     3)\n\nAfter."
    assert fences.fence_examples(docstring) == (
        "Summary.\n\n```pycon\n>>> f(1)\n2\n>>> g(\n...     3)\n```\n\nAfter."
    )
    fenced = "```python\n>>> kept\n```"
    assert fences.fence_examples(fenced) == fenced
    assert fences.link_roles("see :func:`~wdspipes.read.shards.expand_urls`", "wdspipes.x") == (
        'see <autoref identifier="wdspipes.read.shards.expand_urls" optional>'
        "<code>expand_urls</code></autoref>"
    )
    assert 'identifier="wdspipes.samples.batch.collate"' in fences.link_roles(
        ":func:`collate`", "wdspipes.samples.batch"
    )


DOC_PATH = re.compile(r"\bdocs/[\w/.-]*?\.md\b")


def doc_paths_named(text: str) -> set[str]:
    """The pages of the docs a text names by path (``docs/guide/layout.md``)."""
    return set(DOC_PATH.findall(text))


def test_every_page_the_code_names_is_there() -> None:
    """Docstrings, comments and messages that point a reader at a page of the docs name one
    that exists: pages move, and the paths written in code must move with them."""
    sources = [
        *sorted((ROOT / "wdspipes").rglob("*.py")),
        *sorted((ROOT / "tests").glob("*.py")),
        *sorted((ROOT / "benchmarks").glob("*.py")),
        ROOT / "README.md",
    ]
    missing = [
        f"{source.relative_to(ROOT)}: {path}"
        for source in sources
        for path in sorted(doc_paths_named(source.read_text()))
        if not (ROOT / path).is_file()
    ]
    assert not missing, "pages named but not there:\n" + "\n".join(missing)


def test_named_pages_are_found() -> None:
    moved = "docs/" + "writing.md"  # split, so that this file names no missing page
    text = f"see docs/guide/layout.md, and {moved} (moved)"
    assert doc_paths_named(text) == {"docs/guide/layout.md", moved}

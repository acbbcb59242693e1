"""No import cycles in the package: no module imports, as it loads, a module that imports it
back (directly or through others); and within each folder the modules stand in layers, no
import going back up, not even inside a function or for type checkers only (a stream type
one module declares and another needs goes below both, as ``ByteStream`` in io/local.py,
rather than one module of a pair naming a type of the other while the other calls it)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from package_graph import imports_of, package_modules


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The cycles of ``graph`` (node -> the nodes it points to): each set of nodes that reach
    one another, sorted, of more than one node (Tarjan's strongly connected components)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        order[node] = low[node] = len(order)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in order:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], order[target])
        if low[node] == order[node]:
            component = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in order:
            visit(node)
    return sorted(found)


def folder(module: str) -> str | None:
    """The folder of ``wdspipes.<folder>.<module>...`` (the folder's own ``__init__`` too);
    None for the modules at the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or module in FOLDERS else None


FOLDERS = {name for name in package_modules() if len(name.split(".")) == 2} & {
    name.rsplit(".", 1)[0] for name in package_modules() if len(name.split(".")) > 2
}
"""The packages right under wdspipes (``wdspipes.io``, ``wdspipes.read``, ...)."""


def test_no_module_imports_back_a_module_that_imports_it() -> None:
    modules = package_modules()
    graph = {name: imports_of(path, in_functions=False) for name, path in modules.items()}
    assert len(graph) > 100
    assert cycles(graph) == []


@pytest.mark.parametrize("name", sorted(folder(f) for f in FOLDERS))
def test_the_modules_of_a_folder_import_one_another_in_layers(name: str) -> None:
    modules = {m: path for m, path in package_modules().items() if folder(m) == name}
    graph = {m: imports_of(path, typing=True) & set(modules) for m, path in modules.items()}
    found = cycles(graph)
    assert found == [], f"{found}: declare what both need in a module below them"


def test_cycles_are_found() -> None:
    # io/cache.py naming io/urls.py's stream type, io/urls.py importing the cache's discard
    graph = {"io.urls": {"io.cache", "io.local"}, "io.cache": {"io.urls"}, "io.local": set()}
    assert cycles(graph) == [["io.cache", "io.urls"]]
    longer = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "d"}, "e": {"f"}}
    assert cycles(longer) == [["a", "b", "c"]]  # not d (into the cycle, and to itself)

"""The folders of the package are the way data moves (docs/guide/layout.md): each imports only
from those before it, so that a folder can be read knowing only those."""

from __future__ import annotations

from package_graph import imports_of, package_modules

MAY_IMPORT = {
    "redaction": set(),
    "errors": {"redaction"},
    "state": {"errors"},
    "core": {"state", "errors", "redaction"},
    "io": {"core", "state", "errors", "redaction"},
    "read": {"io", "core", "state", "errors", "redaction"},
    "samples": {"core", "state", "errors", "redaction"},
    "write": {"io", "samples", "core", "errors", "redaction"},
    "loaders": {"core", "errors"},
    "nodes": {"errors"},  # the torchdata.nodes front end: over any pipeline, by its methods
    "pipeline": {"read", "io", "samples", "core", "state", "errors", "redaction"},
    "tools": {"pipeline", "write", "read", "io", "samples", "core", "state", "errors", "redaction"},
    # webdataset's module paths: facades over the stages, each from what it stands for
    "gopen": {"io", "core", "redaction"},
    "handlers": {"errors", "redaction"},
    "utils": {"pipeline", "core", "redaction"},
    "filters": {"api", "utils", "core", "errors", "redaction"},
    "shardlists": {"api", "read", "core", "redaction"},
    "tariterators": {"api", "gopen", "read", "io", "core", "errors", "redaction"},
    "autodecode": {"samples", "core", "errors", "redaction"},
}
"""What each folder (or module at the top) may import besides itself; ``cli``, ``demo``,
``api`` and the package's ``__init__`` may import anything."""


def part(module: str) -> str:
    """The folder or top-level module of ``wdspipes.<part>...``."""
    return module.split(".")[1] if "." in module else module


def test_each_folder_imports_only_the_folders_before_it() -> None:
    modules = package_modules()
    assert {part(name) for name in modules} >= set(MAY_IMPORT)
    wrong = []
    for name, path in sorted(modules.items()):
        allowed = MAY_IMPORT.get(part(name))
        if allowed is None:
            continue
        for imported in sorted(imports_of(path)):
            if part(imported) not in allowed | {part(name)}:
                wrong.append(f"{name} imports {imported}")
    assert not wrong, "\n".join(wrong)

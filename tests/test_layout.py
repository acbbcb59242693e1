"""The folders of the package are the way data moves (docs/guide/layout.md): each imports only
from those before it, so that a folder can be read knowing only those."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from package_graph import imports_of, package_modules

FACADES = ("autodecode", "filters", "gopen", "handlers", "shardlists", "tariterators", "utils")
"""webdataset's module paths (``wdspipes.filters``, ...): facades over the layer."""

MAY_IMPORT = {
    "redaction": set(),
    "errors": {"redaction"},
    # the model of a stage, its epoch context and the engine that opens epochs and keeps state
    "core": {"errors", "redaction"},
    # torchdata's loaders and their mends, the loaders' states, DataLoader2's worker queues
    "loaders": {"core", "errors"},
    "io": {"core", "errors", "redaction"},
    "read": {"io", "core", "errors", "redaction"},
    "samples": {"loaders", "core", "errors", "redaction"},
    "write": {"io", "samples", "core", "errors", "redaction"},
    # the DataPipe front ends of the stages of read and samples, torch's stages in a pipeline
    "pipes": {"read", "io", "samples", "loaders", "core", "errors", "redaction"},
    "nodes": {"errors"},  # the torchdata.nodes front end: over any pipeline, by its methods
    "pipeline": {"pipes", "read", "io", "samples", "core", "errors", "redaction"},
    "tools": {"write", "read", "io", "samples", "core", "errors", "redaction"},
    # webdataset's vocabulary, one layer on top of the stages and their front ends
    "webdataset": {"pipeline", "pipes", "read", "io", "samples", "core", "errors", "redaction"},
    # webdataset's module paths: facades over the layer, nothing else
    **{path: {"webdataset"} for path in FACADES},
}
"""What each folder (or module at the top) may import besides itself; ``cli``, ``demo``,
``api`` and the package's ``__init__`` may import anything."""


def test_the_api_takes_webdatasets_names_from_the_layer_not_the_facades() -> None:
    """No ring: the api imports webdataset's layer, and the facades at webdataset's module paths
    import the layer too, never the api; the layer imports neither."""
    modules = package_modules()
    api = {part(name) for name in imports_of(modules["wdspipes.api"])}
    assert "webdataset" in api and not api & set(FACADES)
    layer = [name for name in modules if part(name) == "webdataset"]
    assert len(layer) > 5
    for name in layer:
        imported = {part(module) for module in imports_of(modules[name])}
        assert not imported & {"api", *FACADES}, name


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


TORCH_AT_MODULE_LEVEL = {
    # what meets torch's objects: the pipeline's DataPipe classes, tensors handed over by
    # batching workers, the map-style dataset
    "wdspipes.pipeline",
    "wdspipes.samples.handover",
    "wdspipes.read.random_access",
}
"""The modules that may import torch (or torchdata) at their top, besides those of ``pipes``
(the DataPipe front ends, their base and torch's own stages in a pipeline), ``loaders``
(torchdata's loaders and their mends), ``nodes``, ``demo`` and ``cli.show``: every other imports
it, if at all, inside the function that makes a tensor or meets one of torch's objects; none of
``core``.
"""

TORCH_ANYWHERE = (
    "wdspipes.pipes",
    "wdspipes.webdataset",
    "wdspipes.loaders",
    "wdspipes.nodes",
    "wdspipes.demo",
    "wdspipes.cli.show",
)


def torch_at_module_level(path: Path) -> bool:
    """Whether the module imports torch or torchdata outside functions and type-checking
    blocks (directly or through ``wdspipes`` modules is not asked here)."""
    tree = ast.parse(path.read_text())

    def top(nodes: list[ast.stmt]) -> Iterator[ast.stmt]:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.If | ast.Try | ast.With):
                inner = [*node.body, *getattr(node, "orelse", []), *getattr(node, "handlers", [])]
                yield from top([n for n in inner if isinstance(n, ast.stmt)])
                for handler in getattr(node, "handlers", []):
                    yield from top(handler.body)
                continue
            yield node

    for node in top(tree.body):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        else:
            continue
        if any(name.split(".")[0] in ("torch", "torchdata") for name in names):
            return True
    return False


def test_only_the_front_ends_and_the_tensor_code_import_torch_at_module_level() -> None:
    importing = {
        name
        for name, path in package_modules().items()
        if torch_at_module_level(path)
        and part(name) != "api"
        and not name.startswith(TORCH_ANYWHERE)
    }
    assert importing <= TORCH_AT_MODULE_LEVEL, sorted(importing - TORCH_AT_MODULE_LEVEL)
    assert not TORCH_AT_MODULE_LEVEL - importing, "no longer imports torch: take it off the list"


# Batches (as lists) of mixed items, unbatched again, and shards claimed from a directory,
# through the core classes alone, in the command's process (launched as its console script
# launches it); then whether torch was loaded.
CORE_STAGES = """
import pathlib, sys, tempfile
import wdspipes_command  # the command's process, where importing wdspipes loads no torch
from wdspipes.read.directory import ShardClaimer
from wdspipes.samples.batch import Batcher, Unbatcher
from wdspipes.samples.mix import Interleaver, RandomInterleaver

letters = RandomInterleaver(["a", "b"], ["c"], seed=1, longest=True)
mixed = Interleaver([1, 2, 3], letters, longest=True)
rows = list(Unbatcher(Batcher(mixed, 2, collation_fn=None)))
queue = pathlib.Path(tempfile.mkdtemp())
(queue / "a.tar").write_bytes(b"")
claimed = list(ShardClaimer([str(queue)], pattern="*.tar", mode="keep", poll=None))
print(len(rows), len(claimed), "torch" in sys.modules)
"""


@pytest.mark.slow
def test_the_core_classes_of_batching_mixing_and_claiming_run_without_torch() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CORE_STAGES], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["6", "1", "False"]

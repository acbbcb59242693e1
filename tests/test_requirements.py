"""The pinned requirements that ``make`` installs (requirements/*.txt): each pin written once,
the demo's set-up (requirements/demo.txt) holding every runtime dependency and every package
the demo's code imports, the test set-up (requirements/dev.txt) holding the demo's, and the
Makefile's stamps rebuilt when any file they install changes."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from package_graph import PACKAGE, imports_of, package_modules
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = PACKAGE.parent
REQUIREMENTS = ROOT / "requirements"


def lines_of(path: Path) -> Iterator[str]:
    """The lines of a requirements file that say something, comments cut off."""
    for line in path.read_text().splitlines():
        line = re.sub(r"(^|\s)#.*", "", line).strip()
        if line:
            yield line


def includes(path: Path) -> list[Path]:
    """The files ``path`` includes with ``-r``, directly."""
    return [
        path.parent / line.split(None, 1)[1] for line in lines_of(path) if line.startswith("-r ")
    ]


def own_pins(path: Path) -> dict[str, Requirement]:
    """The requirements written in ``path`` itself, by normalized name."""
    found = {}
    for line in lines_of(path):
        if not line.startswith("-"):
            requirement = Requirement(line)
            found[canonicalize_name(requirement.name)] = requirement
    return found


def files_of(path: Path) -> list[Path]:
    """``path`` and every file it includes, directly or through others."""
    found = [path]
    for included in includes(path):
        found += [file for file in files_of(included) if file not in found]
    return found


def pins(path: Path) -> dict[str, str]:
    """What installing ``path`` pins: normalized name -> version."""
    found = {}
    for file in files_of(path):
        for name, requirement in own_pins(file).items():
            (specifier,) = requirement.specifier
            found[name] = specifier.version
    return found


def pyproject() -> dict[str, list[Requirement]]:
    """pyproject.toml's requirements: ``"dependencies"`` and each extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = {"dependencies": project["dependencies"], **project["optional-dependencies"]}
    return {group: [Requirement(text) for text in texts] for group, texts in groups.items()}


def environments() -> list[Path]:
    """The files ``make`` installs, each into an environment of its own: those no other file
    includes (requirements/dev.txt, requirements/torchdata-0.11.txt)."""
    files = sorted(REQUIREMENTS.glob("*.txt"))
    included = {other.resolve() for file in files for other in includes(file)}
    return [file for file in files if file.resolve() not in included]


def test_every_requirement_is_an_exact_pin_written_once() -> None:
    """Once in each environment, and a package pinned in both environments in a file both
    include; but torchdata, the one pin the environments differ in, on purpose."""
    assert [file.name for file in environments()] == ["dev.txt", "torchdata-0.11.txt"]
    where: dict[str, set[str]] = {}
    for environment in environments():
        written: dict[str, list[str]] = {}
        for file in files_of(environment):
            assert file.is_file(), f"{environment.name} includes {file.name}, which is missing"
            for name, requirement in own_pins(file).items():
                assert [spec.operator for spec in requirement.specifier] == ["=="], (file, name)
                written.setdefault(name, []).append(file.name)
                where.setdefault(name, set()).add(file.name)
        assert {"torch", "torchdata", "pytest"} <= set(written)
        twice = {name: files for name, files in written.items() if len(files) > 1}
        assert not twice, f"{environment.name}: pinned more than once (they can drift): {twice}"
    apart = {name: sorted(files) for name, files in where.items() if len(files) > 1}
    assert apart == {"torchdata": ["demo.txt", "torchdata-0.11.txt"]}


def test_the_test_set_up_installs_the_demos_and_the_demo_no_test_tools() -> None:
    demo, dev = pins(REQUIREMENTS / "demo.txt"), pins(REQUIREMENTS / "dev.txt")
    assert demo.items() <= dev.items()
    assert pins(REQUIREMENTS / "common.txt").items() <= dev.items()
    assert pins(REQUIREMENTS / "base.txt").items() <= pins(REQUIREMENTS / "common.txt").items()
    assert demo["torch"] == "2.13.0"  # unpinned, torch pulls several GB of CUDA packages
    tools = {"pytest", "ruff", "mypy", "mkdocs", "ray", "matplotlib", "webdataset", "moto"}
    assert not tools & set(demo), "the demo installs test or documentation tools"


def test_the_demo_pins_every_runtime_dependency_within_pyprojects_ranges() -> None:
    """torchdata too, which the demo's loader imports by name (``wdspipes.loaders``), within
    the ``dataloader2`` extra: the demo reads through DataLoader2."""
    demo = pins(REQUIREMENTS / "demo.txt")
    groups = pyproject()
    for requirement in [*groups["dependencies"], *groups["dataloader2"]]:
        name = canonicalize_name(requirement.name)
        assert name in demo, f"requirements/demo.txt does not pin {requirement.name}"
        assert requirement.specifier.contains(demo[name]), (requirement, demo[name])


def test_every_pin_is_within_pyprojects_ranges() -> None:
    checked = 0
    for file in sorted(REQUIREMENTS.glob("*.txt")):
        pinned = pins(file)
        for group, requirements in pyproject().items():
            if (file.name, group) == ("torchdata-0.11.txt", "dataloader2"):
                continue  # torchdata 0.11, which has no DataLoader2, on purpose
            for requirement in requirements:
                version = pinned.get(canonicalize_name(requirement.name))
                if version is not None:
                    assert requirement.specifier.contains(version), (file.name, requirement)
                    checked += 1
    assert checked > 20


# What the demo's code imports, read from its source.


def third_party_imports(path: Path, *, in_functions: bool) -> set[str]:
    """The top-level names of the modules outside the standard library and wdspipes that
    ``path`` imports as it loads, and inside its functions if ``in_functions``; leaving out
    imports for type checkers only and those in a ``try`` that catches ImportError (optional:
    the code runs without them)."""
    names = set()
    for node in _imports(ast.parse(path.read_text()), in_functions):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {name for name in names if name != "wdspipes" and name not in sys.stdlib_module_names}


def _imports(node: ast.AST, in_functions: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements under ``node`` (statements only: no import is an expression)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
        return
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not in_functions:
        return
    children: list[ast.AST] = list(ast.iter_child_nodes(node))
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
        children = list(node.orelse)
    elif isinstance(node, ast.Try) and any(map(_catches_import_error, node.handlers)):
        children = [*node.handlers, *node.orelse, *node.finalbody]
    for child in children:
        if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
            yield from _imports(child, in_functions)


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    caught = set(re.findall(r"\w+", ast.unparse(handler.type))) if handler.type else set()
    return bool(caught & {"ImportError", "ModuleNotFoundError"})


SOURCE = """
import numpy
from PIL import Image
from typing import TYPE_CHECKING
from wdspipes.errors import WdsError
if TYPE_CHECKING:
    import fsspec
try:
    import zstandard
except ImportError:
    zstandard = None
def later():
    import ray
"""


@pytest.mark.parametrize(
    ("in_functions", "expected"),
    [(False, {"numpy", "PIL"}), (True, {"numpy", "PIL", "ray"})],
)
def test_the_imports_read_are_those_that_run(
    tmp_path: Path, in_functions: bool, expected: set[str]
) -> None:
    path = tmp_path / "module.py"
    path.write_text(SOURCE)
    assert third_party_imports(path, in_functions=in_functions) == expected


def demo_modules() -> dict[str, set[str]]:
    """Each wdspipes module that ``python -m wdspipes.demo`` loads, with the packages outside
    wdspipes it imports: the demo's own modules and its command (``wdspipes.cli.demo``),
    functions included, and every module they import as it loads, with its packages."""
    modules = package_modules()
    own = {name for name in modules if name.startswith("wdspipes.demo")} | {"wdspipes.cli.demo"}
    found: dict[str, set[str]] = {}
    waiting = sorted(own)
    while waiting:
        name = waiting.pop()
        if name in found or name not in modules:
            continue
        whole = name in own
        found[name] = third_party_imports(modules[name], in_functions=whole)
        parts = name.split(".")
        waiting += [".".join(parts[:end]) for end in range(1, len(parts))]  # its packages
        waiting += sorted(imports_of(modules[name], in_functions=whole))
    return found


def test_every_package_the_demo_imports_is_pinned_by_the_demos_requirements() -> None:
    imported = demo_modules()
    assert {"wdspipes", "wdspipes.cli", "wdspipes.pipeline", "wdspipes.demo.run"} <= set(imported)
    distributions = packages_distributions()
    demo = pins(REQUIREMENTS / "demo.txt")
    runtime = {canonicalize_name(r.name) for r in pyproject()["dependencies"]}
    wanted = set()
    for module, names in sorted(imported.items()):
        for name in sorted(names):
            (distribution,) = {canonicalize_name(d) for d in distributions.get(name, [name])}
            wanted.add(distribution)
            where = f"{module} imports {name}, of {distribution}"
            assert distribution in demo, f"{where}: not in requirements/demo.txt"
            assert distribution in runtime, f"{where}: not in pyproject's dependencies"
    assert {"torch", "pillow", "numpy", "click", "tqdm"} <= wanted


# The Makefile: each set-up's stamp is rebuilt when a file it installs changes.


def stamp_rule(stamp: str) -> tuple[set[str], str]:
    """The prerequisites and the recipe of the Makefile's rule for ``$(VENV)/<stamp>``."""
    makefile = (ROOT / "Makefile").read_text()
    match = re.search(
        rf"^\$\(VENV\)/{re.escape(stamp)}:([^\n|]*)[^\n]*\n((?:\t[^\n]*\n)+)", makefile, re.M
    )
    assert match, f"no rule for $(VENV)/{stamp} in the Makefile"
    return set(match.group(1).split()), match.group(2)


@pytest.mark.parametrize(
    ("stamp", "installs"), [(".demo-installed", "demo.txt"), (".installed", "dev.txt")]
)
def test_a_set_up_is_redone_when_a_file_it_installs_changes(stamp: str, installs: str) -> None:
    prerequisites, recipe = stamp_rule(stamp)
    assert f"-r requirements/{installs}" in recipe
    files = {f"requirements/{file.name}" for file in files_of(REQUIREMENTS / installs)}
    assert files | {"pyproject.toml"} <= prerequisites


def test_the_demo_runs_after_the_demos_set_up_only() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo: setup-demo$", makefile, re.M)
    assert re.search(r"^setup-demo: \$\(VENV\)/\.demo-installed$", makefile, re.M)
    _, recipe = stamp_rule(".installed")
    assert re.search(r"touch .*\$\(VENV\)/\.demo-installed", recipe)  # then make demo adds none

"""The import graph of the package, read from its source: which wdspipes modules each module
imports, at its top or inside functions (imports for type checkers only left out)."""

from __future__ import annotations

import ast
from pathlib import Path

import wdspipes

PACKAGE = Path(wdspipes.__file__).parent


def imports_of(path: Path, *, in_functions: bool = True, typing: bool = False) -> set[str]:
    """The wdspipes modules a module imports: at its top, and inside functions unless
    ``in_functions`` is False (those that run when the module is imported, then); those for
    type checkers only if ``typing``."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If)
        and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for inner in ast.walk(node)
    }
    in_function = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for inner in ast.walk(node)
    }
    left_out = (set() if typing else typing_only) | (set() if in_functions else in_function)
    found = set()
    for node in ast.walk(tree):
        if id(node) in left_out:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("wdspipes"):
            modules = [f"{node.module}.{alias.name}" for alias in node.names]
            found |= {m for m in modules if module_path(m) is not None} or {node.module}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("wdspipes")}
    return found


def module_path(module: str) -> Path | None:
    base = PACKAGE.parent.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def package_modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules

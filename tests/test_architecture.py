"""The layer rules of `docs/architecture.md` ("Layers"), checked on the package's import graph.

The graph is read from the source with `ast`: every `import` of every module of `registry/` and
`minimind/`, at module level, inside functions (lazy imports) and under `TYPE_CHECKING` alike, so
that a dependency cannot hide in a function body. The layers are read from the map's table, so
the map and the code cannot drift apart: a module the table does not place fails here too.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("registry", "minimind")
ARCHITECTURE = REPO / "docs" / "architecture.md"


@dataclass(frozen=True)
class Import:
    """One import statement's target: a module of the packages, or the top-level name of
    another distribution (`torch`, `mlflow`)."""

    target: str
    line: int
    at_module_level: bool  # runs when the module is imported (not in a function or TYPE_CHECKING)


def package_modules() -> dict[str, Path]:
    """Every module of the packages by dotted name (a package by its own name)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


MODULES = package_modules()


def _owner(name: str) -> str | None:
    """The module of the packages that `name` (a module, or a name inside one) lives in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _runs_on_import(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether the statement `node` runs when its module is imported: not inside a function
    and not under `if TYPE_CHECKING:`."""
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return False
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return False
    return True


def imports_of(module: str) -> Iterator[Import]:
    """The imports of `module`, relative ones resolved, `from package import submodule` read as
    the submodule."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [f"{base}.{alias.name}" for alias in node.names]
            names = [name if name in MODULES else base for name in names]
        else:
            continue
        at_module_level = _runs_on_import(node, parents)
        for name in names:
            target = _owner(name) or name.split(".")[0]
            if target != module:
                yield Import(target, node.lineno, at_module_level)


GRAPH = {module: list(imports_of(module)) for module in MODULES}


def internal_edges(module: str) -> set[str]:
    return {i.target for i in GRAPH[module] if i.target in MODULES}


def layer_table() -> list[tuple[str, list[str]]]:
    """The rows of the map's layer table: (layer, the modules its modules cell names), top layer
    first. A folder names a package and every module in it (`minimind/spec/` ->
    `minimind.spec.`), a file one module (`minimind/record.py` -> `minimind.record`,
    `minimind/__init__.py` -> `minimind`)."""
    text = ARCHITECTURE.read_text()
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] in ("layer", "") or set(cells[0]) <= {"-"}:
            continue
        paths = re.findall(r"`([^`]+)`", cells[1])
        modules = [
            ".".join(Path(p.removesuffix(".py").removesuffix("/__init__")).parts)
            + ("." if p.endswith("/") else "")
            for p in paths
        ]
        rows.append((cells[0], modules))
    return rows


LAYERS = layer_table()


def layer_of(module: str) -> int:
    """The index in `LAYERS` of the row that names `module`, or the package it is in (the most
    specific one)."""
    best: tuple[int, int] | None = None
    for index, (_, names) in enumerate(LAYERS):
        for name in names:
            placed = f"{module}.".startswith(name) if name.endswith(".") else module == name
            if placed and (best is None or len(name) > best[1]):
                best = (index, len(name))
    if best is None:
        raise LookupError(f"{module} is in no layer of {ARCHITECTURE.name}")
    return best[0]


def cycles() -> list[list[str]]:
    """The import cycles of the graph: Tarjan's strongly connected components of more than one
    module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(internal_edges(module)):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(MODULES):
        if module not in index:
            visit(module)
    return found


def reachable(start: str, *, module_level_only: bool = False) -> set[str]:
    """Every module of the packages and top-level distribution `start` imports, directly or
    through others; with `module_level_only`, only the imports that run when it is imported."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        module = todo.pop()
        for imp in GRAPH[module]:
            if module_level_only and not imp.at_module_level:
                continue
            if imp.target not in seen:
                seen.add(imp.target)
                if imp.target in MODULES:
                    todo.append(imp.target)
    return seen


def test_the_graph_sees_lazy_and_relative_imports() -> None:
    """The walk reads what the rules rely on: an import inside a function body, one under
    `TYPE_CHECKING`, and the third-party ones."""
    lazy = [i for i in GRAPH["minimind.record"] if i.target == "torch"]
    assert lazy and not any(i.at_module_level for i in lazy)  # `device_tags` imports torch
    assert "minimind.model.config" in internal_edges("minimind.record")  # under TYPE_CHECKING
    assert "torch.distributed" not in MODULES and "torch" in reachable(
        "minimind.training.distributed"
    )
    assert "registry.core" in internal_edges("registry.declarations.moe")


def test_every_path_the_map_names_exists() -> None:
    """A row names real folders and files, so a move that forgets the map fails here."""
    text = ARCHITECTURE.read_text().split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    named = {
        path
        for line in text.splitlines()
        if line.startswith("| ") and not line.startswith("| layer")
        for path in re.findall(r"`([^`]+)`", line.split("|")[2])
    }
    assert named, "the layer table names no paths"
    assert not [path for path in sorted(named) if not (REPO / path).exists()]


def test_the_package_root_holds_only_entry_points_and_the_run_record() -> None:
    """Every other module lives in its layer's package; `record.py` stays at the root because
    it is a layer of one module that the spec, the run, tracking and compare all read."""
    root = {m for m, path in MODULES.items() if path.parent == REPO / "minimind"}
    assert root == {"minimind", "minimind.__main__", "minimind.cli", "minimind.record"}


def test_every_module_is_in_one_layer_of_the_map() -> None:
    assert [name for name, _ in LAYERS][:1] == ["components"]
    unplaced = []
    for module in MODULES:
        try:
            layer_of(module)
        except LookupError:
            unplaced.append(module)
    assert not unplaced, f"modules {ARCHITECTURE.name} does not place: {unplaced}"


def test_each_layer_imports_only_from_itself_and_the_layers_above() -> None:
    upward = [
        f"{module}:{imp.line} ({LAYERS[layer_of(module)][0]}) imports {imp.target} "
        f"({LAYERS[layer_of(imp.target)][0]})"
        for module in MODULES
        for imp in GRAPH[module]
        if imp.target in MODULES and layer_of(imp.target) > layer_of(module)
    ]
    assert not upward, "\n".join(upward)


def test_no_import_cycles() -> None:
    found = cycles()
    assert not found, "import cycles (lazy imports included):\n" + "\n".join(
        " <-> ".join(cycle) for cycle in found
    )


def test_the_registry_never_imports_minimind() -> None:
    """The components know nothing of the harness: any project can use them."""
    assert not [
        t
        for m in MODULES
        if m.startswith("registry")
        for t in reachable(m)
        if t.split(".")[0] == "minimind"
    ]


@pytest.mark.parametrize(
    ("importer", "forbidden", "why"),
    [
        (
            "minimind.sweep",
            "minimind.run.runner",
            "the sweep plans through plan.py and records through record.py, not the run command",
        ),
        (
            "minimind.training.distributed",
            "minimind.tracking",
            "process plumbing knows nothing of MLflow; the rank-0 tracker lives in tracking",
        ),
    ],
)
def test_a_package_never_reaches_a_module(importer: str, forbidden: str, why: str) -> None:
    reached = {
        target
        for module in MODULES
        if module == importer or module.startswith(f"{importer}.")
        for target in reachable(module)
    }
    assert not [t for t in reached if t == forbidden or t.startswith(f"{forbidden}.")], why


def test_foundations_import_nothing_of_the_package() -> None:
    leaked = {
        f"{module} imports {target}"
        for module in MODULES
        if module.startswith("minimind.foundations")
        for target in internal_edges(module)
        if not target.startswith("minimind.foundations")
    }
    assert not leaked, sorted(leaked)


def test_only_export_and_bench_import_the_hf_layer() -> None:
    """transformers is an optional extra: only `minimind export` and `minimind bench` need it."""
    allowed = ("minimind.hf", "minimind.bench", "minimind.commands.export")
    importers = {
        module
        for module in MODULES
        if not module.startswith(allowed)
        for target in internal_edges(module)
        if target.startswith("minimind.hf")
    }
    assert not importers, sorted(importers)


@pytest.mark.parametrize("library", ["pandas", "mlflow", "torch"])
def test_the_statistics_import_no_pandas_mlflow_or_torch(library: str) -> None:
    """`minimind/stats/` is numpy and scipy alone, lazily too, so that it can be audited and
    reused without the harness around it."""
    reached = {
        f"{module} reaches {library}"
        for module in MODULES
        if module.startswith("minimind.stats")
        for target in reachable(module)
        if target.split(".")[0] == library
    }
    assert not reached, sorted(reached)


@pytest.mark.parametrize("start", ["minimind.cli", "minimind.spec", "registry"])
def test_validating_a_spec_imports_no_torch(start: str) -> None:
    """A spec is validated, and its errors answered, before torch is imported (seconds): the
    command line, the spec layer and the registry's declarations import torch only inside the
    functions that need it."""
    assert "torch" not in reachable(start, module_level_only=True)


def test_help_does_not_import_torch() -> None:
    # `minimind --help` must answer at once; importing torch alone takes seconds. Run, because
    # the registry imports components by name.
    code = (
        "import sys, contextlib, io\n"
        "from minimind.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)

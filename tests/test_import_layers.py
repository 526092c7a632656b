"""The direction of imports between nnix packages (README, architecture section).

The graph is built from the source with :mod:`ast`: one node per package ``nnix.X`` (a top-level
module counts as its own package), one edge per import of another package. ``if TYPE_CHECKING:``
blocks are left out everywhere. No package cycle, whether counting module-level imports only (those can
deadlock module loading) or every import (a late import inside a function still ties two packages together);
every import goes down :data:`LAYERS` or stays within its layer; the leaf rule counts every import.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import nnix

ROOT = Path(nnix.__file__).resolve().parent
LEAVES = ("nnix.errors", "nnix.model")

# The direction of imports (README, architecture section), bottom to top: a package imports only from its own
# layer or the layers below. ``nnix`` is the package's root (it resolves ``nnix.Experiment`` lazily, from the top).
LAYERS: list[tuple[str, ...]] = [
    ("nnix.errors", "nnix.model", "nnix.limits", "nnix.version", "nnix.paths", "nnix.lazy"),
    ("nnix.documents", "nnix.space", "nnix.gpu"),
    ("nnix.registry",),
    ("nnix.config",),
    ("nnix.tuners", "nnix.assessors"),
    ("nnix.store",),
    ("nnix.trial",),
    ("nnix.agent",),
    ("nnix.services",),
    ("nnix.core",),
    ("nnix.query",),  # the read side: reads the fold and the store; the manager gets its reader handed in
    ("nnix.home",),
    ("nnix.api",),
    ("nnix.client",),
    ("nnix.archive",),
    ("nnix.host",),
    ("nnix.experiment", "nnix.compat", "nnix"),
    ("nnix.cli",),
    ("nnix.testing",),
]

def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _imports(path: Path) -> Iterator[tuple[str, bool]]:
    """Yield ``(imported nnix module, at module level)`` for one source file."""
    module = _module_name(path)
    is_package = path.name == "__init__.py"

    def visit(node: ast.AST, top: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for orelse in child.orelse:
                    yield from visit(orelse, top)
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from visit(child, False)
                continue
            if isinstance(child, ast.Import):
                yield from ((alias.name, top) for alias in child.names if alias.name.split(".")[0] == "nnix")
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = module.split(".") if is_package else module.split(".")[:-1]
                    base = base[: len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                if target.split(".")[0] == "nnix":
                    if target == "nnix":  # ``from nnix import errors`` imports the submodule
                        for alias in child.names:
                            is_module = (ROOT / alias.name).is_dir() or (ROOT / f"{alias.name}.py").is_file()
                            yield (f"nnix.{alias.name}" if is_module else "nnix"), top
                    else:
                        yield target, top
            yield from visit(child, top)

    yield from visit(ast.parse(path.read_text(encoding="utf-8")), True)


@functools.cache
def _all_imports() -> tuple[tuple[str, str, bool], ...]:
    """``(source package, imported nnix module, at module level)`` for every source file, parsed once per session."""
    out: list[tuple[str, str, bool]] = []
    for path in sorted(ROOT.rglob("*.py")):
        if "_shim" in path.parts:  # the ``import nni`` shim ships as its own top-level package
            continue
        source = package_of(_module_name(path))
        out.extend((source, target, top) for target, top in _imports(path))
    return tuple(out)


def package_graph(module_level_only: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for source, target, top in _all_imports():
        if module_level_only and not top:
            continue
        dest = package_of(target)
        if dest != source:
            graph.setdefault(source, set()).add(dest)
    return graph


def elementary_cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Every simple cycle, once, rotated to start at its smallest node (the graph is small)."""
    found: set[tuple[str, ...]] = set()

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                found.add(tuple(path))
            elif nxt > start and nxt not in path:
                walk(start, nxt, [*path, nxt])

    for start in sorted(graph):
        walk(start, start, [start])
    return found


def test_graph_sees_known_edges() -> None:
    # the parser must see real imports, or the checks below pass vacuously
    graph = package_graph(module_level_only=True)
    assert "nnix.model" in graph["nnix.core"]
    assert "nnix.model" in graph["nnix.store"]
    assert "nnix.errors" in graph["nnix.config"]


def test_leaves_import_nothing_above_them() -> None:
    graph = package_graph(module_level_only=False)
    for leaf in LEAVES:
        above = graph.get(leaf, set()) - {"nnix.errors"}
        assert not above, f"{leaf} must stay a leaf (imports only nnix.errors) but imports {sorted(above)}"


def test_no_package_cycle() -> None:
    cycles = elementary_cycles(package_graph(module_level_only=True))
    assert not cycles, f"package import cycles (see README, architecture): {sorted(cycles)}"


def test_no_package_cycle_through_late_imports_either() -> None:
    cycles = elementary_cycles(package_graph(module_level_only=False))
    assert not cycles, f"package import cycles through imports inside functions: {sorted(cycles)}"


def test_every_import_goes_down_the_layers() -> None:
    rank = {package: i for i, layer in enumerate(LAYERS) for package in layer}
    graph = package_graph(module_level_only=False)
    unplaced = sorted(p for p in set(graph) | {d for ds in graph.values() for d in ds} if p not in rank)
    assert not unplaced, f"packages without a layer (add them to LAYERS and the README): {unplaced}"
    upward = sorted(f"{src} -> {dst}" for src, dsts in graph.items() for dst in dsts if rank[dst] > rank[src])
    assert not upward, f"imports against the direction (README, architecture): {upward}"


def test_the_direction_check_sees_an_upward_import() -> None:
    # the check above must be able to fail: the CLI imports the manager host, which sits below it
    rank = {package: i for i, layer in enumerate(LAYERS) for package in layer}
    assert "nnix.host" in package_graph(module_level_only=False)["nnix.cli"]
    assert rank["nnix.host"] < rank["nnix.cli"]


# The CLI reads the registry of experiments and their stores only through nnix.client (README, architecture): none of
# its modules opens the registry, a store or the fold itself
CLI_READS_THROUGH_CLIENT = ("nnix.home", "nnix.store", "nnix.core")


def test_the_cli_reads_experiments_only_through_the_client() -> None:
    direct = sorted({f"nnix.cli -> {target}" for source, target, _ in _all_imports()
                     if source == "nnix.cli" and package_of(target) in CLI_READS_THROUGH_CLIENT})
    assert not direct, f"the CLI imports these directly (use nnix.client): {direct}"
    assert "nnix.client" in package_graph(module_level_only=False)["nnix.cli"]  # (the check sees the CLI's imports)


# The read side (nnix.query) is read only through its package's interface (README, architecture): the snapshot codec,
# its lazy trial table, the index columns and the summaries are its modules, imported by no module outside it
def test_the_read_side_is_read_only_through_its_interface() -> None:
    inside = sorted({f"{source} -> {target}" for source, target, _ in _all_imports()
                     if source != "nnix.query" and target.startswith("nnix.query.")})
    assert not inside, f"these import the read side's internals (use nnix.query's interface): {inside}"
    readers = {source for source, target, _ in _all_imports() if target == "nnix.query"}
    assert {"nnix.api", "nnix.home", "nnix.host"} <= readers  # (the check sees who reads through it)


# The words services, agents and the manager share about trials (README, architecture) are leaf data in nnix.model.runs:
# no module names them through the process runner (nnix.agent.runner) any more
SHARED_WORDS = frozenset({"TrialSpec", "Started", "Metrics", "Exited", "Output", "Requeued", "RunnerEvent"})


def test_the_words_services_and_the_manager_share_come_from_the_model() -> None:
    through_runner = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "nnix.agent.runner":
                through_runner += [f"{_module_name(path)}: {a.name}" for a in node.names if a.name in SHARED_WORDS]
    assert not through_runner, f"import these from nnix.model.runs: {through_runner}"
    import nnix.model.runs as runs

    assert set(runs.__all__) >= SHARED_WORDS

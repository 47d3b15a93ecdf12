"""The package's stages import only the stages before them, and no module imports itself back.

Data flows one way (STYLE.md): source -> sites, trace -> events, events + sites -> origins ->
findings -> graph -> renderings, with the facade (`tracer.api`), the instrumented run, the plugins
and the CLI on top. Every import counts, those inside functions too: a lazy import from a later
stage is still a dependency on it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[2] / "tracer"

# Each stage may import the stages listed before it (and itself), never one after it.
STAGES = (
    "version",
    "errors",
    "progress",
    "input_files",
    "output_files",
    "model",
    "formatting",
    "static",
    "load",
    "join",
    "explain",
    "graph",
    "render",
    "api",
    "engines",  # where a directory's rank jobs run (process pool, Ray): below the facade that uses them
    "ranks",  # the facade for a directory of per-rank traces
    "instrument",
    "plugins",
    "cli",
    "__main__",
    "__init__",  # the package itself: `tracer.profile` hands on to `tracer.instrument`
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _stage(module: str) -> str:
    """`tracer.join.replay.align` -> "join"; `tracer` -> "__init__"."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _type_only(tree: ast.Module) -> set[int]:
    """The ids of import nodes under `if TYPE_CHECKING:` (never run)."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            ids.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    return ids


def _imports(path: Path, *, type_only: bool) -> set[str]:
    """The tracer modules a file imports (`from tracer import x` names the module `tracer.x` when it is
    one); with `type_only` False, not those imported for type checking only."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    skipped = set() if type_only else _type_only(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "tracer")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "tracer":
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                is_module = (PACKAGE.parent / Path(*sub.split("."))).with_suffix(".py").exists() or (
                    PACKAGE.parent / Path(*sub.split("."))
                ).is_dir()
                found.add(sub if is_module else node.module)
    return found


def _graph(*, type_only: bool = True) -> nx.DiGraph:
    graph = nx.DiGraph()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        graph.add_node(module)
        for imported in _imports(path, type_only=type_only):
            if imported != module:
                graph.add_edge(module, imported)
    return graph


def test_every_stage_is_placed() -> None:
    stages = {_stage(module) for module in _graph()}
    assert stages <= set(STAGES), f"place these in STAGES: {sorted(stages - set(STAGES))}"


def test_no_stage_imports_a_stage_after_it() -> None:
    order = {stage: rank for rank, stage in enumerate(STAGES)}
    upward = sorted(
        f"{source} -> {target}"
        for source, target in _graph().edges
        if order[_stage(target)] > order[_stage(source)] and _stage(target) != "__init__"
    )
    assert upward == []


def test_no_import_cycle() -> None:
    """Between modules, as run: imports for type checking only do not count, nor a package's
    `__init__` importing its own modules and they it."""
    graph = _graph(type_only=False)
    package_edges = [(a, b) for a, b in graph.edges if b.startswith(a + ".") or a.startswith(b + ".")]
    graph.remove_edges_from(package_edges)
    cycles = sorted(" -> ".join(cycle) for cycle in nx.simple_cycles(graph))
    assert cycles == []

"""The arrows of the code point one way, and the UI sees each core package only by its face.

Read from the source (every import, at module level, inside functions and under
TYPE_CHECKING alike), so a circle hidden in a function-level import still counts:
- no import circle among core/, tui/ and themes/ modules;
- tui/ imports a core package only through its `__init__` (core.hub, never core.hub.cli),
  or one of core's top-level modules (core.runtime, core.events, core.config, ...), or a
  module of core.wire (a package of faces: each module one package's plain data);
- nobody imports another module's private (`_name`) names.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Edge:
    source: str  # importing module
    target: str  # imported module
    names: tuple[str, ...]  # names taken from it (empty for `import x`)
    line: int


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in ("core", "tui", "themes"):
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _edges() -> list[Edge]:
    edges: list[Edge] = []
    for name, path in MODULES.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in MODULES:
                        edges.append(Edge(name, alias.name, (), node.lineno))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                plain: list[str] = []
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in MODULES:  # `from pkg import module` depends on the module
                        edges.append(Edge(name, sub, (), node.lineno))
                    else:
                        plain.append(alias.name)
                if plain and target in MODULES and target != name:
                    edges.append(Edge(name, target, tuple(plain), node.lineno))
    return edges


EDGES = _edges()


def _cycles() -> list[list[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for e in EDGES:
        graph[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_circles() -> None:
    assert _cycles() == []


def _core_package(module: str) -> str | None:
    """The core package a module belongs to (core.hub for core.hub.cli), None at top level."""
    parts = module.split(".")
    if len(parts) >= 2 and (ROOT / "core" / parts[1] / "__init__.py").exists():
        return ".".join(parts[:2])
    return None


def test_the_ui_uses_only_the_faces_of_core_packages() -> None:
    reaching_in = [
        f"{e.source}:{e.line} imports {e.target}"
        for e in EDGES
        if e.source.startswith("tui")
        and e.target.startswith("core.")
        and (package := _core_package(e.target)) is not None
        and e.target != package
        and package != "core.wire"  # each of its modules is a face (tests/unit/test_thin_client.py)
    ]
    assert reaching_in == []


def test_no_private_names_cross_a_module() -> None:
    private = [
        f"{e.source}:{e.line} takes {name} from {e.target}"
        for e in EDGES
        for name in e.names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert private == []


def test_the_rules_see_a_real_circle_and_a_reach_in() -> None:
    """The checks above would fail on the shapes they guard against."""
    assert any(e.source == "tui.app" and e.target.startswith("tui.screens") for e in EDGES)
    assert _core_package("core.hub.cli") == "core.hub"
    assert _core_package("core.events") is None


def test_the_remote_backend_never_reaches_up_into_the_server() -> None:
    """core.remote and core.server share wire helpers from core.openai_wire, below both."""
    assert [f"{e.source}:{e.line}" for e in EDGES
            if e.source.startswith("core.remote") and e.target.startswith("core.server")] == []


# Rooms a room must never import: the arrows point down (issue 36). Model-file facts live
# in core.model_files, below the hub and the engines alike; documents and images refuse
# files with one error type from core.attach_errors, below both.
_NEVER_IMPORTS: dict[str, tuple[str, ...]] = {
    "core.engines": ("core.hub", "core.vision", "core.docs", "core.workers", "core.runtime",
                     "core.server", "core.store", "core.memory", "core.tools", "core.remote",
                     "core.cluster", "core.service", "core.chat_context", "tui"),
    "core.hub": ("core.engines", "core.vision", "core.docs", "core.runtime", "core.server",
                 "tui"),
    "core.vision": ("core.docs",),
    "core.docs": ("core.vision",),
}
# The bottom rooms: what each may import from llmdeck at all.
_ONLY_IMPORTS: dict[str, tuple[str, ...]] = {
    "core.model_files": ("core.model_files", "core.json_text"),
    "core.attach_errors": ("core.events",),
}


def _within(module: str, room: str) -> bool:
    return module == room or module.startswith(room + ".")


def _arrows_up(edges: list[Edge]) -> list[str]:
    """Every import that runs against the rules above, as 'source:line imports target'."""
    bad = []
    for e in edges:
        for room, banned in _NEVER_IMPORTS.items():
            if _within(e.source, room) and any(_within(e.target, b) for b in banned):
                bad.append(f"{e.source}:{e.line} imports {e.target}")
        for room, allowed in _ONLY_IMPORTS.items():
            if _within(e.source, room) and not any(_within(e.target, a) for a in allowed):
                bad.append(f"{e.source}:{e.line} imports {e.target}")
    return bad


def test_no_arrow_runs_back_up() -> None:
    """Engines never reach into the hub, vision or documents (nor the hub into engines);
    vision and documents never into each other; the bottom rooms import only below."""
    assert _arrows_up(EDGES) == []


def test_the_arrow_rule_sees_each_arrow_it_forbids() -> None:
    """The three arrows issue 36 found, and a bottom room reaching up, are each caught."""
    old = [Edge("core.engines.llama_vision", "core.hub.filenames", ("pair_mmproj",), 1),
           Edge("core.engines.select", "core.vision.vlm", ("is_vlm_dir",), 2),
           Edge("core.vision.images", "core.docs.errors", ("DocError",), 3),
           Edge("core.hub.validate", "core.engines.select", ("json_object",), 4),
           Edge("core.model_files.names", "core.paths", (), 5)]
    assert len(_arrows_up(old)) == len(old)
    assert {"core.model_files", "core.attach_errors"} <= set(MODULES)


def test_the_per_token_tail_lives_once() -> None:
    """Both engines end a reply through core.engines.reply_tail; neither matches stop
    strings itself (each did, issue 36)."""
    for engine in ("core.engines.mlx", "core.engines.llamacpp"):  # mlx: the package's rooms
        targets = {e.target for e in EDGES if _within(e.source, engine)}
        assert "core.engines.reply_tail" in targets
        assert "core.parsing.stops" not in targets

"""The client is thin (issue 47, item 4): tui/ imports only core's faces and wire types.

Every `import core...` / `from core... import` in every .py file under tui/ (at the top,
inside functions, under TYPE_CHECKING alike) must name one of:

- core.runtime   the runtime face (the one object the UI holds, and its names)
- core.service   the service client (start or connect, its errors, its status line)
- core.events    the events a reply streams
- core.wire...   the plain data that crosses the socket (dataclasses, errors as values,
                 the pure helpers that read them): any module of the package
- core.config    the settings: plain dataclasses that cross the socket (the codec lists
                 Settings, Sampling, McpServerConfig...) read from the one TOML file the
                 client starts from; a leaf (checked below: it imports only core.paths,
                 the settings rules, core.engines.base's plain types and core.events)
- core.paths     where this home's files are (the client finds the service's socket and
                 the config file there); a leaf (platformdirs only)
- core.commands  only from tui/cli.py, the entry: its table reaches the subcommands
                 (doctor, models, cluster, workers, mcp) and the home lock by importlib

What the UI still imports beyond that would be listed in DEBT, file by file with the
reason; the list is empty now (the presets, the bundled model, the hub's calls and the
clusters' state are runtime face calls the service answers), and the test fails on a new
import outside the set and on a DEBT entry no longer needed. core.wire itself must stay low: its modules import the standard library
and core.wire, core.events, core.attach_errors, core.model_files.names and core.model_ids
(leaves: naming rules), nothing else.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FACES = frozenset({"core.runtime", "core.service", "core.events", "core.config", "core.paths"})
ENTRY_ONLY = {"core.commands": "tui/cli.py"}

# file -> {module: why it is still there}. Work the client still does itself; each moves
# behind the runtime face (a face call the service answers), then leaves this list.
DEBT: dict[str, dict[str, str]] = {}  # empty since the last four moved (issue 47, item 4)
# The packages that do the work: importing every tui module loads none of them.
WORKING = ("core.hub", "core.presets", "core.bundled", "core.cluster", "core.workers",
           "core.tools", "core.store", "core.docs", "core.memory", "core.vision",
           "core.engines.select", "core.runtime.face", "core.runtime.models",
           "core.runtime.compare", "core.runtime.turns", "core.model_catalog")

WIRE_MAY_IMPORT = ("core.wire", "core.events", "core.attach_errors", "core.model_files.names",
                   "core.model_ids")
LEAF_MAY_IMPORT = ("core.paths", "core.settings_rules", "core.wire", "core.engines.base",
                   "core.events", "core.keep_alive")


def _core_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import of a core module in `path`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "core"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "core":  # `from core import paths`: the module is core.paths
                found += [(node.lineno, f"core.{a.name}") for a in node.names]
            elif node.module.split(".")[0] == "core":
                found.append((node.lineno, node.module))
    return found


def _within(module: str, roots: tuple[str, ...] | frozenset[str]) -> bool:
    return any(module == r or module.startswith(r + ".") for r in roots)


def _allowed(rel: str, module: str) -> bool:
    if module in FACES or _within(module, ("core.wire",)):
        return True
    return ENTRY_ONLY.get(module) == rel


def test_tui_imports_only_cores_faces_and_wire_types() -> None:
    wrong, used = [], set()
    for path in sorted((ROOT / "tui").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for line, module in _core_imports(path):
            if _allowed(rel, module):
                continue
            if module in DEBT.get(rel, {}):
                used.add((rel, module))
                continue
            wrong.append(f"{rel}:{line} imports {module}")
    assert not wrong, ("tui/ may import only core.runtime, core.service, core.events, "
                       "core.wire, core.config, core.paths (and core.commands from cli.py); "
                       "move the type to core.wire or the call behind the runtime face:\n"
                       + "\n".join(wrong))
    stale = [f"{rel}: {module}" for rel, mods in DEBT.items() for module in mods
             if (rel, module) not in used]
    assert not stale, "no longer imported: take these out of DEBT:\n" + "\n".join(stale)


def test_the_clients_warm_up_loads_no_working_package() -> None:
    """tui.warmup imports by name, in a thread after the first frame: the client's list
    obeys the same rule as its imports (the in-process list is the service's side)."""
    from tui import warmup

    # the app's own modules it warms (Markdown's widget, tui.*) are not core's to rule on
    core = [m for m in warmup.CLIENT_MODULES if not m.startswith("tui.")]
    assert [m for m in core if not _allowed("tui/warmup.py", m)] == []


def test_core_wire_imports_nothing_above_it() -> None:
    wrong = []
    for path in sorted((ROOT / "core" / "wire").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        wrong += [f"{rel}:{line} imports {module}" for line, module in _core_imports(path)
                  if not _within(module, WIRE_MAY_IMPORT)]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), rel)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module
                     and node.level == 0 else [])
            wrong += [f"{rel}:{node.lineno} imports {name} (not the standard library)"
                      for name in names
                      if name.split(".")[0] not in (*sys.stdlib_module_names, "core", "__future__")]
    assert not wrong, "core.wire must stay below every package that fills it:\n" + "\n".join(wrong)


def test_the_faces_the_client_may_read_are_leaves() -> None:
    """core.config and core.paths load no package that does work."""
    wrong = []
    for rel in ("core/config.py", "core/paths.py"):
        for line, module in _core_imports(ROOT / rel):
            if not _within(module, LEAF_MAY_IMPORT):
                wrong.append(f"{rel}:{line} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_every_command_the_entry_names_resolves() -> None:
    import core.commands as commands

    for name in commands.COMMANDS:
        assert getattr(commands, name) is not None


def test_the_old_names_are_the_wire_types() -> None:
    """The owning packages hand out the very classes core.wire defines (one class, two
    doors), and the codec decodes a wire type to that class."""
    import core.docs
    import core.hub
    import core.memory
    import core.store
    import core.tools
    import core.vision
    import core.workers
    from core.runtime import compare
    from core.service import codec
    from core.wire import compare as wire_compare
    from core.wire import docs, hub, memory, store, tools, vision, workers

    pairs = [(core.store.Conversation, store.Conversation), (core.store.Message, store.Message),
             (core.store.StoreError, store.StoreError), (core.hub.HubError, hub.HubError),
             (core.hub.DownloadProgress, hub.DownloadProgress), (core.hub.LocalModel, hub.LocalModel),
             (core.tools.ToolStatus, tools.ToolStatus), (core.tools.RunResult, tools.RunResult),
             (core.tools.McpCallError, tools.McpCallError), (core.docs.Attachment, docs.Attachment),
             (core.memory.RolloverMarker, memory.RolloverMarker),
             (core.vision.StoredImage, vision.StoredImage), (core.workers.WorkerStatus, workers.WorkerStatus),
             (compare.CompareRefused, wire_compare.CompareRefused)]
    for old, new in pairs:
        assert old is new, old
    hit = store.SearchHit("c1", "t", None, "«x»", 1.0)
    assert codec.decode(codec.encode(hit)) == hit
    assert type(codec.decode(codec.encode(hit))) is store.SearchHit


def test_the_model_list_crosses_the_socket() -> None:
    """The picker asks the runtime for the models on disk (a face call the service
    answers); each LocalModel comes back whole, its paths still paths."""
    from pathlib import Path

    from core.service import call_args, codec
    from core.service.dispatch import RUNTIME_CALLS
    from core.wire.hub import LocalModel

    assert RUNTIME_CALLS["local_models"] is True and call_args.CALLS["local_models"] == {}
    model = LocalModel("o/r:m.gguf", "m.gguf", Path("/m/m.gguf"), "gguf", "llamacpp", 1, "hf-cache",
                       True, None, "Q4_K_M", "chat", mmproj=Path("/m/p.gguf"), model_id="m:q4_k_m")
    back = codec.decode(codec.encode([model]))
    assert back == [model] and isinstance(back[0].path, Path)



def test_every_listed_error_names_the_module_that_defines_it() -> None:
    """core.service.errors finds a raised error's tag by its class's __module__: an entry
    naming a module that only re-exports the class (core.store.errors, once StoreError
    moved to core.wire.store) would let that error leak as an unlisted exception."""
    import importlib

    from core.service.errors import ERRORS

    wrong = []
    for tag, target in ERRORS.items():
        module, _, name = target.partition(":")
        cls = getattr(importlib.import_module(module), name)
        if cls.__module__ != module:
            wrong.append(f"{tag}: {target} is defined in {cls.__module__}")
    assert wrong == []


def test_importing_the_whole_client_loads_no_working_package() -> None:
    """What the imports above promise, checked where it counts: a fresh interpreter that
    imports every module under tui/ has loaded none of the packages that do the work (a
    face name such as core.runtime's Turn, imported at run time, loads the pool)."""
    import subprocess

    code = ("import importlib, pkgutil, sys, tui\n"
            "for m in pkgutil.walk_packages(tui.__path__, 'tui.'):\n"
            "    importlib.import_module(m.name)\n"
            f"print(sorted(n for n in sys.modules if n.startswith({WORKING!r})))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_the_client_asks_the_service_for_the_work_it_did_itself() -> None:
    """The calls that replaced the client's own work are face calls the service answers,
    each with a schema at its door (the compare screen's spec_for among them)."""
    from core.runtime import RuntimeFace
    from core.service import call_args
    from core.service.dispatch import RUNTIME_CALLS

    for name in ("spec_for", "apply_preset", "save_preset", "hub_search", "hub_files",
                 "recommended_models", "delete_local_model", "local_models"):
        assert RUNTIME_CALLS[name] is True and name in call_args.CALLS, name
        assert hasattr(RuntimeFace, name), name
    assert "bundled" in call_args.CALLS["switch_model"]


def test_the_hubs_answers_cross_the_socket_whole() -> None:
    """Search rows (their time of last change a datetime), a repo's listing and the
    recommended list with its fits come back as the same wire types."""
    from datetime import UTC, datetime

    from core.service import codec
    from core.wire.hub import (
        Fit,
        Recommendation,
        RepoFileInfo,
        RepoListing,
        Runnable,
        SearchResult,
    )

    row = SearchResult("o/r", "gguf", 3, 1, datetime(2026, 1, 2, 3, 4, tzinfo=UTC), 10, "Q4_K_M",
                       "llama", "mit", False, "chat", Runnable(True, "llamacpp", 1, 2, "fits"))
    listing = RepoListing("o/r", "a" * 40, "gguf", False, None, None,
                          (RepoFileInfo("m.gguf", 5, None, "Q4_K_M", "chat", None),))
    recs = ([Recommendation("M", "f", "chat", "mit", "gguf", "o/r", "m.gguf", 5, 1)],
            [Fit("ok", 6, 100, 80)])
    for value in (row, listing, recs):
        assert codec.decode(codec.encode(value)) == value


def test_the_app_asks_no_longer_whether_it_is_the_services_client() -> None:
    """Since issue 42 the app's runtime is always the service's client (a Runtime handed
    in is wrapped, once, in the constructor): a branch on it elsewhere is dead code."""
    tree = ast.parse((ROOT / "tui" / "app.py").read_text(encoding="utf-8"))
    checks = [node.lineno for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "isinstance" and len(node.args) == 2
              and isinstance(node.args[1], ast.Name) and node.args[1].id == "ServiceRuntime"]
    assert len(checks) == 1, f"isinstance(..., ServiceRuntime) at lines {checks}"

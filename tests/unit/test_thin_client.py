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

What the UI still imports beyond that is listed in DEBT, file by file with the reason; the
test fails on a new import outside the set and on a DEBT entry no longer needed, so the
list only shrinks. core.wire itself must stay low: its modules import the standard library
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
DEBT: dict[str, dict[str, str]] = {
    "tui/app.py": {
        "core.bundled": "the client unpacks the bundled model before switch_model; the "
                        "runtime should do it when asked to load the bundled model",
    },
    "tui/model_presets.py": {
        "core.presets": "the client reads and writes the per-model presets file; presets "
                        "belong behind the face, as save_settings is",
    },
    "tui/screens/hub.py": {
        "core.hub": "search, listing, delete, the recommended list's fit and the "
                    "in-process download queue run in the client",
    },
    "tui/widgets/worker_pane.py": {
        "core.cluster": "F4 reads the clusters' state files itself; the runtime face "
                        "should report them with the workers",
    },
}

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

    assert [m for m in warmup.CLIENT_MODULES if not _allowed("tui/warmup.py", m)] == []


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

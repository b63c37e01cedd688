"""RuntimeFace: the calls a front end makes, with data in and out, so the engine service
can carry the same calls over its socket. The Runtime answers every one of them; the ones
that replace a reach into the parts (tools, store, backend, listeners) work in process."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

from core.config import Settings
from core.engines.base import ModelSpec
from core.runtime import ModelState, Runtime, RuntimeFace, SandboxInfo

ROOT = Path(__file__).resolve().parents[2]
# The parts of the Runtime a front end must not reach through (a socket cannot carry them).
PARTS = {"tools", "store_handle", "store_call", "store_call_nowait", "listeners", "backend",
         "pool", "models", "store_thread", "chat", "live", "model", "memory_listeners"}


def _face_members() -> set[str]:
    members = {n for n in vars(RuntimeFace) if not n.startswith("_")}
    return members | set(RuntimeFace.__annotations__)


def test_the_runtime_answers_every_call_of_the_face_and_the_face_hands_out_no_part() -> None:
    face = _face_members()
    assert {"start_turn", "watch_turn", "live_turns", "cancel_turn", "run_python",
            "model_state", "listen_model", "mcp_prompt"} <= face
    assert sorted(n for n in face if n != "settings" and not hasattr(Runtime, n)) == []
    assert face & PARTS == set()
    for name in face - {"settings"}:  # plain calls a client can forward by name
        member = inspect.getattr_static(Runtime, name)
        assert callable(member) or isinstance(member, property), name


def test_the_check_reads_the_face_from_the_source() -> None:
    """The protocol in protocol.py lists what the members above say (nothing hidden in a base)."""
    tree = ast.parse((ROOT / "core" / "runtime" / "protocol.py").read_text())
    proto = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RuntimeFace")
    listed = {n.name for n in proto.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    assert listed and listed <= _face_members()


async def test_the_calls_that_replace_reaches_into_the_parts_work_in_process() -> None:
    spec = ModelSpec(path="scripted", engine="scripted", context_size=4096,
                     options=(("reply", "ok"), ("label", "scripted-face")))
    rt = Runtime(Settings(), model_spec=spec)
    seen: list[ModelState] = []
    rt.listen_model(seen.append)
    await rt.start(preload=False)
    try:
        assert await rt.ensure_model()
        state = rt.model_state()
        assert (state.label, state.state) == ("scripted-face", "ready") and seen[-1] is state
        assert rt.model_is_remote() is False
        info = rt.sandbox_info()
        assert isinstance(info, SandboxInfo) and info.max_live >= 1 and info.running is False
        assert dataclasses.asdict(info)  # plain data: it can cross a socket
        assert rt.mcp_resources() == [] and rt.mcp_prompt_commands() == {}
        assert rt.mcp_start_soon() is None  # no MCP server is configured: nothing starts
        assert rt.can_always_allow("python") is False
        rt.apply_settings()
        turn = await rt.start_turn(None, "hi")
        [_ async for _ in turn.events()]
        await rt.remember_model(turn.conversation_id)
        conversation = await rt.conversation(turn.conversation_id)
        assert conversation is not None and conversation.model == rt.model_ref()
    finally:
        await rt.close()


RUNTIME_NAMES = {"runtime", "_runtime"}


def _runtime_reaches() -> list[tuple[str, int, str]]:
    """Every `runtime.<name>` (or `x.runtime.<name>`) read anywhere in tui/."""
    found = []
    for path in sorted((ROOT / "tui").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute):
                base = node.value
                name = base.attr if isinstance(base, ast.Attribute) else (
                    base.id if isinstance(base, ast.Name) else None)
                if name in RUNTIME_NAMES:
                    found.append((str(path.relative_to(ROOT)), node.lineno, node.attr))
    return found


def test_the_ui_calls_only_the_face() -> None:
    """Every `runtime.<name>` the UI touches is a call of RuntimeFace (R's patch, issue 30
    item 5: fails on the tree before it, which read runtime.tools.mcp, runtime.model...)."""
    face = _face_members()
    assert sorted({f"{f}:{n} runtime.{a}" for f, n, a in _runtime_reaches() if a not in face}) == []


def test_the_ui_never_reaches_through_to_the_parts() -> None:
    assert sorted(f"{f}:{n} runtime.{a}" for f, n, a in _runtime_reaches() if a in PARTS) == []
    assert not [p for p in (ROOT / "tui").rglob("*.py") if "run_block(" in p.read_text()]


def test_the_service_client_answers_every_call_of_the_face() -> None:
    """tui.service_runtime.ServiceRuntime (what `llmdeck` holds when the service runs)
    has each call itself or forwards it by the service's call table; a sync call of the
    face is sync there too (the UI does not await it)."""
    from core.service.dispatch import RUNTIME_CALLS, SERVICE_CALLS, TURN_CALLS
    from tui.service_runtime import ServiceRuntime

    client = ServiceRuntime(Settings())  # not started: nothing is asked of a service
    own = {n for n in [*dir(ServiceRuntime), *vars(client)] if not n.startswith("_")}
    forwarded = set(RUNTIME_CALLS) | set(TURN_CALLS) | set(SERVICE_CALLS)
    missing = sorted(n for n in _face_members() - own - forwarded if n != "settings")
    assert missing == []
    for name in _face_members() & own:
        face_fn, client_fn = getattr(RuntimeFace, name, None), getattr(ServiceRuntime, name, None)
        if callable(face_fn) and callable(client_fn):
            assert inspect.iscoroutinefunction(face_fn) == inspect.iscoroutinefunction(client_fn), name

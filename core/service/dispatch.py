"""The service's call table: what a client may ask, by name, and how each is answered.

Most calls are the Runtime's own async methods forwarded as they are (RUNTIME_CALLS):
adding one the face grows is adding its name here (and RemoteRuntime picks it up from
the same table). Calls that start a reply hand the Turn to the TurnHub, which streams it
to the caller and to anyone watching. Service calls (status, subscribe, shutdown, the
HTTP face) are the rest of the table. Anything not named here does not exist for a
client: no attribute walking, no private names.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from core.service import call_args, codec, downloads
from core.service.protocol import BAD_CALL, NOT_FOUND, SUBSCRIPTION_TOPICS, CallError
from core.service.turns import TurnHub

# Runtime methods forwarded as they are: name -> True when it is a coroutine.
RUNTIME_CALLS: dict[str, bool] = {
    "list_conversations": True,
    "messages": True,
    "conversation": True,
    "messages_around": True,
    "messages_after": True,
    "search": True,
    "branch_positions": True,
    "step_branch": True,
    "delete_message": True,
    "rename_conversation": True,
    "delete_conversation": True,
    "export_conversation": True,
    "ensure_model": True,
    "reload_model": True,
    "switch_model": True,
    "find_model": True,
    "local_models": True,
    "spec_for": True,
    "apply_preset": True,
    "save_preset": True,
    "hub_search": True,
    "hub_files": True,
    "hub_offline": True,
    "recommended_models": True,
    "delete_local_model": True,
    "attachments": True,
    "detach": True,
    "images": True,
    "remember_model": True,
    "run_python": True,
    "mcp_prompt": True,
    "mcp_save_resource": True,
    "model_ref": False,
    "is_active_model": False,
    "worker_status": False,
    "check_mentions": False,
    "tool_warning": False,
    "can_always_allow": False,
    "sandbox_info": False,
    "mcp_prompt_commands": False,
    "mcp_resources": False,
    "model_is_remote": False,
}
MCP_CALLS = frozenset({"mcp_prompt", "mcp_save_resource"})
# Runtime methods that return a Turn: the hub runs it and the caller watches it.
TURN_CALLS = ("start_turn", "regenerate", "edit_and_resend", "continue_reply")
DECISIONS = ("allow", "deny", "always")


class Caller(Protocol):
    """The session a call came from (core.service.server.Session)."""

    topics: set[str]

    def send(self, message: dict[str, Any]) -> None: ...


class ServiceControl(Protocol):
    def status(self) -> dict[str, Any]: ...
    def request_stop(self, reason: str, restart: bool = False) -> None: ...
    async def open_http(self, args: dict[str, Any], owner: Any = None) -> dict[str, Any]: ...
    async def close_http(self) -> bool: ...
    def session_gone(self, session: Any) -> None: ...


@dataclass
class CallContext:
    runtime: Any  # core.runtime.Runtime
    hub: TurnHub
    caller: Caller
    service: ServiceControl
    call_id: Any = None


Handler = Callable[[CallContext, dict[str, Any]], Awaitable[Any]]


def _bound(fn: Callable[..., Any], name: str, args: dict[str, Any]) -> inspect.BoundArguments:
    try:
        return inspect.signature(fn).bind(**args)
    except TypeError as exc:
        raise CallError(BAD_CALL, f"{name}: {exc}.") from None


async def _forward(ctx: CallContext, name: str, args: dict[str, Any]) -> Any:
    fn = getattr(ctx.runtime, name)
    bound = _bound(fn, name, args)
    # What it raises crosses as its own type with its sentence (core.service.errors):
    # McpCallError's text, a StoreError's message, LookupError's.
    result = fn(*bound.args, **bound.kwargs)
    return await result if RUNTIME_CALLS[name] else result


async def _turn_call(ctx: CallContext, name: str, args: dict[str, Any]) -> Any:
    fn = getattr(ctx.runtime, name)
    bound = _bound(fn, name, args)
    turn = await fn(*bound.args, **bound.kwargs)
    live = ctx.hub.begin(turn, ctx.caller)
    return {**live.summary(), "rollover": getattr(turn, "rollover", None),
            "sources": tuple(getattr(turn, "sources", ()))}


async def _attach(ctx: CallContext, args: dict[str, Any]) -> Any:
    """attach(conversation_id, paths): progress goes to the caller as events of this call."""
    conversation_id = args.get("conversation_id")
    paths = args.get("paths")
    if not isinstance(paths, list) or not all(isinstance(p, (str, Path)) for p in paths):
        raise CallError(BAD_CALL, "attach: paths must be a list of file paths.")
    call_id = ctx.call_id

    def progress(name: str, stage: str, done: int, total: int) -> None:
        ctx.caller.send({"event": "progress", "id": call_id, "data":
                         {"name": name, "stage": stage, "done": done, "total": total}})

    return await ctx.runtime.attach(conversation_id, list(paths), progress)


def _turn_id(args: dict[str, Any]) -> str:
    turn_id = args.get("turn")
    if not isinstance(turn_id, str):
        raise CallError(BAD_CALL, "Name the turn: {\"turn\": \"<id>\"}.")
    return turn_id


async def _watch_turn(ctx: CallContext, args: dict[str, Any]) -> Any:
    live = None
    if isinstance(args.get("conversation_id"), str):
        live = ctx.hub.for_conversation(args["conversation_id"])
        if live is None:
            return None  # nothing streams there: the store has the whole conversation
    else:
        live = ctx.hub.get(_turn_id(args))
        if live is None:
            raise CallError(NOT_FOUND, "That reply is no longer streaming.")
    ctx.hub.watch(live, ctx.caller)
    return live.summary()


async def _compare(ctx: CallContext, args: dict[str, Any]) -> Any:
    """compare(conversation_id, text, other, label): the comparison's summary, its two
    replies streaming to the caller as turns "<compare>.0" and "<compare>.1"; or the
    CompareRefused with its sentence."""
    from core.engines.base import ModelSpec
    from core.runtime.compare import CompareRefused
    from core.service.compare import comparisons_of

    cid, text, other, label = (args.get(k) for k in ("conversation_id", "text", "other", "label"))
    if not (isinstance(cid, (str, type(None))) and isinstance(text, str)
            and isinstance(other, ModelSpec) and isinstance(label, str)):
        raise CallError(BAD_CALL, "compare wants conversation_id, text, other (a ModelSpec) "
                        "and label.")
    result = await ctx.runtime.compare(cid, text, other, label)
    if isinstance(result, CompareRefused):
        return result
    compare_id = comparisons_of(ctx.runtime).add(result, ctx.caller)
    return {"compare": compare_id, "conversation_id": result.conversation_id,
            "user_message_id": result.user_message_id}


async def _compare_cancel(ctx: CallContext, args: dict[str, Any]) -> Any:
    from core.service.compare import comparisons_of

    comparison = comparisons_of(ctx.runtime).get(args.get("compare"))
    if comparison is None:
        return False
    comparison.cancel()
    return True


async def _compare_keep(ctx: CallContext, args: dict[str, Any]) -> Any:
    """Keep one side's reply (the other stays its sibling); the kept message's id."""
    from core.service.compare import comparisons_of

    compare_id, side = args.get("compare"), args.get("side")
    comparisons = comparisons_of(ctx.runtime)
    comparison = comparisons.get(compare_id)
    if comparison is None:
        raise CallError(NOT_FOUND, "That comparison is over; its replies are in the history.")
    if side not in (0, 1) or isinstance(side, bool):
        raise CallError(BAD_CALL, "compare_keep wants side 0 (left) or 1 (right).")
    kept = await comparison.keep(side)
    comparisons.drop(compare_id)
    return kept


async def _cancel_turn(ctx: CallContext, args: dict[str, Any]) -> Any:
    return ctx.hub.cancel(_turn_id(args))


async def _cancel_call(ctx: CallContext, args: dict[str, Any]) -> Any:
    """The caller's own call `call` stops (an attach whose reading the user cancelled):
    True when it was still running. Its task answers it, once, as cancelled (or with what
    it had when the cancel came too late to stop it)."""
    running = getattr(ctx.caller, "running", {})
    task = running.get(args.get("call"))
    if task is None or task is asyncio.current_task() or task.done():
        return False
    del running[args.get("call")]  # no longer the caller's: its task knows it was told
    task.cancel()
    return True


async def _answer(ctx: CallContext, args: dict[str, Any]) -> Any:
    ask, decision = args.get("ask"), args.get("decision")
    if not isinstance(ask, str) or decision not in DECISIONS:
        raise CallError(BAD_CALL, f"answer_approval wants an ask id and a decision "
                        f"({', '.join(DECISIONS)}).")
    return ctx.hub.answer(ask, decision)


async def _get_settings(ctx: CallContext, args: dict[str, Any]) -> Any:
    return ctx.runtime.settings


async def _save_settings(ctx: CallContext, args: dict[str, Any]) -> Any:
    """Take a client's edited Settings into the running service (field by field, in place:
    the tools and pool hold this object) and write the file; returns where a file with
    entries llmdeck could not read was kept aside (Runtime.save_settings), or None."""
    import dataclasses

    from core.config import Settings

    new = args.get("settings")
    if not isinstance(new, Settings):
        raise CallError(BAD_CALL, "save_settings wants {\"settings\": <Settings>}.")
    for f in dataclasses.fields(new):
        setattr(ctx.runtime.settings, f.name, getattr(new, f.name))
    ctx.runtime.apply_settings()  # the next tool call follows the new policy and limits
    return await ctx.runtime.save_settings()


async def _mirror(ctx: CallContext, args: dict[str, Any]) -> Any:
    """What a client answers its synchronous face calls from (tui.service_runtime keeps
    it): the worker table, the sandbox, the MCP servers' prompts and resources, the
    active model's reference, the clusters (their state files, read in a thread). Face
    calls only, one round trip."""
    rt = ctx.runtime
    return {"workers": rt.worker_status(), "sandbox": rt.sandbox_info(),
            "mcp_prompt_commands": rt.mcp_prompt_commands(), "mcp_resources": rt.mcp_resources(),
            "model_ref": rt.model_ref(), "remote": rt.model_is_remote(),
            "clusters": await asyncio.to_thread(rt.cluster_report),
            "service": ctx.service.status()}


async def _mcp_start(ctx: CallContext, args: dict[str, Any]) -> Any:
    """Start the MCP servers (a `/` was typed in a client) and answer once they are listed,
    with the mirror (their prompts and resources); the servers stay the service's."""
    started = ctx.runtime.mcp_start_soon()
    if started is not None:
        await asyncio.shield(started)  # a client gone mid-start does not stop the start
    return await _mirror(ctx, args)


async def _subscribe(ctx: CallContext, args: dict[str, Any]) -> Any:
    topic = args.get("topic")
    if topic not in SUBSCRIPTION_TOPICS:
        raise CallError(BAD_CALL, f"Topics: {', '.join(SUBSCRIPTION_TOPICS)}.")
    ctx.caller.topics.add(topic)
    if topic == "turns":  # the replies running now; each new one is pushed (turn_started)
        return ctx.hub.live()
    if topic in ("notices", "conversations", "memory"):  # core.service.notices: said already
        sticky = getattr(ctx.service, "sticky_notices", None)
        return list(sticky()) if topic == "notices" and sticky is not None else []
    if topic == "downloads":  # every job now; each change is pushed ("downloads" events)
        return await downloads.downloads(ctx, {})
    return ctx.service.status() if topic == "status" else ctx.runtime.model_state()


async def _unsubscribe(ctx: CallContext, args: dict[str, Any]) -> Any:
    ctx.caller.topics.discard(args.get("topic"))
    return True


async def _status(ctx: CallContext, args: dict[str, Any]) -> Any:
    return ctx.service.status()


async def _model_state(ctx: CallContext, args: dict[str, Any]) -> Any:
    return ctx.runtime.model


async def _live_turns(ctx: CallContext, args: dict[str, Any]) -> Any:
    return ctx.hub.live()


async def _shutdown(ctx: CallContext, args: dict[str, Any]) -> Any:
    """Stop; {"restart": true} (`llmdeck service restart`) tells the clients to wait for
    the next service rather than say it was stopped."""
    if args.get("restart") is True:
        ctx.service.request_stop("restarting", restart=True)
    else:
        ctx.service.request_stop("asked to stop by a client")
    return True


async def _serve_open(ctx: CallContext, args: dict[str, Any]) -> Any:
    return await ctx.service.open_http(args, ctx.caller)  # closes when the caller goes


async def _serve_close(ctx: CallContext, args: dict[str, Any]) -> Any:
    return await ctx.service.close_http()


SERVICE_CALLS: dict[str, Handler] = {
    "status": _status,
    "subscribe": _subscribe,
    "unsubscribe": _unsubscribe,
    "model_state": _model_state,
    "live_turns": _live_turns,
    "watch_turn": _watch_turn,
    "cancel_turn": _cancel_turn,
    "cancel_call": _cancel_call,
    "answer_approval": _answer,
    "attach": _attach,
    "mirror": _mirror,
    "compare": _compare,
    "compare_cancel": _compare_cancel,
    "compare_keep": _compare_keep,
    "mcp_start": _mcp_start,
    "get_settings": _get_settings,
    "save_settings": _save_settings,
    "shutdown": _shutdown,
    "serve_open": _serve_open,
    "serve_close": _serve_close,
    **downloads.CALLS,  # issue 45: downloads are the service's jobs
}


async def dispatch(ctx: CallContext, name: Any, raw_args: Any) -> Any:
    """Run call `name` and return its result encoded for the wire (CallError when the
    client got it wrong; whatever the call raised otherwise)."""
    if not isinstance(name, str):
        raise CallError(BAD_CALL, "A call names what it asks: {\"id\", \"call\", \"args\"}.")
    if raw_args is None:
        raw_args = {}
    if not isinstance(raw_args, dict):
        raise CallError(BAD_CALL, f"{name}: args must be an object.")
    try:
        args = codec.decode(raw_args)
    except codec.CodecError as exc:
        raise CallError(BAD_CALL, f"{name}: {exc}.") from None
    try:  # every argument against the call's schema, before any work (core.service.call_args)
        stored = call_args.check(name, args)
        await call_args.check_stored(ctx.runtime, name, stored)
    except call_args.ArgError as exc:
        raise CallError(exc.code, exc.message) from None
    if name in SERVICE_CALLS:
        result = await SERVICE_CALLS[name](ctx, args)
    elif name in TURN_CALLS:
        result = await _turn_call(ctx, name, args)
    elif name in RUNTIME_CALLS:
        result = await _forward(ctx, name, args)
    else:
        raise CallError(BAD_CALL, f"There is no call named {name[:80]!r}.")
    return codec.encode(result)

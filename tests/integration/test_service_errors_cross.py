"""Everything a face call can answer or raise crosses the service's socket (issue 42 item
1): every method of core.runtime's face, each failing with every error type the face may
raise, through the real server, socket, framing and codec, comes back in the client as
that same type with its sentence; a type the service does not list is a sentence naming
it; every dataclass a face method returns has a codec tag."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from pathlib import Path
from typing import Any

import pytest

from core.service import call_args, codec, errors
from core.service.client import ServiceCallError, connect
from core.service.dispatch import RUNTIME_CALLS, SERVICE_CALLS, TURN_CALLS
from core.service.server import ServiceServer

# Face methods a client does not call over the socket by their own name: the client's
# lifecycle, what it answers from its mirror or pushes, and the calls the service table
# answers under another name (subscribe "model", watch_turn, cancel_turn, ...).
NOT_FORWARDED = {
    "open_store_soon", "take_first_page", "start", "close", "store_notice",
    "store_recovering", "apply_settings", "save_settings", "model_state", "listen_model",
    "engine_line", "live_turns", "watch_turn", "cancel_turn", "mcp_start_soon",
    "cluster_report",  # the mirror carries it (core.service.dispatch._mirror), as engine_line
}


def _sample(tag: str) -> BaseException:
    """One instance of each listed error type, built as the face builds it."""
    cls = errors._listed(tag)
    assert cls is not None, tag
    if tag == "HomeLockError":
        return cls("llmdeck is already running here (pid 12).", 12)
    if tag in {"StoreError", "HubError", "WorkerLoadError", "SelectionError"}:
        return cls("DISK_FULL", f"{tag}: the disk is full; free some space.")
    if tag == "RemoteError":
        from core.events import Error

        return cls(Error("BAD_REQUEST", "RemoteError: the remote refused the listing."))
    if issubclass(cls, OSError):
        return cls(28, "No space left on device")
    try:
        return cls(f"{tag}: a sentence a person can act on.")
    except TypeError:
        params = list(inspect.signature(cls).parameters)
        return cls(*[f"{tag} {p}" for p in params])


CID, MID = "c" * 32, "m" * 32


class _StoreMock:
    """Every id names something, each message of conversation CID: the door's look-up of
    stored ids (core.service.call_args.check_stored) passes, so the call reaches the face."""

    def get_conversation(self, cid: str) -> object:
        return object()

    def get_message(self, mid: str) -> Any:
        return type("MessageMock", (), {"conversation_id": CID})()


def _door_args(name: str) -> dict[str, Any]:
    """Arguments that pass `name`'s schema at the door (its required fields)."""
    values = {"conversation_id": CID, "message_id": MID, "before": MID, "after": MID,
              "limit": 5, "query": "hello", "message_ids": [MID], "step": 1, "title": "T",
              "path": "/nonexistent/model.gguf", "ref": "nothing", "alias": "nothing",
              "text": "hi", "paths": ["/x"], "code": "print(1)", "name": "python",
              "command": "/none.x", "argument": "", "server": "none", "uri": "notes://x",
              "folder": "/nonexistent", "repo_id": "none/none", "model_id": "none"}
    return {f: values[f] for f, a in call_args.CALLS.get(name, {}).items() if a.required}


class RaisingRuntimeMock:
    """Every face call raises `error` (set by the test): a stand-in for the Runtime."""

    settings = None
    error: BaseException = RuntimeError("unset")
    store_handle = _StoreMock()

    async def store_call(self, fn: Any, *args: Any) -> Any:
        return fn(*args)

    def __getattr__(self, name: str) -> Any:
        if name not in RUNTIME_CALLS and name not in TURN_CALLS and name != "attach":
            raise AttributeError(name)
        if RUNTIME_CALLS.get(name) is False:
            def sync(*args: Any, **kwargs: Any) -> Any:
                raise self.error
            return sync

        async def call(*args: Any, **kwargs: Any) -> Any:
            raise self.error
        return call


class ControlMock:
    def status(self) -> dict[str, Any]:
        return {}

    def request_stop(self, reason: str) -> None: ...

    async def open_http(self, args: dict[str, Any], owner: Any = None) -> dict[str, Any]:
        return {}

    async def close_http(self) -> bool:
        return False

    def session_gone(self, session: Any) -> None: ...


def _face_methods() -> list[str]:
    from core.runtime.face import RuntimeFace

    return sorted(n for n, v in vars(RuntimeFace).items()
                  if not n.startswith("_") and callable(v))


def test_every_face_method_is_a_call_or_named_as_local() -> None:
    calls = set(RUNTIME_CALLS) | set(TURN_CALLS) | set(SERVICE_CALLS)
    missing = [n for n in _face_methods() if n not in calls and n not in NOT_FORWARDED]
    assert missing == []


async def test_every_face_error_crosses_the_socket_as_its_type(tmp_path: Path) -> None:
    runtime = RaisingRuntimeMock()
    server = ServiceServer(runtime, tmp_path / "s.sock", ControlMock())
    await server.start()
    client = await connect("test", path=tmp_path / "s.sock")
    methods = [n for n in _face_methods() if n in RUNTIME_CALLS or n in TURN_CALLS
               or n == "attach"]
    args = {name: _door_args(name) for name in methods}
    args["attach"] = {"conversation_id": None, "paths": ["/x"]}
    try:
        for tag in errors.ERRORS:
            runtime.error = sent = _sample(tag)
            for name in methods:
                with pytest.raises(ServiceCallError) as caught:
                    await client.call(name, timeout=10, **args.get(name, {}))
                got = caught.value
                assert isinstance(got, type(sent)), (name, tag, type(got).__mro__)
                assert got.message == errors.sentence(sent), (name, tag)
                if hasattr(sent, "code") and not isinstance(sent, OSError):
                    assert got.code == sent.code, (name, tag)
        # Not on the list: the nearest listed ancestor, or a sentence that names it.
        runtime.error = ZeroDivisionError("division by zero")
        with pytest.raises(ServiceCallError, match="ZeroDivisionError: division by zero"):
            await client.call("list_conversations", timeout=10)
        runtime.error = codec.CodecError("x may not cross the socket")
        with pytest.raises(ValueError, match="may not cross"):
            await client.call("messages", timeout=10, conversation_id=CID)
        assert client.connected  # nothing above ended the connection
    finally:
        await client.close()
        await server.close("done")


def test_every_dataclass_a_face_method_returns_has_a_tag() -> None:
    from core.docs import Attachment, DocError, MentionResolution
    from core.events import Event
    from core.runtime.compare import CompareRefused, Comparison
    from core.runtime.context import AttachResult, ChatContext
    from core.runtime.face import RuntimeFace
    from core.tools.fenced import BlockRun
    from core.vision import AttachedImage
    from core.wire.hub import Fit, LocalModel, Recommendation, RepoListing, SearchResult

    names = {"CompareRefused": CompareRefused, "Comparison": Comparison,
             "Attachment": Attachment, "DocError": DocError,
             "MentionResolution": MentionResolution, "Event": Event,
             "AttachResult": AttachResult, "ChatContext": ChatContext, "BlockRun": BlockRun,
             "AttachedImage": AttachedImage, "LocalModel": LocalModel, "Fit": Fit,
             "Recommendation": Recommendation, "RepoListing": RepoListing,
             "SearchResult": SearchResult}
    import core.runtime.face as face

    found: set[type] = set()

    def walk(hint: Any) -> None:
        if hint is Comparison:  # crosses as a summary and two turn streams (RemoteComparison)
            return
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            if hint not in found:
                found.add(hint)
                for f in dataclasses.fields(hint):
                    walk(typing.get_type_hints(hint).get(f.name))
            return
        for inner in typing.get_args(hint):
            walk(inner)

    for name in _face_methods():
        if name in NOT_FORWARDED - {"model_state", "live_turns", "save_settings"}:
            continue
        fn = getattr(RuntimeFace, name)
        hints = typing.get_type_hints(fn, globalns=vars(face), localns=names)
        walk(hints.get("return"))
        for key, hint in hints.items():
            if key != "return":
                walk(hint)
    untagged = []
    for cls in found:
        try:
            codec._tag_of(cls)
        except codec.CodecError:
            untagged.append(f"{cls.__module__}.{cls.__qualname__}")
    assert sorted(untagged) == []


def test_an_attach_refusal_crosses_the_codec() -> None:
    """The value /attach of a refused file answers (the defect that ended the app)."""
    from core.attach_errors import AttachError

    refused = [AttachError("TOO_LARGE", "big.txt is 10 MB, over the budget.", "big.txt")]
    assert codec.decode(codec.encode(refused)) == refused


def test_the_client_rebuilds_what_it_does_not_know_as_a_sentence() -> None:
    got = errors.rebuild({"code": "FAILED", "message": "It broke.", "type": "NoSuch"},
                         ServiceCallError)
    assert type(got) is ServiceCallError and got.message == "It broke."

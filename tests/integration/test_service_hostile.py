"""Attacks on the service's socket through its real door, checked from outside: another
user is refused, garbage / a 10 MiB line / a half line / a hang-up mid-call end only
that client (the service alive, its memory bounded, another client unaffected), and a
client that stops reading gets merged text, not one message per token."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers import service_proc as svc

NOBODY = 65534


@pytest.fixture(autouse=True)
def _no_service_left(llmdeck_home: Path):  # noqa: ANN202
    with svc.no_service_left(llmdeck_home):
        yield


def _as_nobody(path: Path) -> str:
    """Connect to `path` from a child process that is uid/gid 65534; what it saw."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, then knock
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(10)
            try:
                sock.connect(str(path))
                try:
                    sock.sendall(b'{"hello": {"protocol": 1}}\n')
                except BrokenPipeError:
                    pass  # refused before our hello went: the frame is still there to read
                seen = sock.recv(4096).decode("utf-8", "replace") or "closed"
            except OSError as exc:
                seen = f"{type(exc).__name__}: {exc.strerror}"
            os.write(write, seen.encode()[:4000])
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as f:
        return f.read().decode()


def _call(sock: socket.socket, call_id: int, name: str, **args: object) -> dict:
    sock.sendall(json.dumps({"id": call_id, "call": name, "args": args}).encode() + b"\n")
    while True:
        message = json.loads(svc.read_line(sock))
        if message.get("id") == call_id:
            return message


def test_another_user_is_refused(llmdeck_home: Path) -> None:
    pid = svc.start(*svc.scripted_args(), "--no-preload")
    path = svc.socket_path()
    # The walls as they stand: the folder and socket keep nobody out at connect().
    assert "PermissionError" in _as_nobody(path)
    # Loosen them by hand (a careless chmod): the peer check still refuses, in a sentence.
    for folder in [path.parent, *path.parent.parents]:
        if folder == Path("/") or folder == Path("/tmp"):
            break
        os.chmod(folder, os.stat(folder).st_mode | 0o005)
    os.chmod(path, 0o666)
    seen = _as_nobody(path)
    frame = json.loads(seen)
    assert frame["error"]["code"] == "NOT_ALLOWED", seen
    assert "another user" in frame["error"]["message"] and f"uid {NOBODY}" in frame["error"]["message"]
    assert '"hello"' not in seen
    assert svc.alive(pid)
    ours = svc.raw_client()  # the owner still gets in
    assert _call(ours, 1, "status")["result"]["pid"] == pid
    os.chmod(path.parent, 0o700)  # it may be the shared /tmp fallback folder


def test_garbage_huge_lines_and_hangups_hurt_only_their_client(llmdeck_home: Path) -> None:
    pid = svc.start(*svc.scripted_args(reply="A steady reply. " * 20, tokens_per_s=200))
    proc = psutil.Process(pid)
    bystander = svc.raw_client()
    assert _call(bystander, 1, "ensure_model")["result"] is True
    rss_before = proc.memory_info().rss

    bad = svc.raw_client(hello=False)  # garbage before hello
    bad.sendall(b"\x00\xff garbage\n")
    assert json.loads(svc.read_line(bad))["error"]["code"] == "BAD_FRAME"
    assert svc.read_line(bad) == b"", "closed after the error frame"

    bad = svc.raw_client()  # garbage after hello
    bad.sendall(b"{not json}\n")
    assert json.loads(svc.read_line(bad))["error"]["code"] == "BAD_FRAME"

    bad = svc.raw_client()  # a 10 MiB line, no newline
    started = time.monotonic()
    try:
        bad.sendall(b"[" * (10 * 2**20))
    except (BrokenPipeError, ConnectionResetError):
        pass  # the service hung up at its limit, before we finished
    frame = svc.read_line(bad)
    assert not frame or json.loads(frame)["error"]["code"] == "TOO_LARGE"
    assert time.monotonic() - started < 10
    assert proc.memory_info().rss - rss_before < 32 * 2**20, "the huge line was not held"

    for cut in (b'{"id": 1, "call": "sta', b'{"id": 2, "call": "start_turn", "args": '
                b'{"conversation_id": null, "text": "left mid-call"}}\n'):
        bad = svc.raw_client()
        bad.sendall(cut)
        bad.close()  # hang up mid-line / mid-call

    # The service and the bystander go on: a reply streams to it in full.
    assert svc.alive(pid)
    answer = _call(bystander, 2, "start_turn", conversation_id=None, text="still there?")
    turn = answer["result"]["turn"]
    text = []
    while True:
        message = json.loads(svc.read_line(bystander))
        if message.get("event") == "turn" and message["data"]["$type"] == "TextDelta":
            text.append(message["data"]["text"])
        if message.get("event") == "turn_end" and message["turn"] == turn:
            break
    assert "".join(text) == "A steady reply. " * 20
    # The turn started by the client that hung up mid-call finished and was stored.
    convs = _call(bystander, 3, "list_conversations")["result"]
    titles = {c["title"] for c in convs}
    assert "left mid-call" in titles
    left = next(c for c in convs if c["title"] == "left mid-call")
    msgs = svc.wait_for(lambda: (m := _call(bystander, 4, "messages", conversation_id=left["id"])
                                 ["result"]) and len(m) == 2 and m[1]["status"] == "complete" and m,
                        20, "the orphaned turn stored")
    assert msgs[1]["content"] == "A steady reply. " * 20


def test_silent_and_stalled_clients_are_let_go_and_tags_are_allowlisted(llmdeck_home: Path) -> None:
    pid = svc.start(*svc.scripted_args(), "--no-preload")
    silent = svc.raw_client(hello=False)  # connects and says nothing
    stalled = svc.raw_client()  # begins a line and never ends it
    stalled.sendall(b'{"id": 1, "call": "sta')
    started = time.monotonic()
    assert json.loads(svc.read_line(silent))["error"]["code"] == "TIMEOUT"
    assert json.loads(svc.read_line(stalled))["error"]["code"] == "TIMEOUT"
    assert time.monotonic() - started < 15
    # Only the protocol's own types can be built from a client's arguments.
    ours = svc.raw_client()
    for args in ({"x": {"$type": "Popen", "args": ["touch", "/tmp/owned"]}},
                 {"x": {"$type": "TextDelta", "text": "hi", "extra": 1}},
                 {"x": {"$eval": "1"}}):
        answer = _call(ours, 2, "status", **args)
        assert answer["error"]["code"] == "BAD_CALL", answer
    assert svc.alive(pid) and _call(ours, 3, "status")["result"]["pid"] == pid
    # The hello's client name reaches the service log as plain text: no ESC to colour the
    # terminal that reads it, no newline to forge a line, no more than 40 characters.
    forger = svc.raw_client(hello=False)
    forger.sendall(json.dumps({"hello": {"protocol": 1, "client": "\x1b[31mred\n2026-01-01 "
                                         "llmdeck.service INFO forged" + "A" * 5000}}).encode()
                   + b"\n")
    assert b'"hello"' in svc.read_line(forger)
    from core.service.launch import log_path

    log = svc.wait_for(lambda: (t := log_path().read_text()) and "red" in t and t, 10,
                       "the forger's connection logged")
    assert "\x1b" not in log and "A" * 41 not in log
    assert not any(line.endswith("INFO forged") or line.startswith("2026-01-01")
                   for line in log.splitlines()), log[-600:]


def test_a_client_that_stops_reading_gets_merged_text(llmdeck_home: Path) -> None:
    reply = "word " * 20_000  # 100 KB in 4-character pieces: 25,000 deltas (~2 MB as lines)
    config = llmdeck_home / "config" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("context_size = 65536\n[sampling]\nmax_tokens = 30000\n")
    pid = svc.start(*svc.scripted_args(reply=reply))
    slow = svc.raw_client()
    assert _call(slow, 1, "ensure_model")["result"] is True
    slow.sendall(b'{"id": 2, "call": "start_turn", "args": {"conversation_id": null, '
                 b'"text": "long"}}\n')
    time.sleep(4)  # read nothing while the reply streams: the socket buffer fills
    messages, text, ended = 0, [], False
    while not ended:
        message = json.loads(svc.read_line(slow))
        if message.get("event") == "turn":
            messages += 1
            if message["data"]["$type"] == "TextDelta":
                text.append(message["data"]["text"])
        ended = message.get("event") == "turn_end"
    assert "".join(text) == reply, "nothing lost, in order"
    assert messages < 25_000 // 4, f"{messages} messages for 25,000 deltas: not merged"
    assert svc.alive(pid)


async def test_a_socket_planted_by_another_user_gets_nothing_from_us(llmdeck_home: Path) -> None:
    """Someone else listening at our socket path (a shared /tmp fallback): the client asks
    the kernel who it is and hangs up before sending a word."""
    import asyncio

    from core.service import ServiceUnavailable, connect

    path = svc.socket_path()
    os.chmod(path.parent, 0o777)
    for folder in path.parent.parents:
        if folder in (Path("/"), Path("/tmp")):
            break
        os.chmod(folder, os.stat(folder).st_mode | 0o005)
    ready, done = os.pipe()
    pid = os.fork()
    if pid == 0:  # the impostor, as nobody
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(str(path))
            server.listen(1)
            os.write(done, b"1")
            conn, _ = server.accept()
            conn.settimeout(5)
            try:
                conn.sendall(b'{"hello": {"protocol": 1, "pid": 1}}\n')
                got = conn.recv(4096)
            except OSError:  # the client hung up first: it said nothing
                got = b""
            os.write(done, b"heard:" + got[:100] if got else b"nothing")
        finally:
            os._exit(0)
    try:
        assert os.read(ready, 1) == b"1"
        with pytest.raises(ServiceUnavailable) as refused:
            await asyncio.wait_for(connect("tui"), 10)
        assert "another user" in refused.value.message and f"uid {NOBODY}" in refused.value.message
        os.close(done)
        assert os.read(ready, 200) == b"nothing", "our hello reached the impostor"
    finally:
        os.waitpid(pid, 0)
        os.close(ready)
        path.unlink(missing_ok=True)  # the folder may be the shared /tmp fallback:
        os.chmod(path.parent, 0o700)  # leave it as the service makes it

"""The service's socket holds its bounds against real clients (issue 44 items 2 and 3): a
client that asks for big answers and never reads is dropped once its answers waiting
pass the outbox's bound in bytes (the service's memory stays bounded, the other client
goes on), and the client cap is enforced at accept: connections over MAX_CLIENTS get a
sentence, not a greeting, however many arrive at once."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import psutil
import pytest

from core.service.outbox import MAX_PENDING_BYTES
from core.service.server import MAX_CLIENTS
from tests.helpers import service_proc as svc


@pytest.fixture(autouse=True)
def _no_service_left(llmdeck_home: Path):  # noqa: ANN202
    with svc.no_service_left(llmdeck_home):
        yield


def _call(sock: socket.socket, call_id: int, name: str, **args: object) -> dict:
    sock.sendall(json.dumps({"id": call_id, "call": name, "args": args}).encode() + b"\n")
    while True:
        message = json.loads(svc.read_line(sock))
        if message.get("id") == call_id:
            return message


def test_a_client_that_never_reads_is_dropped_at_the_byte_bound(llmdeck_home: Path) -> None:
    pid = svc.start(*svc.scripted_args(reply="ok"), "--no-preload")
    proc = psutil.Process(pid)
    owner = svc.raw_client()
    big = "y" * (2 * 2**20)  # one 2 MiB message: each `messages` answer is ~2 MB
    cid = _call(owner, 1, "start_turn", conversation_id=None, text=big)["result"]["conversation_id"]
    while json.loads(svc.read_line(owner)).get("event") != "turn_end":
        pass  # the reply to it is stored
    rss_before = proc.memory_info().rss

    hog = svc.raw_client()
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    calls = 100  # 200 MB of answers, were they all kept
    for n in range(calls):
        hog.sendall(json.dumps({"id": n, "call": "messages", "args": {
            "conversation_id": cid, "limit": 2}}).encode() + b"\n")
    peak = 0
    deadline = time.monotonic() + 120
    clients = 2
    while time.monotonic() < deadline:
        peak = max(peak, proc.memory_info().rss - rss_before)
        clients = _call(owner, 3, "status")["result"]["clients"]
        if clients == 1:
            break
        time.sleep(0.2)
    assert clients == 1, "the client that never reads was kept"
    assert peak < MAX_PENDING_BYTES + 96 * 2**20, f"the service grew {peak / 2**20:.0f} MiB"
    # The other client goes on; the hog's socket ends (what it holds, then nothing).
    assert _call(owner, 4, "conversation", conversation_id=cid)["result"]["id"] == cid
    hog.settimeout(20)
    received = 0
    while chunk := hog.recv(1 << 20):
        received += len(chunk)
    assert received < calls * 2 * 2**20
    assert svc.alive(pid)


def test_the_client_cap_holds_at_accept(llmdeck_home: Path) -> None:
    svc.start(*svc.scripted_args(), "--no-preload")
    path = str(svc.socket_path())
    socks = []
    for _ in range(MAX_CLIENTS + 16):  # all connected before any says hello
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(20)
        sock.connect(path)
        socks.append(sock)
    for sock in socks:
        try:
            sock.sendall(b'{"hello": {"protocol": 1, "client": "test"}}\n')
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before our hello went: the frame is still there to read
    greeted, refused = 0, []
    for sock in socks:
        first = json.loads(svc.read_line(sock))
        if "hello" in first:
            greeted += 1
        else:
            refused.append(first["error"])
    assert greeted == MAX_CLIENTS
    assert len(refused) == 16
    assert all(e["code"] == "TOO_MANY" and f"already has {MAX_CLIENTS} clients" in e["message"]
               for e in refused), refused[:2]
    for sock in socks:
        sock.close()
    # The places free up as clients go.
    svc.wait_for(lambda: _clients_seen_by_a_newcomer() == 1, 20, "the clients gone")


def _clients_seen_by_a_newcomer() -> int:
    sock = svc.raw_client()
    try:
        return int(_call(sock, 1, "status")["result"]["clients"])
    finally:
        sock.close()

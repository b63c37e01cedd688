"""A sandbox supervisor gone hostile: it answers "ready" properly, then attacks the app's
end of the channel the way code that took over the sandbox would. The test stands it in
for supervisor.py (Sandbox(supervisor=[this file, attack])) and checks the app from
outside. Standard library only, like the real one; started by the real launcher.

Attacks (argv[1]): cut (a frame cut short, then silence), garbage (bytes that are no
JSON), huge (a 2 GiB length prefix, then zeros as fast as the socket takes them),
pickle (multiprocessing's own framing around a pickle that writes argv[2] when
unpickled), schema (JSON of the wrong shape), other-run (a proper result for another
run), late (a proper result after the run's deadline).
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import struct
import sys
import time


class _WritesFile:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):  # what an unpickling app would run: open(path, "w")
        return (open, (self.path, "w"))


def _frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body


def _read_run(sock: socket.socket) -> dict:
    size = struct.unpack(">I", sock.recv(4, socket.MSG_WAITALL))[0]
    return json.loads(sock.recv(size, socket.MSG_WAITALL))


def _result(run_id: str) -> dict:
    return {"t": "result", "id": run_id, "ok": True, "stdout": "", "stderr": "",
            "value": "'fine'", "error": None, "kind": None, "note": None, "restart": False}


def main() -> None:
    attack, *rest = sys.argv[1:-1]
    setup = json.loads(sys.argv[-1])
    sock = socket.socket(fileno=setup["fd"])
    sock.sendall(_frame({"t": "ready", "walls": {}}))
    run = _read_run(sock)
    if attack == "cut":
        sock.sendall(struct.pack(">I", 100) + b'{"t": "res')
    elif attack == "garbage":
        junk = b"\x80\x04not json at all"
        sock.sendall(struct.pack(">I", len(junk)) + junk)
    elif attack == "huge":
        sock.sendall(struct.pack(">I", (2 << 30) - 1))
        zeros = b"\0" * (1 << 20)
        try:
            for _ in range(2048):
                sock.sendall(zeros)
        except OSError:
            pass
    elif attack == "pickle":
        payload = pickle.dumps(_WritesFile(rest[0]))
        sock.sendall(struct.pack("!i", len(payload)) + payload)
    elif attack == "schema":
        sock.sendall(_frame({**_result(run["id"]), "ok": "yes", "extra": [1] * 10}))
    elif attack == "other-run":
        sock.sendall(_frame(_result("not-" + run["id"])))
    elif attack == "late":
        time.sleep(float(rest[0]))
        sock.sendall(_frame(_result(run["id"])))
    time.sleep(600)  # and say nothing more
    os._exit(0)


if __name__ == "__main__":
    main()

"""kill -9 in the middle of a streamed reply loses at most the text since the last flush.

A real child process opens the store, streams tokens through MessageStream and reports
each flush on stdout; the test kills it with SIGKILL mid-stream and reopens the file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from core.store import Store

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import sys, time
from pathlib import Path
from core.store import MessageStream, Store

store = Store.open(Path(sys.argv[1]))
cid = store.create_conversation("crash test")
store.add_message(cid, "user", "count for me")
stream = MessageStream(store, cid, model="scripted", interval=0.02)
print("CONV", cid, flush=True)
writes = 0
for i in range(100000):
    stream.feed(f"tok{i} ", reasoning="r" if i % 10 == 0 else "")
    if stream.writes != writes:
        writes = stream.writes
        print("FLUSHED", len(stream.flushed_text), flush=True)
    time.sleep(0.002)
stream.finish()
print("DONE", flush=True)
"""


def _expected_text(length: int) -> str:
    text, i = "", 0
    while len(text) < length:
        text += f"tok{i} "
        i += 1
    return text[:length]


@pytest.mark.slow
def test_kill_9_mid_stream_keeps_the_last_flush_marked_partial(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": pythonpath, "LLMDECK_HOME": str(tmp_path / "home")}
    errors = (tmp_path / "child.err").open("w")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db)], stdout=subprocess.PIPE, stderr=errors,
        text=True, env=env,
    )
    assert child.stdout is not None
    try:
        conv_line = child.stdout.readline().split()
        assert conv_line[:1] == ["CONV"], (tmp_path / "child.err").read_text()
        conversation_id = conv_line[1]
        flushed = []
        while len(flushed) < 8:
            line = child.stdout.readline()
            assert line.startswith("FLUSHED"), line
            flushed.append(int(line.split()[1]))
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        errors.close()
    assert child.returncode == -signal.SIGKILL
    # The child may have flushed once or twice more between our last read and the kill.
    with Store.open(db) as store:
        messages = store.messages(conversation_id)
        assert [m.role for m in messages] == ["user", "assistant"]
        reply = messages[1]
        assert reply.status == "partial"
        assert len(reply.content) >= flushed[-1]
        assert reply.content == _expected_text(len(reply.content))
        assert reply.content.endswith(" ")  # a flush boundary, not a torn write
        assert reply.reasoning and set(reply.reasoning) == {"r"}
        assert reply.model == "scripted"
        # Still findable and still continuable after the crash.
        assert [h.message_id for h in store.search("tok3")] == [reply.id]
        store.update_message(reply.id, status="error", error="llmdeck was stopped mid-reply")
        assert store.get_message(reply.id).status == "error"  # type: ignore[union-attr]

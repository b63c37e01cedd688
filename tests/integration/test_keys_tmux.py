"""Keys that arrive together (a fast SSH link, a script, a paste) reach the real `llmdeck`
in a real terminal (tmux) whole and in order: text and Enter go in ONE tmux command with no
pause, and the test waits on what SQLite holds, never on a sleep.

The model is the scripted engine (it answers at once), set in the config file as a user
could; the app, terminal, worker process and SQLite store are the real ones.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from core import paths
from core.store import auto_title
from tests.helpers.tmux import TmuxSession, llmdeck_command

READY = "●"
PIECES = ["Grüße aus Köln", "naïve café", "日本語のテキスト", "مرحبا بالعالم", "Ωμέγα",
          "🎉", "👍🏽", "👩\u200d💻", "🇫🇷", "ñandú", "a\u00a0b", "x²+y²", "≈ ∑ ∞", "plain words"]
LENGTHS = [1, 2000, 7, 40, 120, 300, 3, 600, 15, 90, 1000, 60, 250, 4, 450, 25, 700, 11, 180, 33]


def message(index: int, length: int) -> str:
    """Text of exactly `length` characters mixing scripts and emoji; never starts with '/'
    (a command) nor has spaces at either end."""
    text = f"m{index} "
    k = index
    while len(text) < length:
        text += PIECES[k % len(PIECES)] + " "
        k += 1
    text = text[:length].strip()
    return text + "z" * (length - len(text))


def user_messages() -> list[str]:
    db = paths.db_path()
    if not db.exists():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
        return [r[0] for r in conn.execute("SELECT content FROM messages WHERE role = 'user' ORDER BY seq")]


def finished_replies() -> int:
    with sqlite3.connect(f"file:{paths.db_path()}?mode=ro", uri=True, timeout=5) as conn:
        return conn.execute("SELECT count(*) FROM messages WHERE role = 'assistant' "
                            "AND status = 'complete'").fetchone()[0]


def titles() -> list[str]:
    with sqlite3.connect(f"file:{paths.db_path()}?mode=ro", uri=True, timeout=5) as conn:
        return [r[0] for r in conn.execute("SELECT title FROM conversations ORDER BY seq")]


def wait_for_messages(count: int, timeout: float, what: str) -> list[str]:
    deadline = time.monotonic() + timeout
    stored: list[str] = []
    while time.monotonic() < deadline:
        try:
            stored = user_messages()
        except sqlite3.OperationalError:  # the app is creating the file right now
            stored = []
        if len(stored) >= count:
            return stored
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}: {len(stored)} of {count} stored: {stored!r}")


@pytest.fixture
def app_in_tmux(llmdeck_home: Path):
    config = llmdeck_home / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text('model = "scripted"\nengine = "scripted"\n', encoding="utf-8")
    tmux = TmuxSession(llmdeck_command(), env={"LLMDECK_HOME": str(llmdeck_home),
                                               "HF_HUB_OFFLINE": "1", "LANG": "C.UTF-8"},
                       width=120, height=36)
    try:
        tmux.wait_for(lambda s: READY in s, 60, "the scripted model to be ready")
        yield tmux
        tmux.send("C-q")
    finally:
        tmux.close()


def test_twenty_messages_sent_in_bursts_are_stored_whole_and_in_order(app_in_tmux: TmuxSession) -> None:
    sent = [message(i, n) for i, n in enumerate(LENGTHS)]
    assert [len(m) for m in sent] == LENGTHS
    for i, text in enumerate(sent):
        app_in_tmux.send_line(text)  # text and Enter in one burst
        wait_for_messages(i + 1, 30, f"message {i} ({len(text)} characters)")
    stored = wait_for_messages(len(sent), 5, "all messages")
    for i, (want, got) in enumerate(zip(sent, stored, strict=True)):
        assert got == want, f"message {i}: sent {len(want)} characters, stored {len(got)}"
    assert titles() == [auto_title(sent[0])]  # one conversation, titled from the whole first message


def test_enter_text_enter_in_one_burst_is_two_messages(app_in_tmux: TmuxSession) -> None:
    app_in_tmux.type("What is the capital of France? Answer in one sentence.")
    app_in_tmux.wait_for(lambda s: "Answer in one sentence." in s, 10, "the typed text")
    app_in_tmux.burst(("Enter",), "Tell me a short story about a cat.", ("Enter",))
    stored = wait_for_messages(2, 20, "both messages")
    assert stored == ["What is the capital of France? Answer in one sentence.",
                      "Tell me a short story about a cat."]
    assert titles() == ["What is the capital of France? Answer in one sentence."]
    # Ctrl+N then a message, in one burst: the new chat gets the whole message.
    deadline = time.monotonic() + 20
    while finished_replies() < 2:  # Ctrl+N waits for no reply; it refuses while one streams
        assert time.monotonic() < deadline, "the two replies did not finish"
        time.sleep(0.05)
    app_in_tmux.burst(("C-n",), "A new chat, sent at once.", ("Enter",))
    assert wait_for_messages(3, 20, "the new chat's message")[2] == "A new chat, sent at once."
    assert titles()[1] == "A new chat, sent at once."


def test_a_pasted_block_of_fifty_lines_lands_whole_and_is_not_sent(app_in_tmux: TmuxSession) -> None:
    lines = [f"line {i:02d}: {'écrit ✓ ' * (i % 4)}end" for i in range(1, 51)]
    app_in_tmux.paste("\n".join(lines))  # bracketed paste
    app_in_tmux.wait_for(lambda s: "line 50" in s, 15, "the end of the paste in the composer")
    assert user_messages() == []  # a paste never sends
    app_in_tmux.burst(("Enter",))
    assert wait_for_messages(1, 20, "the pasted message") == ["\n".join(lines)]


def test_a_paste_without_bracketed_paste_stays_one_message(app_in_tmux: TmuxSession) -> None:
    lines = ["first pasted line", "second pasted line", "third pasted line"]
    app_in_tmux.paste("\n".join(lines), bracketed=False)  # each line break arrives as Enter
    app_in_tmux.wait_for(lambda s: "third pasted line" in s, 15, "the paste in the composer")
    assert user_messages() == []
    app_in_tmux.burst(("Enter",))
    assert wait_for_messages(1, 20, "the pasted message") == ["\n".join(lines)]

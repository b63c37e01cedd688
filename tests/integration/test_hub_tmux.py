"""The real `llmdeck` in tmux, keys only: search the (fake) Hub, download a GGUF, load it,
chat with it.

The fake Hub runs in this test process on loopback and serves the real Gemma 3 270M GGUF
under a new repo and file name, so the reply in the chat comes from the downloaded copy.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from core import paths
from tests.fakes.hub_repos import make_gguf
from tests.fakes.hub_server import FakeHub
from tests.helpers import service_proc as svc
from tests.helpers.procs import worker_pids
from tests.helpers.tmux import TmuxSession, llmdeck_command

REPO = "acme/gemma-3-270m-it-GGUF"
FILE = "gemma-3-270m-it-Q4_K_M.gguf"
READY = "●"  # the status bar's ready mark
MODEL_ID = "gemma3:270m-it-q4_k_m"  # the one id the header, the store and the API use


@pytest.fixture(name="gemma_hub")
def gemma_hub_fixture(bundled_gguf: Path, tmp_path: Path) -> Iterator[FakeHub]:
    """A fake Hub with the Gemma GGUF and a decoy repo the search must leave out."""
    hub = FakeHub()
    hub.add_repo(REPO, {FILE: bundled_gguf, "README.md": b"# gemma 3 270m\n"},
                 downloads=900, likes=40, library_name="gguf", tags=["gguf", "gemma3"],
                 gguf={"total": 268_098_176, "architecture": "gemma3",
                       "context_length": 32768})
    decoy = make_gguf(tmp_path / "decoy" / "tiny-llama-Q8_0.gguf", 16 * 1024)
    hub.add_repo("acme/Tiny-Llama-GGUF", {"tiny-llama-Q8_0.gguf": decoy}, downloads=5000,
                 library_name="gguf", tags=["gguf", "llama"])
    with hub:
        yield hub


def hub_env(hub: FakeHub, home: Path) -> dict[str, str]:
    return {"LLMDECK_HOME": str(home), "HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0",
            "HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HOME": str(home / "hf-home"), "HF_TOKEN": ""}


def assistant_replies(db: Path) -> list[tuple[str, str]]:
    """(model, content) of every assistant message the app stored."""
    if not db.exists():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute(
            "SELECT model, content FROM messages WHERE role = 'assistant'").fetchall()


def test_search_download_load_and_chat_with_keys_only(
        gemma_hub: FakeHub, bundled_gguf: Path, llmdeck_home: Path) -> None:
    config = paths.config_path()  # start on the bundled copy, not a first-run provision
    config.write_text(f'model = "{bundled_gguf}"\n', encoding="utf-8")
    tmux = TmuxSession(llmdeck_command(), env=hub_env(gemma_hub, llmdeck_home))
    try:
        tmux.wait_for(lambda s: READY in s, 60, "the starting model to be ready")
        tmux.send("C-o")
        tmux.wait_for(lambda s: "Model hub" in s and "needs the network" in s, 60,
                      "the hub on its Recommended tab")
        tmux.send("C-t")
        tmux.wait_for(lambda s: "Model hub" in s and "Enter lists a repo" in s, 60,
                      "the hub with the most popular repos")
        tmux.type("gemma")
        tmux.send("Enter")
        screen = tmux.wait_for(lambda s: "1 repo ·" in s, 20, "the search for gemma")
        assert REPO in screen and "Tiny-Llama" not in screen
        tmux.send("Enter")  # the results have focus: list the repo's files
        screen = tmux.wait_for(lambda s: FILE in s and "Q4_K_M" in s, 20, "the file list")
        tmux.send("d")  # the cursor starts on the model file
        # The row says "done"; the toast that says "Download finished" can cover that end of
        # the row when both land in one frame (a loaded box), so either one counts.
        tmux.wait_for(lambda s: "done" in s or "Download finished" in s, 90,
                      "the download to finish")
        tmux.send("C-t")
        tmux.wait_for(lambda s: f"{MODEL_ID}  {REPO}" in s and "hf-cache" in s, 20,
                      "the local tab with the download selected")
        tmux.send("l")
        tmux.wait_for(lambda s: MODEL_ID in s and READY in s and "Model hub" not in s, 60,
                      "the chat screen with the downloaded model ready")
        tmux.type("What is the capital of France?")
        tmux.send("Enter")
        db = paths.db_path()
        tmux.wait_for(lambda s: any(model == MODEL_ID and text.strip()
                                    for model, text in assistant_replies(db)), 30,
                      "a reply from the downloaded model, stored")
        tmux.send("Escape")  # stop it: a 270M model rambles
        # The stop lands when the service's turn ends; quitting before that asks first.
        tmux.wait_for(lambda s: "replying…" not in s, 15, "the reply stopped")
        workers = worker_pids(tmux.pane_pid())
        tmux.send("C-q")
        tmux.wait_for(lambda s: "Model hub" not in s and MODEL_ID not in s, 15, "the app to quit")
        svc.workers_stay_with_the_service(workers, llmdeck_home)
    finally:
        tmux.close()
    downloaded = list((llmdeck_home / "hf-cache").rglob(FILE))
    assert downloaded and downloaded[0].stat().st_size == bundled_gguf.stat().st_size
    assert gemma_hub.served(REPO, FILE) >= bundled_gguf.stat().st_size  # over the wire

"""F4's rows and the hub's loaded lines (issue 48 item 11): two llama.cpp replicas of one
model read as two workers (their number and pid), and a model answering a reply is not
said to be "kept loaded"."""

from __future__ import annotations

import time

from core.workers import WorkerStatus
from tui.widgets.worker_pane import loaded_lines, row_names, status_table


def _replica(index: int, state: str, pid: int) -> WorkerStatus:
    return WorkerStatus(f"chat#{index}", "gemma3:270m-q4_k_m", "llamacpp", state, pid,
                        300 * 2**20, 1 if state == "busy" else 0, 0, 0.0, 0,
                        memory_bytes=400_000_000, last_used=time.time() - 0.3)


def test_two_replicas_of_one_model_are_told_apart() -> None:
    rows = [_replica(0, "idle", 101), _replica(1, "idle", 102)]
    assert row_names(rows) == ["#0 gemma3:270m-q4_k_m", "#1 gemma3:270m-q4_k_m"]
    from rich.console import Console

    console = Console(width=60, record=True)  # the pane is narrow: the marks still show
    console.print(status_table(rows))
    text = console.export_text()
    assert "#0 gemma3" in text and "#1 gemma3" in text and "#0 101, #1 102" in text


def test_a_single_worker_keeps_its_plain_id() -> None:
    assert row_names([_replica(0, "idle", 7)]) == ["gemma3:270m-q4_k_m"]


def test_a_model_answering_is_not_said_to_be_kept_loaded() -> None:
    lines = [str(t) for t in loaded_lines([_replica(0, "busy", 101), _replica(1, "idle", 102)])]
    assert len(lines) == 1 and "answering" in lines[0] and "kept loaded" not in lines[0]
    idle = [str(t) for t in loaded_lines([_replica(0, "idle", 101)])]
    assert "kept loaded" in idle[0]

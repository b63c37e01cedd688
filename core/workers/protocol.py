"""Messages between the app process and a worker process.

Messages are small tuples sent over a multiprocessing Connection (which frames and
pickles them). A worker sends one STEP message per engine step carrying the deltas of
all its active requests, never one message per token per request: that keeps the app
process's cost per token tiny at large batch sizes.
"""

from __future__ import annotations

from typing import Any

# app -> worker
GENERATE = "generate"  # (GENERATE, GenerationRequest)
CANCEL = "cancel"  # (CANCEL, request_id)
SHUTDOWN = "shutdown"  # (SHUTDOWN,)
STATS = "stats"  # (STATS,) -> worker answers with STATS, dict
# (WARM, GenerationRequest): a conversation was opened; its stored cache may be loaded in
# idle time (engines with `warm`, MLX). No answer; a generate that comes first wins.
WARM = "warm"
# (TRIM,): memory is short (core.workers.memory_watch): drop what the engine keeps only to
# be faster (prompt caches); replies running go on. No answer; engines without caches ignore it.
TRIM = "trim"
# (HOLD, seconds): a person's turn is being prefilled on another worker of this model
# (core.workers.turn_hold): take no engine step for up to `seconds`, so the CPU or GPU
# the replicas share goes to that turn; (HOLD, 0) ends one hold. No answer.
HOLD = "hold"

# worker -> app
LOADED = "loaded"  # (LOADED, info: dict)
LOAD_FAILED = "load_failed"  # (LOAD_FAILED, code, message)
STEP = "step"  # (STEP, [(request_id, [Event, ...] | str), ...]); a str is one TextDelta
FATAL = "fatal"  # (FATAL, message): the worker is about to exit

Message = tuple[Any, ...]

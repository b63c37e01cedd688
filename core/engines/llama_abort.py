"""A llama.cpp step cut short for a person's turn, and done again after (issue 45 item 3).

A person's turn that arrives while an API reply decodes used to wait for the step in
flight (a token, or a whole batch of prompt: seconds on a small CPU) before the reply
could be set aside or held. llama.cpp asks an abort callback between the nodes of a
compute graph (llama_set_abort_callback; the CPU and Metal backends honour it): when it
says yes, llama_decode returns 2 at once and removes from the KV cache the positions of
the batch it was computing, and llama-cpp-python raises before it counts them, so the
context is left exactly as before the step (`Llama.n_tokens`, `input_ids`).

The pool raises a worker's flag (a byte in memory both processes share:
core.workers.worker_process) when a person's turn needs that worker or its cores; the
worker lowers it before it reads its pipe (core.workers.worker_main). The engine arms the
callback only around a step of a reply it can redo token for token (core.engines.llamacpp):
never a person's own turn, a reply under a grammar, with images or log-probabilities.
The callback runs in Python (ctypes) a few hundred times a step: measured under 1% of a
decode step of the bundled Gemma.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

ABORTED = 2  # llama_decode's return value for a computation the callback stopped


class StepAbort:
    """The abort callback of one llama.cpp context: true while armed and the flag is up.
    Installed only once a flag is handed over (a worker's engine): elsewhere llama.cpp
    calls nothing between nodes."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm
        self.flag: Any = None  # a ctypes c_bool (shared memory) the pool raises; None: never
        self.armed = False
        self.fired = False  # the callback said stop during the step armed last
        self._callback: Any = None

    def listen(self, flag: Any) -> None:
        """Install the callback, reading `flag` (a ctypes bool, shared with the pool)."""
        try:
            import llama_cpp

            callback = llama_cpp.ggml_abort_callback(self._check)
            llama_cpp.llama_set_abort_callback(self._llm._ctx.ctx, callback, None)
        except (AttributeError, OSError, TypeError) as exc:  # an older binding: steps run whole
            log.debug("no abort callback on this llama.cpp: %s", exc)
            return
        self._callback = callback  # kept referenced: llama.cpp holds only the pointer
        self.flag = flag

    @property
    def available(self) -> bool:
        """Whether a flag can cut a step here."""
        return self.flag is not None

    def arm(self, on: bool) -> None:
        """Before a step: whether this step may be cut short."""
        self.fired = False
        self.armed = on and self.available

    def disarm(self) -> None:
        self.armed = False

    def _check(self, _data: Any) -> bool:
        if self.armed and self.flag.value:
            self.fired = True
            return True
        return False

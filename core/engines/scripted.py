"""A scripted engine: replays fixed replies at a fixed pace, for tests and benches.

It is not a model: snapshot tests and the UI bench need byte-identical output at a
known rate, which no real sampler gives. Everything around it (worker process, pipes,
parsing, store, UI) is the real code path.

Options (ModelSpec.options): reply (str), replies (list[str], used in turn), tokens_per_s
(float, 0 = as fast as possible), chunk_chars (int), fail_load (str: an error code),
template (chat template string reported in info, to drive family detection),
fixed_timing (bool: report constant TTFT and tok/s so snapshots are stable),
hang_load_s (float: sleep while loading), max_concurrency (int), crash_on (str: a message
containing it kills the worker with SIGSEGV, for crash tests), emit_log (str: a file
that receives each finished run's token emission times, time.monotonic(), one JSON list
per line; the UI bench compares them with the frames that show the tokens), vision (bool:
report "vision" in info, so the runtime hands it images as parts, as it does an mlx-vlm model;
it reads none), prefill_s (float: the first token of each reply comes this long after it
was submitted, as a long prompt's prefill; a cancel in that time ends it at once),
replies_for (list of [needle, reply]: a request whose messages contain the needle gets that
reply, and the turn of `replies` does not move; an agent's side requests, such as a title,
then never take the reply its main loop waits for), serial (bool: one reply at a time, as
llama.cpp runs them, the person's turn first: a running reply is set aside at a token
boundary for a higher-ranked one, core.engines.turn_order).

Pacing: each step emits at most one piece (one token) per request, and steps sleep (HEAR_S
at most each) until the earliest request is due, so tokens_per_s is the real rate per
request. A step that comes late (a busy machine) does not skip tokens; the following steps
catch up one token each, and the emission log records when each token really left.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import deque
from typing import Any

from core.engines.base import EngineLoadError, GenerationRequest, ModelSpec
from core.engines.turn_order import TurnOrder
from core.events import Done, Error, Event, PromptRead, TextDelta, Usage
from core.parsing.stops import StopMatcher

HEAR_S = 0.05
"""The longest one step sleeps: a slow pace (0.1 tok/s) or a prefill still hears a cancel
this soon, since the worker reads its pipe between steps."""


class _Run:
    def __init__(self, request: GenerationRequest, pieces: list[str]) -> None:
        self.request = request
        self.pieces = deque(pieces)
        self.stops = StopMatcher(request.sampling.stop)
        self.started = time.perf_counter()
        self.first: float | None = None
        self.count = 0
        self.next_at = self.started
        self.truncated = False
        self.emitted: list[float] = []  # time.monotonic() of each piece (emit_log only)


class ScriptedEngine:
    """Replays scripted replies token by token; batches any number of requests."""

    name = "scripted"
    max_concurrency = 64

    def __init__(self, spec: ModelSpec) -> None:
        hang = float(spec.option("hang_load_s", 0))
        if hang:  # a load that never finishes, for the pool's load timeout
            time.sleep(hang)
        fail = spec.option("fail_load")
        if fail:
            raise EngineLoadError(fail, f"Scripted load failure ({fail}).")
        self._spec = spec
        self.max_concurrency = int(spec.option("max_concurrency", 64))
        replies = spec.option("replies") or [spec.option("reply", "Hello from the scripted engine.")]
        self._replies = list(replies)
        self._turn = 0
        self._chunk = int(spec.option("chunk_chars", 4))
        rate = float(spec.option("tokens_per_s", 0.0))
        self._interval = 1.0 / rate if rate > 0 else 0.0
        self._runs: dict[str, _Run] = {}
        self._out: list[tuple[str, list[Event]]] = []
        self._emit_log: str | None = spec.option("emit_log")
        # serial: one reply at a time, the others queued or set aside (core.engines.turn_order)
        self.preempts = bool(spec.option("serial", False))
        self._order: TurnOrder[_Run] = TurnOrder(deque())
        self._current: _Run | None = None

    def info(self) -> dict[str, Any]:
        return {
            "engine": self.name,
            "context_size": self._spec.context_size,
            "model_type": "scripted",
            "chat_template": self._spec.option("template"),
            "path": self._spec.path,
            **({"vision": True} if self._spec.option("vision") else {}),
        }

    def submit(self, request: GenerationRequest) -> None:
        request.sampling.validate()
        trigger = self._spec.option("crash_on")
        if trigger and any(trigger in str(m.get("content")) for m in request.messages):
            os.kill(os.getpid(), signal.SIGSEGV)  # a real native crash, as a bad input can cause
        reply = self._reply_for(request)
        pieces = [reply[i : i + self._chunk] for i in range(0, len(reply), self._chunk)]
        # As a model would: no prompt past the context, no reply past the room left.
        room = int(self._spec.context_size) - self._prompt_tokens(request)
        if room < 1:
            self._out.append((request.request_id, [Error(
                "CONTEXT_OVERFLOW", f"The conversation is more than this model's context of "
                f"{self._spec.context_size}."), Done("error")]))
            return
        limit = min(request.sampling.max_tokens, room)
        if request.report_prompt:  # as llama.cpp: the count before the "prefill"
            self._out.append((request.request_id, [PromptRead(self._prompt_tokens(request), 0)]))
        run = _Run(request, pieces[:limit])
        run.next_at += float(self._spec.option("prefill_s", 0.0))
        run.truncated = len(pieces) > limit
        self._runs[request.request_id] = run
        if self.preempts:
            self._order.queue.append(request)

    def _reply_for(self, request: GenerationRequest) -> str:
        text = json.dumps([m.get("content") for m in request.messages], ensure_ascii=False)
        for needle, reply in self._spec.option("replies_for") or ():
            if needle in text:
                return str(reply)
        reply = self._replies[self._turn % len(self._replies)]
        self._turn += 1
        return reply

    def cancel(self, request_id: str) -> None:
        run = self._runs.pop(request_id, None)
        if run is not None:
            self._out.append((request_id, [self._usage(run), Done("cancelled")]))
            if run is self._current:
                self._current = None
            self._order.take_aside(request_id)
            if run.request in self._order.queue:
                self._order.queue.remove(run.request)

    def has_work(self) -> bool:
        return bool(self._runs or self._out)

    def _serial_runs(self) -> dict[str, _Run]:
        """Serial mode: the one run that goes now (a higher-ranked one waiting sets the
        current one aside; core.engines.turn_order)."""
        cur = self._current
        if cur is not None and self._order.should_yield(cur.request):
            self._order.set_aside(cur.request, cur)
            cur = self._current = None
        if cur is None:
            chosen = self._order.next()
            if chosen is None:
                return {}
            request, aside = chosen
            cur = self._current = aside or self._runs[request.request_id]
            if aside is None:  # its prefill starts now, not when it was queued
                cur.next_at = time.perf_counter() + float(self._spec.option("prefill_s", 0.0))
            else:
                cur.next_at = max(cur.next_at, time.perf_counter())
        return {cur.request.request_id: cur}

    def step(self) -> list[tuple[str, list[Event]]]:
        out, self._out = self._out, []
        runs = self._serial_runs() if self.preempts else self._runs
        if runs:
            wait = min(r.next_at for r in runs.values()) - time.perf_counter()
            if wait > 0:  # in short slices: the worker hears a cancel (or quit) between
                time.sleep(min(wait, HEAR_S))
        now = time.perf_counter()
        for rid, run in list(runs.items()):
            if run.next_at > now:
                continue
            run.next_at += self._interval
            events: list[Event] = []
            if run.pieces:
                piece = run.pieces.popleft()
                run.count += 1
                run.first = run.first or now
                if self._emit_log:
                    run.emitted.append(time.monotonic())
                shown, stopped = run.stops.feed(piece)
                if shown:
                    events.append(TextDelta(shown))
                if stopped:
                    run.pieces.clear()
                    events += [self._usage(run), Done("stop", run.stops.matched)]
                    self._finished(self._runs.pop(rid))
                elif not run.pieces:
                    tail = run.stops.finish(cut=run.truncated)
                    if tail:
                        events.append(TextDelta(tail))
                    events += [self._usage(run), Done("length" if run.truncated else "stop")]
                    self._finished(self._runs.pop(rid))
            out.append((rid, events))
        return out

    def _finished(self, run: _Run) -> None:
        if run is self._current:
            self._current = None
        self._order.finished(run.request.request_id)
        if self._emit_log:
            with open(self._emit_log, "a", encoding="utf-8") as log:
                log.write(json.dumps(run.emitted) + "\n")

    @staticmethod
    def _prompt_tokens(request: GenerationRequest) -> int:
        prompt = sum(len(str(m.get("content", ""))) // 4 + 4 for m in request.messages)
        return prompt + len(request.prompt or "") // 4  # a raw prompt (/v1/completions)

    def _usage(self, run: _Run) -> Usage:
        prompt = self._prompt_tokens(run.request)
        if self._spec.option("fixed_timing"):  # snapshot tests need identical stats lines
            return Usage(prompt, 0, run.count, 12.0, 100.0)
        now = time.perf_counter()
        first = run.first or now
        span = now - first
        tps = (run.count - 1) / span if span > 0 and run.count > 1 else 0.0
        return Usage(prompt, 0, run.count, (first - run.started) * 1000.0, tps)

    def close(self) -> None:
        self._runs.clear()

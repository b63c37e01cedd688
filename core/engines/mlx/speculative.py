"""Speculative decoding on the single-stream path (core.engines.speculative holds the
drafters and the acceptance record; this room owns the forward pass and the KV rewind).

A lone greedy request drafts tokens by prompt lookup, or from a draft model when one is
loaded and lookup finds nothing, and verifies them in one pass of the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache, RotatingKVCache, make_prompt_cache

from core.engines.base import EngineLoadError
from core.engines.mlx.checks import load_model
from core.engines.mlx.state import Request, SingleStream
from core.engines.sampling import greedy, vocab_size
from core.engines.speculative import Acceptance, NgramDrafter, accepted, speculable
from core.engines.tool_rows import ToolCallProcessor
from core.events import Event

# Tokens a draft model proposes per pass (it runs one pass per token).
_MODEL_DRAFT = 4


def _rewindable(layer: Any, n: int) -> bool:
    """Whether `n` tokens fed to this cache layer can be trimmed off again: a plain KV
    cache always; a sliding window (RotatingKVCache) only while it has not wrapped."""
    if type(layer) is KVCache:
        return True
    return type(layer) is RotatingKVCache and layer.offset + n < layer.max_size


class Speculation:
    """MlxEngine's speculative decoding (a base class of MlxEngine, which holds the state)."""

    speculative: bool
    acceptance: Acceptance | None
    _model: Any
    _draft_model: Any
    _stream: Any
    _tokenizer: Any
    _vocab_size: int

    def _speculating(self, act: Request) -> bool:
        """Whether this lone request drafts (decided on its first step, then kept up to date)."""
        if act.spec is None:
            act.spec = Acceptance()
            act.spec.on = (self.speculative and act.sampler is greedy
                           and speculable(act.req.sampling)
                           and not any(type(p) is ToolCallProcessor for p in act.processors))
            if act.spec.on:
                act.drafter = NgramDrafter(act.prompt)
                self.acceptance = act.spec
        if not act.spec.on or act.drafter is None:
            return False
        behind = len(act.prompt) + len(act.generated) - len(act.drafter.tokens)
        if behind:  # tokens decoded since the last lookup (in a batch, or plain steps)
            act.drafter.extend(act.generated[-behind:])
        return True

    def _speculate(self, s: SingleStream, out: dict[str, list[Event]]) -> bool:
        """One prompt-lookup step (core.engines.speculative): feed the last token plus the
        drafted ones in one pass, keep the drafts the greedy argmax confirms and the
        model's own next token, trim the rejected ones off the cache. Leaves `s` with its
        last token handed out but not fed (`emitted`), the state the plain path resumes
        from. False when nothing was done (the plain step runs instead)."""
        act = s.act
        events: list[Event] = []
        if not s.emitted:  # the plain path's queued token: hand it out first
            token = s.y.item()
            s.emitted = True
            act.drafter.extend([token])
            finish = self._take_token(act, token, events)
            if finish is not None:
                self._end_single(s, finish, events, out)
                return True
        k = min(act.spec.k, act.max_tokens - len(act.generated))
        if not all(_rewindable(c, k + 1) for c in s.cache):
            k = 0  # a sliding window past its size cannot take drafts back
        draft = act.drafter.draft(k) if k else []
        by_model = not draft and self._draft_model is not None and k > 0
        if by_model:  # nothing to look up: the draft model guesses
            draft = self._model_draft(act, min(k, _MODEL_DRAFT))
        if not draft:
            if not by_model:
                act.spec.miss()
            if events:  # the plain step would read a token nobody queued: queue it here
                with mx.stream(self._stream):
                    s.y = self._advance(s)
                s.emitted = False
                out[act.req.request_id] = events
                return True
            return False
        fed = [act.generated[-1], *draft]
        with mx.stream(self._stream):
            logits = self._model(mx.array(fed)[None], cache=s.cache)
            if s.context is None:
                predicted = mx.argmax(logits[0], axis=-1).tolist()
            else:  # each row's penalties see the history as it would be at that row
                rows = []
                for j in range(len(fed)):
                    row = logits[:, j, :]
                    context = mx.concatenate([s.context, mx.array(fed[:j + 1])])
                    for processor in act.processors:
                        row = processor(context, row)
                    rows.append(mx.argmax(row, axis=-1))
                predicted = mx.concatenate(rows).tolist()
        n = accepted(draft, predicted)
        act.spec.record(len(draft), n)
        if by_model:  # its cache keeps the drafts it fed that were accepted
            fed_ok = min(n, len(draft) - 1)
            for layer in act.draft_cache or ():
                layer.trim(len(draft) - 1 - fed_ok)
            act.draft_fed += fed_ok
        kept = [*draft[:n], predicted[n]]
        for i, token in enumerate(kept):
            finish = self._take_token(act, token, events)
            if finish is not None or i == n:
                # the cache keeps every token before this one, and this one too when it
                # is a draft that ends the reply (it was fed in this pass)
                keep = i + 2 if i < n else i + 1
                for layer in s.cache:
                    layer.trim(len(fed) - keep)
                s.emitted = keep == i + 1
                if s.context is not None:
                    s.context = mx.concatenate([s.context, mx.array(fed[:keep])])
                break
        act.drafter.extend(act.generated[len(act.drafter.tokens) - len(act.prompt):])
        s.y = mx.array(act.generated[-1:])
        if finish is not None:
            self._end_single(s, finish, events, out)
        else:
            out[act.req.request_id] = events
        return True

    def _load_draft(self, path: str | None) -> Any:
        """The draft model named by the "draft_model" option (None without one); it must
        share the model's vocabulary, since its token ids are checked as the model's."""
        if not path:
            return None
        model, tokenizer, config = load_model(Path(path))
        if (vocab_size(config, tokenizer) != self._vocab_size
                or tokenizer.vocab != self._tokenizer.vocab):
            raise EngineLoadError(
                "LOAD_FAILED",
                f"The draft model {Path(path).name} has another vocabulary than this model; "
                "pick a draft model of the same family (same tokenizer).")
        return model

    def _model_draft(self, act: Request, k: int) -> list[int]:
        """Up to `k` greedy tokens from the draft model after the history (prompt +
        generated); its own cache first catches up on whatever it has not seen. Leaves
        `draft_fed` at the history's length (the caller adds the accepted drafts)."""
        history = len(act.prompt) + len(act.generated)
        if act.draft_cache is None:
            act.draft_cache = make_prompt_cache(self._draft_model)
            act.draft_fed = 0
        if not all(_rewindable(c, history - act.draft_fed + k) for c in act.draft_cache):
            return []
        at = act.draft_fed
        behind = (act.prompt[at:] + act.generated if at < len(act.prompt)
                  else act.generated[at - len(act.prompt):])
        out: list[int] = []
        with mx.stream(self._stream):
            logits = self._draft_model(mx.array(behind)[None], cache=act.draft_cache)
            while True:
                y = mx.argmax(logits[:, -1, :], axis=-1)
                out.append(y.item())
                if len(out) == k:
                    break
                logits = self._draft_model(y[None], cache=act.draft_cache)
        act.draft_fed = history
        return out

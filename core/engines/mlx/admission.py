"""Admission: a GenerationRequest becomes a Request the paths can run.

Rendering (chat template, base transcript or raw prompt), tokenising with a cached
conversation's exact ids, the sampler, the logits processors (penalties, a JSON schema's
grammar, a tool call's constraint) and the reply's tail are all decided here, once, so
the single and batch paths only decode.
"""

from __future__ import annotations

import copy
import time
from dataclasses import replace
from typing import Any

from core.engines.base import GenerationRequest, SamplingParams, template_switches
from core.engines.base_prompt import effective_repetition_penalty
from core.engines.mlx.state import Request
from core.engines.reply_tail import ReplyTail
from core.engines.sampling import logits_processors
from core.engines.tool_grammar import ToolGrammars, forces_generic_call, generic_call_messages
from core.engines.tool_rows import ToolCallProcessor
from core.events import Error
from core.parsing.detect import detect_family


class Admission:
    """MlxEngine's admission methods (a base class of MlxEngine, which holds the state)."""

    context_size: int
    base_model: bool
    model_type: str
    _tokenizer: Any
    _template: str | None
    _base: Any
    _prefix: Any
    _kv: Any
    _samplers: Any
    _vocab_size: int
    _grammars: Any
    _tool_grammars: ToolGrammars

    def render_text(self, request: GenerationRequest) -> str:
        """The request's messages under the model's chat template (tools when it takes them);
        a raw prompt (/v1/completions) as it is."""
        if request.prompt is not None:
            return request.prompt
        messages = [dict(m) for m in request.messages]
        if self._base is not None:
            return self._base.render(messages) + request.reply_prefix
        kwargs: dict[str, Any] = template_switches(self._template, request.thinking)
        if request.tools and "tools" in self._template:
            kwargs["tools"] = [dict(t) for t in request.tools]
        return self._tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **kwargs
        ) + request.reply_prefix

    def render_prompt(self, request: GenerationRequest) -> list[int]:
        """Token ids of the request, reusing a cached conversation's exact ids for its history.

        Re-tokenising a model's own reply can split it differently from how it was
        generated, which would end prefix reuse at the first differing token; so where the
        rendered text starts with a cached turn's text, that turn's token ids are kept and
        only the new text is tokenised.
        """
        text = self.render_text(request)
        return self._tokens_for(text, raw=request.prompt is not None)[0]

    def _tokens_for(self, text: str, raw: bool = False) -> tuple[list[int], tuple[tuple[int, int], ...]]:
        """The prompt's ids, and the exact (chars, tokens) boundaries they keep from the
        cache (the ends of earlier prompts and replies), which its own entry inherits.

        A chat template writes its own BOS; a base transcript and a raw prompt get the
        tokenizer's, unless the raw text already starts with it (no doubled BOS)."""
        known = self._prefix.tokens_for(text)
        if known is None and self._kv is not None:  # kv-disk hook: ids a stored file keeps
            known = self._kv.tokens_for(text)
        if known is None:
            special = self._template is None or raw
            bos = getattr(self._tokenizer, "bos_token", None)
            if raw and isinstance(bos, str) and bos and text.startswith(bos):
                special = False
            return list(self._tokenizer.encode(text, add_special_tokens=special)), ()
        ids, chars, marks = known
        return ids + list(self._tokenizer.encode(text[chars:], add_special_tokens=False)), marks

    def _admit(self, request: GenerationRequest, prompt: list[int] | None = None) -> Request:
        submitted = time.perf_counter()  # TTFT includes rendering and tokenising
        sp = request.sampling
        error: Error | None = None
        text: str | None = None
        processors: list[Any] = []
        marks: tuple[tuple[int, int], ...] = ()
        base = self._base if request.prompt is None else None  # raw text: no transcript stops
        generic = forces_generic_call(request, self._tool_grammars.family, self.base_model)
        if generic:  # the reply is one bare JSON call: say so, and list the tools
            request = replace(request, messages=generic_call_messages(
                request.messages, request.tools, request.tool_name))
        try:
            sp.validate()
            processors = self._logits_processors(sp, raw=request.prompt is not None)
            processors += self._tool_processors(request, generic)
            if prompt is None:
                text = self.render_text(request)
                prompt, marks = self._tokens_for(text, raw=request.prompt is not None)
        except (ValueError, TypeError) as exc:
            error = Error("BAD_REQUEST", str(exc))
            prompt = []
        act = Request(
            req=request,
            prompt=prompt,
            max_tokens=min(sp.max_tokens, max(self.context_size - len(prompt), 0)),
            sampler=self._sampler(sp),
            processors=processors,
            # a raw prompt's or a continued reply's first space is part of the text
            detok=_fresh_detokenizer(self._tokenizer, keep_leading_space=(
                request.prompt is not None or bool(request.reply_prefix))),
            # a constrained reply ends where its grammar accepts, never at a turn marker
            tail=ReplyTail((*sp.stop, *self._base.stops)
                           if base and sp.json_schema is None and not generic else sp.stop,
                           trim_start=base is not None and not request.reply_prefix,
                           trim_end=base is not None),
            submitted=submitted,
            text=text,
            marks=marks,
        )
        if error is None and not prompt:
            error = Error("BAD_REQUEST", "The request rendered to an empty prompt.")
        if error is None and len(prompt) >= self.context_size:
            error = Error(
                "CONTEXT_OVERFLOW",
                f"The conversation is {len(prompt)} tokens, over this model's context of "
                f"{self.context_size}; start a new conversation or summarise this one.",
            )
        act.error = error
        return act

    def _sampler(self, sp: SamplingParams) -> Any:
        # One sampler object per plain setting, so a batch that shares settings samples in
        # one call; seeded and logprobs requests get their own (core.engines.sampling).
        return self._samplers.sampler_for(sp)

    def _logits_processors(self, sp: SamplingParams, raw: bool = False) -> list[Any]:
        # A raw prompt gets only the penalties it asks for (no base-model default).
        penalty = effective_repetition_penalty(sp, self.base_model and not raw)
        processors = logits_processors(sp, self._vocab_size, penalty)
        if sp.json_schema is not None:  # last: nothing may lift its mask
            processors.append(self._grammars.processor(sp.json_schema))
        return processors

    def _new_tool_grammars(self) -> ToolGrammars:
        """Tool-call grammars for this model's call format (core.engines.tool_grammar)."""
        tokenizer, vocab = self._tokenizer, self._vocab_size

        def make_tokenizer() -> Any:  # the one response formats use too
            return self._grammars.ll_tokenizer("tools")

        def single_token(text: str) -> int | None:
            ids = tokenizer.encode(text, add_special_tokens=False)
            return ids[0] if len(ids) == 1 else None

        family = detect_family(self._template, self.model_type)
        return ToolGrammars(family, make_tokenizer, lambda t: tokenizer.decode([t]),
                            single_token, vocab)

    def _tool_processors(self, request: GenerationRequest, generic: bool) -> list[Any]:
        """The row's tool-call constraint when it offers tools (none under a JSON
        response_format, whose grammar already holds the whole reply; on a base model,
        only a forced call, which is `generic`: tool_grammar.GENERIC)."""
        if not request.tools or request.sampling.json_schema is not None \
                or (self._base and not generic):
            return []
        guide = self._tool_grammars.guide(request.tools, request.tool_choice, request.tool_name,
                                          generic=generic)
        return [] if guide is None else [ToolCallProcessor(guide, self._vocab_size)]


def _fresh_detokenizer(tokenizer: Any, keep_leading_space: bool = False) -> Any:
    # A shallow copy shares the (expensive) token map; reset gives it its own state.
    detok = copy.copy(tokenizer.detokenizer)
    detok.reset()
    if keep_leading_space and not isinstance(getattr(type(detok), "text", None), property):
        # mlx_lm's BPE and SPM detokenizers drop the first token's leading space while
        # their text is empty: right for a chat reply, wrong for a raw prompt's
        # continuation (" sat" after "The cat"). Text already begun (a placeholder the
        # engine never reads: it takes only last_segment) keeps it.
        detok.text, detok.offset = "\0", 1
    return detok

"""Prompting a base model (one with no chat template) so that it answers like a chat.

A base model continues text; it was never trained on turn markers, so a chat template
(ChatML, Gemma's <start_of_turn>) makes it echo the question or babble until max_tokens.
What it does follow is a transcript: a short preamble, a few example exchanges, then the
conversation in the same shape, ending where the assistant's line begins. Generation
stops at the next turn marker (the model writing the user's next line), and a mild
repetition penalty keeps a small model from looping.

The formats below were measured on the bundled Gemma 3 270M, greedy, max 120 tokens, over
ten everyday questions (bench/base_prompt.py; replies that end by themselves, repeat no
sentence and are right where there is one right answer):

    format                    penalty 1.0   penalty 1.15
    user-assistant (default)  8/10          9/10, mean 15 tokens
    user-assistant zero-shot  6/10          7/10
    q-a                       8/10          9/10
    human-ai                  9/10          9/10
    Gemma's chat turns        -             0/10 (every reply ran to 120 tokens)

The one miss of the best is arithmetic ("three hours is 120 minutes"), which no prompt
fixes in a 270M model. User:/Assistant: is kept among the tied best: its markers are the
plainest for any base model, and the penalty is what ends its one runaway reply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from core.engines.base import SamplingParams

# Applied by the engines to a base model's request that asks for no penalty of its own
# (see effective_repetition_penalty).
BASE_REPETITION_PENALTY = 1.15


@dataclass(frozen=True, slots=True)
class BaseFormat:
    """One way of laying a chat out as plain text for a base model."""

    name: str
    preamble: str
    examples: tuple[tuple[str, str], ...]
    user: str  # what starts a user line, e.g. "User:"
    assistant: str  # what starts an assistant line, e.g. "Assistant:"
    between: str  # text between one exchange and the next
    stops: tuple[str, ...]  # turn markers: the reply ends where one begins

    def render(self, messages: Iterable[Mapping[str, Any]]) -> str:
        """The prompt text: preamble (plus any system message), examples, the chat."""
        msgs = list(messages)
        system = "\n".join(_text(m) for m in msgs if m.get("role") == "system").strip()
        head = self.preamble + (f"\n{system}" if system else "")
        parts = [head.strip() + self.between] if head.strip() else []
        for question, answer in self.examples:
            parts.append(f"{self.user} {question}\n{self.assistant} {answer}{self.between}")
        for m in msgs:
            role, text = m.get("role"), _text(m).strip()
            if role == "system":
                continue
            if role == "assistant":
                parts.append(f"{self.assistant} {text}{self.between}")
            elif role == "tool":
                parts.append(f"{self.user} (tool result) {text}\n")
            else:
                parts.append(f"{self.user} {text}\n")
        return "".join(parts) + self.assistant


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    # OpenAI content parts: keep the text ones
    return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))


_EXAMPLES = (
    ("What is the capital of Japan?", "The capital of Japan is Tokyo."),
    ("How do I make a cup of tea?",
     "Boil water, pour it over a tea bag in a cup, wait three minutes, then take the bag "
     "out. Add milk or sugar if you like."),
    ("Tell me a joke.",
     "Why did the scarecrow win an award? Because he was outstanding in his field."),
)

_PREAMBLE = ("A conversation between a curious user and a helpful assistant. The assistant "
             "answers each question briefly, accurately and politely.")

FORMATS: dict[str, BaseFormat] = {
    f.name: f
    for f in (
        # "User:"/"Assistant:" lines, one blank line between exchanges.
        BaseFormat("user-assistant", _PREAMBLE, _EXAMPLES, "User:", "Assistant:", "\n\n",
                   ("\nUser:", "\nAssistant:", "\n\n\n")),
        # The same without the example exchanges (preamble only).
        BaseFormat("user-assistant-zero-shot", _PREAMBLE, (), "User:", "Assistant:", "\n\n",
                   ("\nUser:", "\nAssistant:", "\n\n\n")),
        # Question/answer pairs, as in reading-comprehension text.
        BaseFormat("q-a", "Questions and short, accurate answers.", _EXAMPLES, "Q:", "A:",
                   "\n\n", ("\nQ:", "\nA:", "\n\n\n")),
        # Forum-style speaker names.
        BaseFormat("human-ai", _PREAMBLE.replace("user", "human").replace("assistant", "AI"),
                   _EXAMPLES, "Human:", "AI:", "\n", ("\nHuman:", "\nAI:", "\n\n")),
    )
}

# Chosen by bench/base_prompt.py on the bundled Gemma 3 270M (figures in the docstring).
DEFAULT_FORMAT = "user-assistant"


def base_format(name: str | None = None) -> BaseFormat:
    """The named format (the default when None); raises KeyError for an unknown name."""
    return FORMATS[name or DEFAULT_FORMAT]


def effective_repetition_penalty(sp: SamplingParams, base_model: bool) -> float:
    """The repetition penalty to apply: a base model's default when the request asks for
    no penalty of any kind; a request that sets one (presence or frequency included, with
    their own windows) gets exactly what it asked for."""
    if base_model and sp.repetition_penalty == 1.0 and not (sp.presence_penalty
                                                            or sp.frequency_penalty):
        return BASE_REPETITION_PENALTY
    return sp.repetition_penalty

"""Chat turn templates by architecture, for GGUF files that carry none in their metadata.

A GGUF without `tokenizer.chat_template` (the bundled Gemma 3 270M among them) is served
as a base model with a transcript prompt (core.engines.base_prompt), which it follows far
better: bench/base_prompt.py measures both. These turn templates remain the engine's
Jinja formatter for such files and the "turns" baseline of that bench.
"""

from __future__ import annotations

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Gemma has no system role: a system message is folded into the first user turn.
GEMMA = (
    "{{ bos_token }}"
    "{% set sys = namespace(text='') %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set sys.text = message['content'] ~ '\n\n' %}"
    "{% else %}"
    "{% set role = 'model' if message['role'] == 'assistant' else 'user' %}"
    "<start_of_turn>{{ role }}\n"
    "{% if role == 'user' and sys.text %}{{ sys.text }}{% set sys.text = '' %}{% endif %}"
    "{{ message['content'] | trim }}<end_of_turn>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

LLAMA3 = (
    "{{ bos_token }}{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{{ message['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

_BY_ARCH = {
    "gemma": (GEMMA, ("<end_of_turn>",)),
    "gemma2": (GEMMA, ("<end_of_turn>",)),
    "gemma3": (GEMMA, ("<end_of_turn>",)),
    "llama": (LLAMA3, ("<|eot_id|>",)),
}


def fallback_template(architecture: str | None) -> tuple[str, tuple[str, ...]]:
    """(template, extra stop strings) for a model whose file carries no template."""
    return _BY_ARCH.get((architecture or "").lower(), (CHATML, ("<|im_end|>",)))


def template_stops(template: str) -> tuple[str, ...]:
    """End-of-turn markers a template uses, so generation stops at the turn's end."""
    markers = ("<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<|return|>")
    return tuple(m for m in markers if m in template)

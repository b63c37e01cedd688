"""Which parser family a model needs, from its chat template (or, without one, its config).

Templates declare the markup they expect the model to produce (tool-call tags in the
system instructions and in how past calls are rendered), so markers are the strongest
evidence; the config's model_type is used only when there is no template at all, because
fine-tunes keep the architecture but change the format.
"""

from __future__ import annotations

_TOOL_CALL = "<tool_call>"

# Order matters: GLM and Qwen3-Coder templates also contain <tool_call>.
_MARKERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gpt-oss", ("<|channel|>",)),
    ("minimax", ("<minimax:tool_call>",)),
    ("kimi", ("<|tool_calls_section_begin|>", "<|tool_call_begin|>")),
    ("deepseek", ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "tool▁sep")),
    ("glm", ("<arg_key>",)),
    ("qwen3-coder", ("<function=",)),
    ("lfm2", ("<|tool_call_start|>",)),
    ("mistral", ("[TOOL_CALLS]", "[AVAILABLE_TOOLS]")),
    ("llama3", ("<|python_tag|>",)),
    (_TOOL_CALL, (_TOOL_CALL,)),
    ("llama3", ("<|start_header_id|>",)),
    ("gemma", ("tool_code", "<start_of_turn>")),
)

_MODEL_TYPES = {
    "gpt_oss": "gpt-oss",
    "minimax": "minimax",
    "minimax_m2": "minimax",
    "kimi_k2": "kimi",
    "deepseek_v2": "deepseek",
    "deepseek_v3": "deepseek",
    "deepseek_v32": "deepseek",
    "glm4": "glm",
    "glm4_moe": "glm",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3",
    "qwen3_next": "qwen3",
    "qwen2": "hermes",
    "qwen2_moe": "hermes",
    "llama": "llama3",
    "mistral": "mistral",
    "mistral3": "mistral",
    "ministral": "mistral",
    "lfm2": "lfm2",
    "lfm2_moe": "lfm2",
    "gemma": "gemma",
    "gemma2": "gemma",
    "gemma3": "gemma",
    "gemma3_text": "gemma",
    "gemma3n": "gemma",
}


def detect_family(chat_template: str | None, model_type: str | None) -> str:
    """The parser family for a model; "plain" when nothing known is declared."""
    if chat_template:
        for family, markers in _MARKERS:
            if any(m in chat_template for m in markers):
                if family == _TOOL_CALL:
                    return "qwen3" if "<think>" in chat_template else "hermes"
                return family
        return "plain"
    if model_type:
        return _MODEL_TYPES.get(model_type.lower(), "plain")
    return "plain"


def opens_reasoning(chat_template: str | None) -> bool:
    """Whether the generation prompt ends inside an open <think> block.

    Then the stream starts as reasoning (StreamParser(..., in_reasoning=True)). Read from
    the template's add_generation_prompt branch: an opening <think> with no closing one
    there (Qwen3's enable_thinking=false branch writes an empty, closed block).
    """
    if not chat_template:
        return False
    at = chat_template.rfind("add_generation_prompt")
    if at == -1:
        return False
    tail = chat_template[at:]
    end = tail.find("endif")
    if end != -1:
        tail = tail[:end]
    return "<think>" in tail and "</think>" not in tail

"""detect_family reads the markers a chat template declares; opens_reasoning its prompt end."""

from __future__ import annotations

import pytest

from core.parsing import FAMILIES, detect_family, family_uses_think, opens_reasoning

# Excerpts of the published chat templates, enough to carry each family's markers.
QWEN3 = (
    "{%- if tools %}For each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>{%- endif %}"
    "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
    "        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}\n{%- endif %}"
)
QWEN3_THINKING = (
    "<tool_call>\n{\"name\": <function-name>}</tool_call> <think> {%- if add_generation_prompt %}"
    "\n    {{- '<|im_start|>assistant\\n<think>\\n' }}\n{%- endif %}"
)
QWEN25 = "<|im_start|>system\n<tools>{{ tools }}</tools> <tool_call>\n{...}\n</tool_call>"
QWEN3_CODER = (
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n</function>\n</tool_call>"
)
GLM45 = (
    "<tool_call>{{ tc.name }}\n{% for k, v in tc.arguments.items() %}<arg_key>{{ k }}</arg_key>"
    "\n<arg_value>{{ v }}</arg_value>\n{% endfor %}</tool_call>{%- if add_generation_prompt -%}"
    "<|assistant|>{{- '\\n<think></think>' if (enable_thinking is defined and not "
    "enable_thinking) else '' -}}{%- endif -%}"
)
DEEPSEEK_R1 = (
    "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + "
    "'<｜tool▁sep｜>' + tool['function']['name']}}"
    "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"
)
KIMI_K2 = "<|tool_calls_section_begin|>{% for tc in m.tool_calls %}<|tool_call_begin|>"
GPT_OSS = "<|start|>assistant<|channel|>final<|message|>{{ content }}<|end|>"
LLAMA31 = (
    "<|start_header_id|>ipython<|end_header_id|>{{- '<|python_tag|>' + tool_call.name + "
    "'.call(' }}"
)
LLAMA32_NO_TAG = "<|start_header_id|>assistant<|end_header_id|>\n\n"
MISTRAL = "[AVAILABLE_TOOLS] {{ tools|tojson }}[/AVAILABLE_TOOLS]{{ '[TOOL_CALLS]' }}"
LFM2 = "List of tools: <|tool_list_start|>[...]<|tool_list_end|> <|tool_call_start|>"
MINIMAX = "<minimax:tool_call>\n<invoke name=\"tool-name\">{%- if add_generation_prompt -%}" \
    "{{- ']~b]ai' ~ '\\n' ~ '<think>' ~ '\\n' }}{%- endif -%}"
GEMMA3 = "{{ '<start_of_turn>' + role + '\\n' + content | trim + '<end_of_turn>\\n' }}"
CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"
CHATML_THINK = CHATML + " <think> {%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"


@pytest.mark.parametrize(
    ("template", "family"),
    [
        (QWEN3, "qwen3"),
        (QWEN3_THINKING, "qwen3"),
        (QWEN25, "hermes"),
        (QWEN3_CODER, "qwen3-coder"),
        (GLM45, "glm"),
        (DEEPSEEK_R1, "deepseek"),
        (KIMI_K2, "kimi"),
        (GPT_OSS, "gpt-oss"),
        (LLAMA31, "llama3"),
        (LLAMA32_NO_TAG, "llama3"),
        (MISTRAL, "mistral"),
        (LFM2, "lfm2"),
        (MINIMAX, "minimax"),
        (GEMMA3, "gemma"),
        (CHATML, "plain"),
    ],
)
def test_family_from_template_markers(template: str, family: str) -> None:
    # model_type is deliberately misleading: the template's markers decide.
    assert detect_family(template, "llama") == family


@pytest.mark.parametrize(
    ("model_type", "family"),
    [("qwen3_moe", "qwen3"), ("gpt_oss", "gpt-oss"), ("glm4_moe", "glm"), ("Gemma3", "gemma"),
     ("kimi_k2", "kimi"), ("some_new_arch", "plain"), (None, "plain")],
)
def test_family_from_model_type_without_template(model_type, family) -> None:
    assert detect_family(None, model_type) == family
    assert detect_family("", model_type) == family


def test_every_detected_family_is_parseable() -> None:
    for template in (QWEN3, GLM45, GPT_OSS, CHATML, None):
        assert detect_family(template, None) in FAMILIES


@pytest.mark.parametrize(
    ("template", "opens"),
    [(QWEN3, False), (QWEN3_THINKING, True), (DEEPSEEK_R1, True), (GLM45, False),
     (MINIMAX, True), (CHATML_THINK, False), (None, False), (GPT_OSS, False)],
)
def test_opens_reasoning_from_generation_prompt(template, opens) -> None:
    assert opens_reasoning(template) is opens


def test_family_uses_think() -> None:
    assert family_uses_think("qwen3") and family_uses_think("gpt-oss")
    assert not family_uses_think("hermes") and not family_uses_think("gemma")


def test_bundled_gemma_gguf_detects_gemma(bundled_gguf) -> None:
    """The embedded default model: its GGUF carries no chat template, only its architecture,
    so detection falls back to model_type and still picks gemma."""
    # The app's own header reader (well under a second); gguf.GGUFReader builds a numpy view
    # per element of the 262k-token vocabulary: ~20 CPU seconds, the unit suite's costliest.
    from core.engines.gguf_import.reader import GGUFFile

    gguf = GGUFFile(bundled_gguf)
    model_type = gguf.get("general.architecture")
    template = gguf.get("tokenizer.chat_template")
    assert model_type == "gemma3"
    assert detect_family(template, model_type) == "gemma"
    assert opens_reasoning(template) is False

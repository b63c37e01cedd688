"""Tool calls constrained while decoding: once the model opens a call, its JSON must fit.

A request that offers tools decodes its free text unconstrained. When the model writes its
family's call opener (Qwen/Hermes `<tool_call>`, Llama 3.1 `<|python_tag|>`, Mistral
`[TOOL_CALLS]`, Kimi `<|tool_call_begin|>`), an llguidance matcher takes over: the body
must be `{"name": <one of the offered names>, "arguments": <that tool's parameters schema>}`
(Llama: "parameters"; Mistral v3: an array of those; v11+: `name[ARGS]{..}`; Kimi:
`functions.name:N<|tool_call_argument_begin|>{..}`) followed by the closer, or by the end token
where the call ends the message, and every token it does not allow is masked. When the
call closes, the text is free again (a reply may hold several calls). XML-ish and pythonic
formats (qwen3_coder, glm, gemma's tool_code, ...) are parsed after the fact, unconstrained. With tool_choice
"required" (or one named tool) the reply must start with a call: the opener is part of
the grammar from the first token.

Why drive the trigger from the decoded text rather than llguidance's lazy grammars (its
StructTag): the opener is a special token in some vocabularies and plain text in others
(the test models', Gemma's), and free text then costs nothing per token: no matcher runs,
no mask is computed or applied until the call opens.

`ToolCallGuide` is one request's state and knows no engine; the MLX engine wraps it as a
row's MaskedProcessor (core.engines.tool_rows, so a constrained row shares a batch with
free ones), llama.cpp as a logits processor on numpy scores (`LlamaToolProcessor`). Both
pair calls with tokens as core.engines.grammar does: each call samples the next token,
and (after the first) the last token of the context it is given was sampled by the
previous call.
"""

from __future__ import annotations

import json
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class ToolFormat:
    """How a model family writes one call: opener, JSON body, closer.

    An empty closer means the call ends the message: after the body the grammar allows only
    the end-of-message token (Llama's <|eom_id|>/<|eot_id|>, Mistral's </s>), so the matcher
    stays on until it is sampled. `args_key` names the arguments member ("parameters" for
    Llama). `array` makes the body a JSON array of calls (Mistral v3/v7); `named` writes each
    call as `name[ARGS]{arguments}` after the opener (Mistral v11+).
    """

    opener: str
    closer: str
    args_key: str = "arguments"
    array: bool = False
    named: str = ""
    name_prefix: str = ""  # Kimi writes functions.<name>
    indexed: bool = False  # Kimi follows the name with :<call index>
    section: str = ""  # a marker a forced reply writes before the opener (Kimi's section)
    # Reasoning blocks (open, close) as the family's parser reads them: a call opened inside
    # one is only thought about and stays free (constrained, its end token would end the reply).
    thinks: tuple[tuple[str, str], ...] = (("<think>", "</think>"),)


_MISTRAL_THINKS = (("<think>", "</think>"), ("[THINK]", "[/THINK]"))  # Magistral's too
# Families whose calls are JSON after a literal opener (closed by a marker or by the end of
# the message). Others (pythonic, XML-ish, sectioned formats) are parsed after the fact.
FORMATS: dict[str, ToolFormat] = {
    "hermes": ToolFormat("<tool_call>", "</tool_call>"),
    "qwen3": ToolFormat("<tool_call>", "</tool_call>"),
    "llama3": ToolFormat("<|python_tag|>", "", args_key="parameters"),
    "mistral": ToolFormat("[TOOL_CALLS]", "", array=True, thinks=_MISTRAL_THINKS),
    "kimi": ToolFormat("<|tool_call_begin|>", "<|tool_call_end|>",
                       named="<|tool_call_argument_begin|>", name_prefix="functions.",
                       indexed=True, section="<|tool_calls_section_begin|>"),
}
# Mistral v11+ tokenizers (those with an [ARGS] token) write `[TOOL_CALLS]name[ARGS]{..}`.
MISTRAL_NAMED = ToolFormat("[TOOL_CALLS]", "", named="[ARGS]", thinks=_MISTRAL_THINKS)
# A forced call on a model whose own format cannot be forced (a base model, a family whose
# calls are not JSON between markers): the whole reply is one bare JSON call object, as
# llama.cpp's server does for any model; the worker reads it with the "json-call" reader.
GENERIC = ToolFormat("", "", thinks=())


def forces_generic_call(request: Any, family: str, base_model: bool) -> bool:
    """Whether this request's reply is a GENERIC call: it forces a call (tool_choice
    "required" or a named tool) on a chat request, and the model has no format of its own
    to force (a base model is prompted as a transcript, where no format applies)."""
    if not request.tools or request.prompt is not None or request.sampling.json_schema is not None:
        return False
    if request.tool_choice != "required" and request.tool_name is None:
        return False
    return base_model or tool_format(family) is None


def generic_call_messages(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]],
                          tool_name: str | None) -> tuple[dict[str, Any], ...]:
    """The messages with a system note that says what to write: the grammar makes the
    reply a well-formed call whatever the model knows, this makes it a sensible one."""
    listed = []
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, dict) else {}
        if not isinstance(fn, dict) or (tool_name is not None and fn.get("name") != tool_name):
            continue
        listed.append(json.dumps({k: fn[k] for k in ("name", "description", "parameters") if k in fn}))
    note = ("Answer by calling a tool: write one JSON object "
            '{"name": <the tool\'s name>, "arguments": {<its parameters>}} and nothing else. '
            "Tools:\n" + "\n".join(listed))
    return ({"role": "system", "content": note}, *messages)

_NO_SPACES = {"whitespace_flexible": False}


def tool_format(family: str) -> ToolFormat | None:
    """The constrained call format of a family, or None when its calls go unconstrained."""
    return FORMATS.get(family)


def calls_schema(tools: Sequence[dict[str, Any]], only: str | None = None,
                 args_key: str = "arguments") -> dict[str, Any]:
    """The JSON schema of one call body: a name offered and that tool's arguments, in order.

    `only` keeps the one tool a request named in tool_choice; `args_key` is the member the
    family writes the arguments in. ValueError names a tool whose definition cannot be used.
    """
    options = []
    for i, tool in enumerate(tools):
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not name:
            raise ValueError(f"tools[{i}] has no function name")
        if only is not None and name != only:
            continue
        params = fn.get("parameters")
        if params is None:
            params = {"type": "object"}
        if not isinstance(params, dict):
            raise ValueError(f"tools[{i}] ({name}): 'parameters' must be a JSON schema object")
        options.append({"type": "object",
                        "properties": {"name": {"const": name}, args_key: params},
                        "required": ["name", args_key], "additionalProperties": False})
    if not options:
        raise ValueError(f"tool_choice names {only!r}, which is not among the offered tools")
    body = options[0] if len(options) == 1 else {"anyOf": options}
    return {**body, "x-guidance": _NO_SPACES}


def _lark_literal(text: str, token: int | None) -> str:
    """A Lark item matching `text` as written out, or as its one special token."""
    literal = json.dumps(text)
    return f"({literal} | <[{token}]>)" if token is not None else literal


def call_grammar(fmt: ToolFormat, schema: dict[str, Any], *, with_opener: bool,
                 token_of: Callable[[str], int | None]) -> str:
    """The Lark grammar of one call (after its opener, or including it when forced). With
    no closer the grammar ends at the body: the matcher then allows only an end token.
    `token_of` gives the one special token spelling a marker, if the vocabulary has it."""
    def lit(text: str) -> str:
        return _lark_literal(text, token_of(text))

    head = ""
    if with_opener and fmt.opener:
        head = (lit(fmt.section) + " " if fmt.section else "") + lit(fmt.opener) + " "
    end = f' "\\n"? {lit(fmt.closer)}' if fmt.closer else ""
    if fmt.named:  # name[ARGS]{arguments} (Kimi: functions.name:0<|..argument_begin|>{..})
        options = schema.get("anyOf", [schema])
        calls = " | ".join(f"call{i}" for i in range(len(options)))
        suffix = ' ":" /[0-9]{1,4}/' if fmt.indexed else ""  # bounded: a call's index
        rules = "".join(
            f'call{i}: {json.dumps(fmt.name_prefix + o["properties"]["name"]["const"])}'
            f'{suffix} {lit(fmt.named)} args{i}\n'
            f'args{i}: %json {json.dumps({**o["properties"][fmt.args_key], "x-guidance": _NO_SPACES})}\n'
            for i, o in enumerate(options))
        return f"%llguidance {{}}\nstart: {head}({calls}){end}\n{rules}"
    if fmt.array:
        schema = {"type": "array", "items": {k: v for k, v in schema.items() if k != "x-guidance"},
                  "minItems": 1, "x-guidance": _NO_SPACES}
    lead = '"\\n"? ' if fmt.opener else ""  # a generic call is the reply: it starts with "{"
    return ("%llguidance {}\n"
            f'start: {head}{lead}body{end}\n'
            f"body: %json {json.dumps(schema)}\n")


class ToolCallGuide:
    """One request's tool-call constraint: free text, or a call being written."""

    __slots__ = ("_compile", "_fmt", "_text", "_tokenize", "_tail", "_thinking", "matcher",
                 "calls")

    def __init__(self, fmt: ToolFormat, compile_call: Callable[[bool], Any],
                 token_text: Callable[[int], str], tokenize: Callable[[str], list[int]],
                 *, forced: bool) -> None:
        self._fmt = fmt
        self._compile = compile_call  # (with_opener) -> a fresh llguidance matcher
        self._text = token_text
        self._tokenize = tokenize
        self._tail = ""  # the end of the free text, where an opener may be forming
        self._thinking = ""  # the close marker of the reasoning block the text is inside
        self.calls = 0  # calls opened so far (for tests and status)
        self.matcher: Any = compile_call(True) if forced else None
        if forced:
            self.calls = 1

    @property
    def constrained(self) -> bool:
        return self.matcher is not None

    def advance(self, token: int) -> None:
        """Account a sampled token: feed the open call, or look for the opener."""
        if self.matcher is not None:
            # Without a closer llguidance stops as the body closes (nothing else may follow);
            # its mask then allows only the end tokens, so the call ends with the next token.
            ended = self.matcher.is_stopped()
            ok = self.matcher.consume_token(token)
            done = self.matcher.is_accepting() if self._fmt.closer else ended
            if not ok or done:  # the call closed (or, never expected, broke off)
                self.matcher = None
                self._tail = ""
            return
        opener = self._fmt.opener
        if not opener:  # a GENERIC call is the whole reply: nothing opens another
            return
        text = self._tail + self._text(token)
        thinks = self._fmt.thinks
        while True:  # the parser's view: <tool_call> inside <think>...</think> is reasoning
            if self._thinking:
                close = self._thinking
                end = text.find(close)
                if end < 0:
                    self._tail = text[-(len(close) - 1):]
                    return
                self._thinking = ""
                text = text[end + len(close):]
                continue
            at = text.find(opener)
            first: tuple[int, str, str] | None = None
            for think_open, think_close in thinks:
                i = text.find(think_open)
                if i >= 0 and (at < 0 or i < at) and (first is None or i < first[0]):
                    first = (i, think_open, think_close)
            if first is not None:
                self._thinking = first[2]
                text = text[first[0] + len(first[1]):]
                continue
            break
        if at < 0:
            keep = max(len(opener), *(len(o) for o, _ in thinks)) - 1
            self._tail = text[-keep:]
            return
        self._tail = ""
        self.calls += 1
        matcher = self._compile(False)
        rest = text[at + len(opener):]
        if rest:  # the token that ended the opener carried the call's first characters
            ids = self._tokenize(rest)
            if matcher.try_consume_tokens(ids) < len(ids):
                return  # they already break the format: this call goes unconstrained
        self.matcher = matcher

    def allowed(self) -> bytes | None:
        """The matcher's bitmask of allowed next tokens, or None while the text is free."""
        return None if self.matcher is None else self.matcher.compute_bitmask()


def mask_of(bits: bytes, vocab_size: int) -> np.ndarray:
    """A bool mask over `vocab_size` ids from llguidance's little-endian bitmask."""
    allowed = np.unpackbits(np.frombuffer(bits, dtype=np.uint8), bitorder="little")
    allowed = allowed[:vocab_size].astype(bool)
    if allowed.shape[0] < vocab_size:
        allowed = np.pad(allowed, (0, vocab_size - allowed.shape[0]))
    return allowed


class ToolGrammars:
    """Builds ToolCallGuides for one model: its llguidance tokenizer made on first use,
    token texts cached, compiled grammars reused (a chat sends the same tools each turn)."""

    def __init__(self, family: str, make_tokenizer: Callable[[], Any],
                 token_text: Callable[[int], str], single_token: Callable[[str], int | None],
                 vocab_size: int) -> None:
        self.family = family
        self.format = tool_format(family)
        if family == "mistral" and single_token(MISTRAL_NAMED.named) is not None:
            self.format = MISTRAL_NAMED  # a v11+ tokenizer: the parser reads name[ARGS]{..}
        self.vocab_size = vocab_size
        self._make_tokenizer = make_tokenizer
        self._token_text = token_text
        self._single_token = single_token  # the id of the one token spelling a marker
        self._texts: dict[int, str] = {}
        self._ll: Any = None
        self._grammars: OrderedDict[tuple[str, bool, str], str] = OrderedDict()

    def _tokenizer(self) -> Any:
        if self._ll is None:
            self._ll = self._make_tokenizer()
        return self._ll

    def text(self, token: int) -> str:
        known = self._texts.get(token)
        if known is None:
            known = self._texts[token] = self._token_text(token)
        return known

    def guide(self, tools: Sequence[dict[str, Any]], tool_choice: str = "auto",
              tool_name: str | None = None, *, generic: bool = False) -> ToolCallGuide | None:
        """A fresh guide for a request offering `tools`; None where nothing is constrained
        (no tools, tool_choice "none", or a family whose calls are not JSON between
        markers). tool_choice "required", or `tool_name` (the one tool a request named),
        makes the reply start with a call; `generic` (forces_generic_call) makes the whole
        reply one bare JSON call (GENERIC). ValueError, with a sentence, for a forced call
        whose tools' schemas cannot be enforced (left free, a tool whose schema cannot be
        enforced takes any JSON object)."""
        fmt = GENERIC if generic else self.format
        forced = generic or tool_choice == "required" or tool_name is not None
        if not tools or tool_choice == "none":
            return None
        if fmt is None:
            if forced:  # the engines ask for `generic` here; kept for any other caller
                raise ValueError("tool_choice: this model's tool-call format cannot be forced "
                                 "while decoding; send tool_choice \"auto\"")
            return None
        try:
            schema = calls_schema(tools, tool_name, fmt.args_key)
            self._matcher(schema, True, fmt)  # a bad schema is found now, not mid-reply
        except ValueError:
            if forced:
                raise
            # Left free to call or not, the model still gets well-formed calls: a tool whose
            # parameters cannot be enforced (an MCP server's, say) takes any JSON object.
            schema = calls_schema(self._relaxed(tools), args_key=fmt.args_key)
            self._matcher(schema, True, fmt)
        return ToolCallGuide(fmt, lambda with_opener: self._matcher(schema, with_opener, fmt),
                             self.text, self._tokenizer().tokenize_str, forced=forced)

    def _matcher(self, schema: dict[str, Any], with_opener: bool,
                 fmt: ToolFormat | None = None) -> Any:
        """A fresh matcher for one call under `schema` (its Lark text cached); ValueError
        with llguidance's reason when the schema cannot be enforced."""
        import llguidance

        fmt = fmt or self.format
        assert fmt is not None
        key = (json.dumps(schema, sort_keys=True), with_opener, fmt.opener)
        grammar = self._grammars.get(key)
        if grammar is None:
            grammar = call_grammar(fmt, schema, with_opener=with_opener,
                                   token_of=self._single_token)
            self._grammars[key] = grammar
            while len(self._grammars) > 16:
                self._grammars.popitem(last=False)
        else:
            self._grammars.move_to_end(key)
        matcher = llguidance.LLMatcher(self._tokenizer(), grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(f"tools: these tool schemas cannot be enforced: {matcher.get_error()}")
        return matcher

    def _relaxed(self, tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """`tools` with each unenforceable `parameters` replaced by any JSON object."""
        out = []
        for tool in tools:
            try:
                self._matcher(calls_schema([tool], args_key=self.format.args_key), False)
                out.append(tool)
            except ValueError:
                fn = tool.get("function", tool) if isinstance(tool, dict) else {}
                fn = {**fn, "parameters": {"type": "object"}} if isinstance(fn, dict) else fn
                out.append({**tool, "function": fn} if "function" in tool else fn)
        return out


class LlamaToolProcessor:
    """A llama-cpp-python logits processor (numpy scores in id order) doing the same."""

    def __init__(self, guide: ToolCallGuide, vocab_size: int) -> None:
        self.guide = guide
        self.vocab_size = vocab_size
        self.started = False

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if self.started:
            self.guide.advance(int(input_ids[-1]))
        self.started = True
        bits = self.guide.allowed()
        if bits is None:
            return scores
        return np.where(mask_of(bits, scores.shape[-1]), scores, -np.inf).astype(scores.dtype)


class LlamaProcessors(list):
    """The logits processors of one llama.cpp request. llama-cpp-python's
    create_completion adds a logit-bias processor with `processors = processors.extend(...)`,
    which for a plain list leaves None (every processor dropped); extend returns the list."""

    def extend(self, other: Any) -> LlamaProcessors:  # type: ignore[override]
        super().extend(other)
        return self


def llama_tool_grammars(llm: Any, family: str) -> ToolGrammars:
    """ToolGrammars over a llama_cpp.Llama's vocabulary (its llguidance tokenizer is built
    on the first request that offers tools: about a second for a 262k vocabulary)."""

    def make_tokenizer() -> Any:
        import llama_cpp
        import llguidance.llamacpp

        vocab = llm._model.vocab
        ends = {llama_cpp.llama_vocab_eos(vocab), llama_cpp.llama_vocab_eot(vocab)}
        with warnings.catch_warnings():  # it calls llama_token_get_attr, deprecated, per token
            warnings.simplefilter("ignore", DeprecationWarning)
            return llguidance.llamacpp.lltokenizer_from_vocab(
                vocab, n_vocab=llm.n_vocab(), eos_token=sorted(t for t in ends if t >= 0))

    def single_token(text: str) -> int | None:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        return ids[0] if len(ids) == 1 else None

    def token_text(token: int) -> str:
        return llm.detokenize([token], special=True).decode("utf-8", "replace")

    return ToolGrammars(family, make_tokenizer, token_text, single_token, llm.n_vocab())

"""Which replica a request without a session goes to: the one that served its prefix.

A request with a session (the app's conversations, `prompt_cache_key`, Claude Code's
metadata.user_id) sticks to the worker holding its KV cache (ModelGroup.affinity). One
without went to the least recently used replica, so an agent's next turn, or a second
agent with the same system prompt and tools, landed on the replica that held none of its
8,000-28,000-token prefix and prefilled it all again. The prefix key names what such
requests share at their start, where chat templates render it: the tools and the first
message (an agent's system prompt; a chat's first question), or a raw prompt's first
characters. Hashing the whole of them is cheap next to tokenizing them.
"""

from __future__ import annotations

import hashlib
import json

from core.engines.base import GenerationRequest

RAW_CHARS = 4096  # of a raw prompt (/v1/completions): its start is its prefix


def prefix_key(request: GenerationRequest) -> str:
    """A key shared by requests whose prompts start alike (tools + first message)."""
    head: object = request.prompt[:RAW_CHARS] if request.prompt is not None else [
        request.tools, request.messages[:1]]
    data = json.dumps(head, sort_keys=True, default=str, ensure_ascii=False)
    return "prefix:" + hashlib.blake2b(data.encode("utf-8", "surrogatepass"),
                                       digest_size=12).hexdigest()

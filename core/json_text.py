"""JSON text from outside (a model's tool call, a client's arguments, a remote's stream)
read so that every way it can be wrong is a ValueError.

json.loads raises RecursionError, not ValueError, for arrays or objects nested about a
thousand deep, and a model can write that many brackets within its token budget; callers
that catch ValueError to turn bad JSON into an error message would crash instead.
"""

from __future__ import annotations

import json
from typing import Any


def loads(text: str | bytes) -> Any:
    """json.loads, with nesting too deep to parse raised as ValueError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None

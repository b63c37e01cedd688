"""Where the Hugging Face token comes from, and how it is kept out of logs.

The token is looked up the way huggingface_hub does (HF_TOKEN, then the token stored by
`hf auth login`) and handed to the client per call; llmdeck never stores it. A logging
filter masks anything token-shaped, so a stray debug line cannot leak it.
"""

from __future__ import annotations

import logging
import re

_TOKEN_SHAPE = re.compile(r"hf_[A-Za-z0-9]{8,}")
MASK = "hf_***"


def get_token() -> str | None:
    """The user's token from HF_TOKEN or huggingface_hub's stored token, if any."""
    from huggingface_hub import get_token as hf_get_token

    token = hf_get_token()
    return token or None


def redact(text: str, token: str | None = None) -> str:
    """`text` with the token (and anything shaped like one) masked."""
    if token:
        text = text.replace(token, MASK)
    return _TOKEN_SHAPE.sub(MASK, text)


class RedactTokens(logging.Filter):
    """A logging filter that masks tokens in every record it passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        token = get_token()
        message = record.getMessage()
        cleaned = redact(message, token)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def install_log_redaction() -> None:
    """Mask tokens in every record the root logger's handlers write (idempotent).

    Handler filters see records from every child logger (huggingface_hub.*, httpx2),
    which logger filters would not; call it after logging is configured.
    """
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactTokens) for f in handler.filters):
            handler.addFilter(RedactTokens())

"""Text from outside (a model, a tool, a remote server, the Hub) made safe to draw.

A terminal obeys escape sequences wherever they appear in what it is sent. A reply that
holds ESC ] 52 ; c ; <base64> BEL writes the person's clipboard, ESC ] 0 ; sets the
window title, ESC [ 2 J clears the screen; a document or a web page a tool fetched can
plant such a sequence for the model to repeat. Rich drops BEL, BS, VT, FF and CR from
text but passes ESC on, and Textual's Markdown draws what it is given: so every widget
that shows outside text draws it through `visible`, which turns each control character
but newline and tab into its Control Picture (ESC shows as ␛): seen, never obeyed. It lives in core because the command line prints outside text
too (`llmdeck models search`, `llmdeck workers`); the TUI's faces are in tui/terminal_text.py.
"""

from __future__ import annotations

# C0 controls as their Control Pictures (U+2400 + code), DEL as ␡, C1 controls (which
# some terminals also obey: 0x9B is a one-byte CSI) as the replacement character. CR is
# dropped: Windows line ends should not show a symbol at every line's end.
_SHOWN = {code: 0x2400 + code for code in range(0x20) if code not in (0x09, 0x0A, 0x0D)}
_SHOWN |= {0x0D: None, 0x7F: 0x2421}
_SHOWN |= {code: 0xFFFD for code in range(0x80, 0xA0)}


def visible(text: str) -> str:
    """`text` with every control character but newline and tab shown, not sent."""
    return text.translate(_SHOWN)

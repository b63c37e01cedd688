"""The colour themes llmdeck ships: dark, light and high contrast.

Colours are chosen to survive a 256-colour terminal (TERM=xterm-256color): Textual
downsamples truecolor, so each pair keeps a strong contrast after quantisation.
"""

from __future__ import annotations

from textual.theme import Theme

DARK = Theme(
    name="llmdeck-dark",
    primary="#5fafff",
    secondary="#af87ff",
    accent="#ffaf5f",
    warning="#ffd75f",
    error="#ff5f5f",
    success="#5fd787",
    foreground="#d0d0d0",
    background="#1c1c1c",
    surface="#262626",
    panel="#303030",
    dark=True,
)

LIGHT = Theme(
    name="llmdeck-light",
    primary="#005fd7",
    secondary="#8700af",
    accent="#d75f00",
    warning="#af8700",
    error="#d70000",
    success="#008700",
    foreground="#1c1c1c",
    background="#eeeeee",
    surface="#e4e4e4",
    panel="#d0d0d0",
    dark=False,
)

HIGH_CONTRAST = Theme(
    name="llmdeck-high-contrast",
    primary="#ffff00",
    secondary="#00ffff",
    accent="#ff00ff",
    warning="#ffff00",
    error="#ff0000",
    success="#00ff00",
    foreground="#ffffff",
    background="#000000",
    surface="#000000",
    panel="#121212",
    dark=True,
)

THEMES = (DARK, LIGHT, HIGH_CONTRAST)
THEME_NAMES = tuple(t.name for t in THEMES)

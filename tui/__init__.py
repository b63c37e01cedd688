"""The Textual front end.

Screen refresh rate: Textual paints at most TEXTUAL_FPS frames a second (default 60) from a
timer that, after a frame that took longer than one period (a chat relayout under a long
streamed reply takes ~20 ms), skips to the period after next. A key typed just then waited
for up to three periods plus the next relayout before it was painted (p95 57 ms while
streaming 1,000 tok/s). At 240 the wait after a slow frame is a few milliseconds; frames
are still painted only when something changed, and the stream itself keeps its own rate
(tui.widgets.message_view.FRAME_S). Set here, before anything imports Textual, which
reads it once at import; a TEXTUAL_FPS in the environment wins.
"""

import os

os.environ.setdefault("TEXTUAL_FPS", "240")

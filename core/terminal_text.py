"""Kept path: `visible` now lives in core.wire.text (the UI and the service both draw
outside text through it); core code that imports it from here keeps working."""

from core.wire.text import visible

__all__ = ["visible"]

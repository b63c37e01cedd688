"""A footer that rebuilds its keys only when the keys it would show change.

Textual's Footer removes and mounts all of its keys again on every "bindings updated"
signal, and the screen sends one at every focus change, resize, turn start and end, and
attached file. Most of those leave the footer's keys exactly as they were, yet each rebuild
lays the footer out again: about a tenth of the CPU a chat exchange costs. This footer
compares what it would show (keys, labels, enabled, tooltips, groups) with what it shows
and rebuilds only on a difference, so what is drawn is the same as Textual's footer.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer


class QuietFooter(Footer):
    """Footer, rebuilt only when the shown keys differ from the last ones built."""

    _shown: tuple[object, ...] | None = None

    def _wanted(self) -> tuple[object, ...]:
        """Everything Footer.compose reads, as a comparable value."""
        app = self.app
        shown = tuple(
            (key, binding.key, binding.action, binding.description, binding.show,
             app.get_key_display(binding), enabled, tooltip, binding.tooltip,
             id(binding.group) if binding.group else None,
             binding.group.description if binding.group else None,
             binding.group.compact if binding.group else None)
            for key, (_, binding, enabled, tooltip) in self.screen.active_bindings.items())
        return (shown, self.show_command_palette, app.ENABLE_COMMAND_PALETTE)

    def compose(self) -> ComposeResult:
        if self._bindings_ready:
            self._shown = self._wanted()
        yield from super().compose()

    def bindings_changed(self, screen: Screen) -> None:
        self._bindings_ready = True
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen:
            self.call_after_refresh(self._recompose_if_changed)

    async def _recompose_if_changed(self) -> None:
        if not self.is_attached or self._wanted() != self._shown:
            await self.recompose()

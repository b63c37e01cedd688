"""Command palette providers: models (listed off the loop), themes, and the app's screens.

Everything the keys do is also here, so ctrl+p is a way to find any action by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from themes.palettes import THEME_NAMES


class _ListedCommands(Provider):
    """A provider whose commands are (name, callback, help) triples from `_commands`."""

    def _commands(self) -> Iterator[tuple[str, Callable[[], object], str]]:
        raise NotImplementedError

    async def discover(self) -> Hits:
        for name, run, help_text in self._commands():
            yield DiscoveryHit(name, run, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, run, help_text in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), run, help=help_text)


class ModelCommands(_ListedCommands):
    """"Model: <name>" for every valid local model; picking one loads it."""

    async def startup(self) -> None:
        from tui.screens.model_picker import load_choices

        try:
            self._choices, _ = await load_choices(self.app.runtime)  # type: ignore[attr-defined]
        except Exception:  # a damaged cache must not break the palette
            self._choices = []

    def _commands(self):
        app = self.app
        for choice in getattr(self, "_choices", []):
            # the one id, as F5, F4 and the API name it (the file was here: "Model: x.gguf")
            yield f"Model: {choice.id}", partial(app.use_model, choice), f"Load {choice.path}"  # type: ignore[attr-defined]


class AppCommands(_ListedCommands):
    """Themes, screens and toggles by name."""

    def _commands(self):
        app = self.app
        for theme in THEME_NAMES:
            yield (f"Theme: {theme.removeprefix('llmdeck-')}", partial(app.set_theme, theme),  # type: ignore[attr-defined]
                   "Switch the colour theme (saved)")
        main = app.main  # type: ignore[attr-defined]
        yield "Choose model…", main.action_pick_model, "List local models and load one"
        # the title is what the palette matches: "mcp", "tools" or "remote" finds settings
        yield ("Settings: sampling, tools, MCP servers, remotes", main.action_settings,
               "Context size, system prompt, theme; add an MCP server or a remote endpoint (F3)")
        yield "Help: keys", main.action_help, "Every key binding"
        yield "Toggle worker status pane", main.action_toggle_workers, "Model, state, tok/s, RSS"
        yield "New chat", main.action_new_chat, "Start an empty conversation"
        yield "Export conversation", main.action_export, "Write it as Markdown"
        yield "Reload model", main.action_reload_model, "Unload and load the model again"
        yield ("Run code block (Python sandbox)", main.action_run_code,
               "Run the Python block of the focused (or last) reply in the sandbox (F8)")
        yield ("Fix code: ask about the failed run", main.action_fix_code,
               "Put the code and its traceback in the composer (F9)")
        yield "Search conversations", main.action_search, "Full text, every chat (ctrl+f)"
        yield "Toggle sidebar", main.action_toggle_sidebar, "Show or hide the chats (ctrl+b)"
        yield ("Compare with…", main.action_compare,
               "Send the composer's message to this model and another, side by side (ctrl+t)")

"""Settings: sampling, context size, system prompt, theme, tools and MCP servers, checked
as typed.

A refused value shows its reason under the field and Save stays refused until every field
is valid; saving writes the TOML config file off the loop.
"""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static, Switch, TextArea

from core.config import kept_notice
from themes.palettes import THEME_NAMES
from tui import settings_form as form
from tui.widgets.mcp_settings import McpSettings
from tui.widgets.quiet_footer import QuietFooter

NUMERIC = (
    ("temperature", "Temperature (0–2)"),
    ("top_p", "Top-p (0–1)"),
    ("top_k", "Top-k (≥ 1)"),
    ("min_p", "Min-p (0–1)"),
    ("repetition_penalty", "Repeat penalty (1 off)"),
    ("presence_penalty", "Presence penalty (−2–2)"),
    ("frequency_penalty", "Frequency penalty (−2–2)"),
    ("penalty_window", "Penalty window (tokens)"),
    ("seed", "Seed (blank: random)"),
    ("max_tokens", "Max tokens (blank: room left)"),
    ("context_size", "Context size (tokens)"),
)
# The tool section (core/tools): the python tool's sandbox limits, checked like the above.
TOOL_NUMERIC = (
    ("python_timeout_s", f"Python time ({form.MIN_PYTHON_TIMEOUT_S:g}–{form.MAX_PYTHON_TIMEOUT_S:g} s)"),
    ("python_memory_mb", f"Python memory (≥ {form.MIN_PYTHON_MEMORY_MB} MiB)"),
    ("python_scratch_mb", f"Python scratch (≥ {form.MIN_PYTHON_SCRATCH_MB} MiB)"),
)
FIELDS = NUMERIC + TOOL_NUMERIC


class SettingsScreen(ModalScreen[bool]):
    """Edit and save the settings; dismisses True when the model must reload (context size
    or speculative decoding changed), False otherwise."""

    DEFAULT_CLASSES = "dialog-screen"

    BINDINGS = [
        Binding("ctrl+s", "save", "Save", priority=True),
        Binding("ctrl+r", "save_preset", "Save as model preset", priority=True),
        Binding("escape", "cancel", "Cancel"),
    ]
    as_preset = False  # this save also files the settings as the model's preset (issue 31)

    def compose(self) -> ComposeResult:
        s = self.app.runtime.settings  # type: ignore[attr-defined]
        values = {"temperature": s.sampling.temperature, "top_p": s.sampling.top_p,
                  "top_k": s.sampling.top_k, "max_tokens": s.sampling.max_tokens or "",
                  "min_p": f"{s.sampling.min_p:g}",
                  "repetition_penalty": f"{s.sampling.repetition_penalty:g}",
                  "presence_penalty": f"{s.sampling.presence_penalty:g}",
                  "frequency_penalty": f"{s.sampling.frequency_penalty:g}",
                  "penalty_window": s.sampling.penalty_window,
                  "seed": "" if s.sampling.seed < 0 else s.sampling.seed,
                  "context_size": s.context_size, "python_timeout_s": f"{s.python_timeout_s:g}",
                  "python_memory_mb": s.python_memory_mb,
                  "python_scratch_mb": s.python_scratch_mb}
        with VerticalScroll(classes="settings"):
            yield Static("Settings", classes="settings-title")
            for name, label in NUMERIC:
                with Horizontal(classes="field"):
                    yield Label(label, classes="field-label")
                    yield Input(str(values[name]), id=f"set-{name}", classes="field-input")
                yield Static("", id=f"why-{name}", classes="field-error")
            with Horizontal(classes="field"):
                yield Label("Speculative decoding", classes="field-label")
                yield Switch(s.speculative, id="set-speculative")
            yield Static("Replies at temperature 0 guess ahead from the conversation "
                         "(same words, faster copies); the model reloads.", classes="field-hint")
            with Horizontal(classes="field"):
                yield Label("Theme", classes="field-label")
                theme = s.theme if s.theme in THEME_NAMES else THEME_NAMES[0]
                yield Select([(n.removeprefix("llmdeck-"), n) for n in THEME_NAMES], value=theme,
                             allow_blank=False, id="set-theme", classes="field-input")
            yield Label("System prompt", classes="field-label")
            yield TextArea(s.system_prompt, id="set-system", classes="system-prompt")
            yield Static("Tools", classes="settings-section", id="tools-section")
            with Horizontal(classes="field"):
                yield Label("Offer tools to the model", classes="field-label")
                yield Switch(s.tools_enabled, id="set-tools_enabled")
            with Horizontal(classes="field"):
                yield Label("Ask before Python runs", classes="field-label")
                yield Switch(s.python_asks, id="set-python_asks")
            yield Static("Off: the model's Python runs without asking, unless the sandbox "
                         "has no walls. Other tools always ask (read-only ones offer "
                         "“always”).", classes="field-hint")
            for name, label in TOOL_NUMERIC:
                with Horizontal(classes="field"):
                    yield Label(label, classes="field-label")
                    yield Input(str(values[name]), id=f"set-{name}", classes="field-input")
                yield Static("", id=f"why-{name}", classes="field-error")
            yield Static(self._limits_text(s.python_timeout_s, s.python_memory_mb,
                                           s.python_scratch_mb),
                         id="sandbox-limits", classes="field-hint", markup=False)
            yield McpSettings(s, id="mcp-settings")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Save (ctrl+s)", variant="primary", id="save")
                yield Button("Save as model preset (ctrl+r)", id="save-preset")
                yield Button("Cancel (esc)", id="cancel")
        yield QuietFooter()

    def on_mount(self) -> None:
        for name, _ in FIELDS:
            self.query_one(f"#why-{name}", Static).display = False
        self.query_one("#set-temperature", Input).focus()

    def _fields(self) -> dict[str, str]:
        return {name: self.query_one(f"#set-{name}", Input).value for name, _ in FIELDS}

    def _show_problems(self, problems: dict[str, str]) -> None:
        for name, _ in FIELDS:
            why = self.query_one(f"#why-{name}", Static)
            reason = problems.get(name, "")
            why.update(f"✖ {reason}" if reason else "")
            why.display = bool(reason)
            self.query_one(f"#set-{name}", Input).set_class(bool(reason), "-invalid")

    def _limits_text(self, timeout_s: float, memory_mb: int, scratch_mb: int) -> str:
        """The sandbox's limits as a person reads them (each conversation has its own)."""
        sandbox = self.app.runtime.sandbox_info()  # type: ignore[attr-defined]
        text = (f"Each conversation's sandbox: {timeout_s:g} s a run; {memory_mb} MiB of "
                f"memory for all its processes together; {scratch_mb} MiB of scratch files "
                f"(/tmp); {sandbox.processes} processes. At most {sandbox.max_live} "
                "conversations keep theirs alive at once.")
        unwalled = sandbox.unwalled
        return f"{text}\n⚠ {unwalled}" if unwalled else text

    @on(Input.Changed)
    def _check(self, _event: Input.Changed) -> None:
        values, problems = self._validate()
        self._show_problems(problems)
        if values is not None:
            self.query_one("#sandbox-limits", Static).update(self._limits_text(
                values.python_timeout_s, values.python_memory_mb, values.python_scratch_mb))

    def _validate(self) -> tuple[form.SettingsValues | None, dict[str, str]]:
        theme = self.query_one("#set-theme", Select).value
        return form.validate_all(self._fields(), self.query_one("#set-system", TextArea).text,
                                 str(theme),
                                 tools_enabled=self.query_one("#set-tools_enabled", Switch).value,
                                 python_asks=self.query_one("#set-python_asks", Switch).value)

    @on(Select.Changed, "#set-theme")
    def _preview_theme(self, event: Select.Changed) -> None:
        self.app.theme = str(event.value)  # live: the person sees it before saving

    @on(Button.Pressed, "#save")
    def _save_pressed(self) -> None:
        self.action_save()

    @on(Button.Pressed, "#save-preset")
    def _save_preset_pressed(self) -> None:
        self.action_save_preset()

    def action_save_preset(self) -> None:
        """Save, and file these settings as the current model's preset (the service's)."""
        self.action_save(as_preset=True)

    @on(Button.Pressed, "#cancel")
    def _cancel_pressed(self) -> None:
        self.action_cancel()

    def action_cancel(self) -> None:
        settings = self.app.runtime.settings  # type: ignore[attr-defined]
        self.app.theme = settings.theme if settings.theme in THEME_NAMES else THEME_NAMES[0]
        self.dismiss(False)

    def action_save(self, as_preset: bool = False) -> None:
        self.as_preset = as_preset
        values, problems = self._validate()
        self._show_problems(problems)
        if values is None:
            self.notify("Fix the fields marked ✖ first: " + " ".join(problems.values()),
                        title="Not saved", severity="error")
            return
        self._save(values)

    @work(exclusive=True, group="settings-save")
    async def _save(self, values: form.SettingsValues) -> None:
        runtime = self.app.runtime  # type: ignore[attr-defined]
        s = runtime.settings
        context_changed = values.context_size != s.context_size
        speculative = self.query_one("#set-speculative", Switch).value
        speculative_changed = speculative != s.speculative  # read when the model loads
        s.speculative = speculative
        s.sampling.temperature = values.temperature
        s.sampling.top_p = values.top_p
        s.sampling.top_k = values.top_k
        s.sampling.max_tokens = values.max_tokens
        s.sampling.min_p = values.min_p
        s.sampling.repetition_penalty = values.repetition_penalty
        s.sampling.presence_penalty = values.presence_penalty
        s.sampling.frequency_penalty = values.frequency_penalty
        s.sampling.penalty_window = values.penalty_window
        s.sampling.seed = values.seed
        s.context_size = values.context_size
        s.system_prompt = values.system_prompt
        s.theme = values.theme
        memory_changed = (values.python_memory_mb, values.python_scratch_mb) != (
            s.python_memory_mb, s.python_scratch_mb)
        s.tools_enabled = values.tools_enabled
        s.python_asks = values.python_asks
        s.python_timeout_s = values.python_timeout_s
        s.python_memory_mb = values.python_memory_mb
        s.python_scratch_mb = values.python_scratch_mb
        s.mcp_servers, s.mcp_share_conversations, s.mcp_share_documents = \
            self.query_one(McpSettings).values()
        runtime.apply_settings()  # the next tool call follows the new policy and limits
        self.app.theme = values.theme
        try:
            kept = await runtime.save_settings()
        except OSError as exc:
            self.notify(f"Could not write the config file: {exc}. Check the folder is writable.",
                        title="Not saved", severity="error")
            return
        note = (" Reloading the model for the new context size." if context_changed
                else " Reloading the model." if speculative_changed else "")
        if memory_changed and runtime.sandbox_info().running:
            note += (" The Python memory total applies from the next run; the per-process "
                     "and scratch limits when a conversation's sandbox next starts.")
        if kept is not None:
            note += " " + kept_notice(kept)
        if self.as_preset:  # a new chat with this model starts from them
            try:
                key, where = await runtime.save_preset()
                note += f" Saved as the preset of {key} ({where})."
            except OSError as exc:
                note += f" The preset was not saved: {exc.strerror or exc}."
        self.notify("Settings saved." + note, timeout=20 if kept else 4)
        self.dismiss(context_changed or speculative_changed)

"""The settings screen's MCP section: the configured servers (a switch turns one on or
off, Remove drops it), a row to add one by name and command line or URL, and what
`llmdeck mcp` may offer other agents. Edits stay here until the screen saves them."""

from __future__ import annotations

import shlex
from dataclasses import replace

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widget import Widget
from textual.widgets import Button, Input, Label, Static, Switch

from core.config import McpServerConfig, Settings

EMPTY = ("No MCP servers yet. Add one below: a command that speaks MCP on stdio, or the "
         "http(s) URL of a streamable-HTTP server. env and headers go in the config file.")


def parse_target(name: str, target: str) -> McpServerConfig:
    """A server from what was typed; ValueError with the reason when it cannot be one."""
    target = target.strip()
    if target.startswith(("http://", "https://")):
        config = McpServerConfig(name.strip(), url=target)
    else:
        try:
            words = shlex.split(target)
        except ValueError as exc:
            raise ValueError(f"The command line does not parse: {exc}.") from None
        if not words:
            raise ValueError("Type the command that starts the server, or its http(s) URL.")
        config = McpServerConfig(name.strip(), command=words[0], args=words[1:])
    problem = config.problem()
    if problem:
        raise ValueError(problem[0].upper() + problem[1:] + ".")
    return config


class McpSettings(Vertical):
    """Keys: Tab moves between switches and buttons, Space flips a switch, Enter presses
    a button (Enter in the URL field adds the server)."""

    def __init__(self, settings: Settings, **kwargs) -> None:
        super().__init__(classes="mcp-settings", **kwargs)
        self.servers = [replace(m) for m in settings.mcp_servers]
        self._share = (settings.mcp_share_conversations, settings.mcp_share_documents)

    def compose(self) -> ComposeResult:
        yield Static("MCP servers", classes="settings-section", id="mcp-section-title")
        yield Vertical(id="mcp-rows")
        with Horizontal(classes="field"):
            yield Label("New server name", classes="field-label")
            yield Input(placeholder="e.g. files", id="mcp-new-name", classes="field-input")
        with Horizontal(classes="field"):
            yield Label("Command or URL", classes="field-label")
            yield Input(placeholder="uvx mcp-server-fetch, or a URL",
                        id="mcp-new-target", classes="field-input")
        yield Static("", id="why-mcp", classes="field-error")
        with Horizontal(classes="mcp-add-row"):
            yield Button("Add server", id="mcp-add")
        yield Static("Share with other agents (`llmdeck mcp`, read-only)", classes="settings-section")
        with Horizontal(classes="field"):
            yield Label("Search my conversations", classes="field-label")
            yield Switch(self._share[0], id="set-mcp_share_conversations")
        with Horizontal(classes="field"):
            yield Label("Search my documents", classes="field-label")
            yield Switch(self._share[1], id="set-mcp_share_documents")

    async def on_mount(self) -> None:
        self.query_one("#why-mcp").display = False
        await self._show_rows()

    async def _show_rows(self) -> None:
        rows = self.query_one("#mcp-rows", Vertical)
        await rows.remove_children()
        if not self.servers:
            await rows.mount(Static(EMPTY, classes="field-hint mcp-empty"))
            return
        states, errors = self._states()
        widgets: list[Widget] = []
        for m in self.servers:
            widgets.append(Horizontal(
                Switch(m.enabled, id=f"mcp-on-{m.name}", classes="mcp-switch"),
                Static(m.name, classes="mcp-name", markup=False),
                Static(m.target(), classes="mcp-target", markup=False),
                Static(states.get(m.name, "off" if not m.enabled else "new"), classes="mcp-state",
                       markup=False),
                Button("Remove", id=f"mcp-rm-{m.name}", classes="mcp-remove"),
                classes="mcp-row"))
            if m.name in errors:
                widgets.append(Static(f"✖ {m.name}: {errors[m.name]}", classes="field-error mcp-error",
                                      markup=False))
        await rows.mount_all(widgets)

    def _states(self) -> tuple[dict[str, str], dict[str, str]]:
        """What each server is doing now, and why the failed ones failed (the F4 rows, as
        the service last told this client: its worker table has the MCP servers' rows)."""
        runtime = getattr(self.app, "runtime", None)
        states: dict[str, str] = {}
        errors: dict[str, str] = {}
        for row in runtime.worker_status() if runtime is not None else ():
            if not row.worker_id.startswith("mcp:"):
                continue
            name = row.worker_id.removeprefix("mcp:")
            tools = row.model.rpartition(" · ")[2]
            states[name] = (f"ready · {tools}" if row.state == "ready" else
                            "starts on use" if row.state == "idle" else row.state)
            if row.error:
                errors[name] = row.error
        return states, errors

    def _say(self, reason: str) -> None:
        why = self.query_one("#why-mcp", Static)
        why.update(f"✖ {reason}" if reason else "")
        why.display = bool(reason)

    @on(Switch.Changed, ".mcp-switch")
    def _toggle(self, event: Switch.Changed) -> None:
        name = (event.switch.id or "").removeprefix("mcp-on-")
        for m in self.servers:
            if m.name == name:
                m.enabled = event.value

    @on(Button.Pressed, ".mcp-remove")
    async def _remove(self, event: Button.Pressed) -> None:
        event.stop()
        name = (event.button.id or "").removeprefix("mcp-rm-")
        self.servers = [m for m in self.servers if m.name != name]
        await self._show_rows()
        self.query_one("#mcp-new-name", Input).focus()

    @on(Button.Pressed, "#mcp-add")
    @on(Input.Submitted, "#mcp-new-target")
    async def _add(self, event: Button.Pressed | Input.Submitted) -> None:
        event.stop()
        name = self.query_one("#mcp-new-name", Input)
        target = self.query_one("#mcp-new-target", Input)
        try:
            config = parse_target(name.value, target.value)
        except ValueError as exc:
            self._say(str(exc))
            return
        if any(m.name == config.name for m in self.servers):
            self._say(f"A server is already named {config.name!r}; pick another name.")
            return
        self._say("")
        self.servers.append(config)
        name.value = target.value = ""
        await self._show_rows()
        name.focus()

    def values(self) -> tuple[list[McpServerConfig], bool, bool]:
        """(servers, share conversations, share documents) as edited."""
        return ([replace(m) for m in self.servers],
                self.query_one("#set-mcp_share_conversations", Switch).value,
                self.query_one("#set-mcp_share_documents", Switch).value)

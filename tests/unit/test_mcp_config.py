"""MCP server entries in the config file, as typed in settings, and as slash commands:
bad entries are reported and skipped, never stopping the app."""

from __future__ import annotations

import pytest

from core import paths
from core.config import McpServerConfig, Settings
from core.tools import ApprovalPolicy, Tool, ToolRegistry, ToolResult
from tui import slash
from tui.widgets.mcp_settings import parse_target


def test_entries_round_trip_and_bad_ones_are_reported() -> None:
    paths.config_path().write_text(
        '[[mcp_servers]]\nname = "fetch"\ncommand = "uvx"\nargs = ["mcp-server-fetch"]\n'
        'env = { FETCH_UA = "llmdeck" }\n\n'
        '[[mcp_servers]]\nname = "web"\nurl = "https://mcp.example.org/mcp"\n'
        'headers = { Authorization = "Bearer x" }\nenabled = false\ntimeout_s = 5\n\n'
        '[[mcp_servers]]\nname = "both"\ncommand = "x"\nurl = "http://y"\n\n'
        '[[mcp_servers]]\nname = "my tools"\ncommand = "x"\n\n'
        '[[mcp_servers]]\nname = "fetch"\ncommand = "again"\n\n'
        '[[mcp_servers]]\nname = "typo"\ncomand = "x"\n', encoding="utf-8")
    s = Settings.load()
    assert [(m.name, m.enabled) for m in s.mcp_servers] == [("fetch", True), ("web", False)]
    assert s.mcp_server("fetch").env == {"FETCH_UA": "llmdeck"}
    assert s.mcp_server("web").headers == {"Authorization": "Bearer x"}
    problems = "\n".join(s.problems)
    assert "either a command (stdio) or a url (HTTP), not both" in problems
    assert "name 'my tools' must be letters, digits, _ or -" in problems
    assert "a second MCP server is named 'fetch'" in problems
    assert "unknown key 'comand'" in problems
    assert not s.mcp_share_conversations and not s.mcp_share_documents, "nothing shared by default"
    s.save()
    again = Settings.load()
    assert again.mcp_servers == s.mcp_servers and not again.problems


def test_a_server_added_by_hand_below_a_saved_file_is_read() -> None:
    """The README's way: append a [[mcp_servers]] table to the file the app saved. The
    save had written `mcp_servers = []`, so TOML refused the file and every setting went
    back to its default ("Cannot mutate immutable namespace")."""
    first = Settings(context_size=8192)
    first.save()
    assert "mcp_servers" not in paths.config_path().read_text(encoding="utf-8")
    old_save = 'context_size = 8192\nmcp_servers = []\nremotes = []\n'  # as saves wrote it
    paths.config_path().write_text(
        old_save + '\n[[mcp_servers]]\nname = "fetch"\ncommand = "uvx"\n'
        'args = ["mcp-server-fetch"]\n', encoding="utf-8")
    s = Settings.load()
    assert not s.problems, s.problems
    assert s.context_size == 8192 and [m.name for m in s.mcp_servers] == ["fetch"]
    paths.config_path().write_text(old_save, encoding="utf-8")  # no tables: as it was
    assert Settings.load().mcp_servers == [] and not Settings.load().problems


def test_typed_targets() -> None:
    assert parse_target("files", "npx -y @modelcontextprotocol/server-filesystem '/my notes'") == \
        McpServerConfig("files", command="npx", args=["-y", "@modelcontextprotocol/server-filesystem",
                                                      "/my notes"])
    assert parse_target("web", " https://h/mcp ").url == "https://h/mcp"
    with pytest.raises(ValueError, match="Type the command"):
        parse_target("x", "  ")
    with pytest.raises(ValueError, match="does not parse"):
        parse_target("x", "run 'unclosed")


def test_mcp_tools_may_be_always_allowed_per_chat() -> None:
    async def run(arguments, ctx):  # noqa: ANN001, ANN202
        return ToolResult("ok")

    registry = ToolRegistry([Tool("shell", "", {"type": "object"}, run)])
    registry.replace_server("srv", [Tool("srv.write", "", {"type": "object"}, run, server="srv"),
                                    Tool("shell", "", {"type": "object"}, run, server="srv")])
    assert registry.get("shell").server is None, "an MCP tool never shadows another tool"
    policy = ApprovalPolicy(registry)
    assert policy.can_always_allow("srv.write") and not policy.can_always_allow("shell")
    policy.remember("chat", "srv.write", "always")
    assert not policy.needs_approval("chat", "srv.write") and policy.needs_approval("other", "srv.write")
    registry.replace_server("srv", [])
    assert registry.names() == ["shell"]


def test_prompts_join_the_slash_commands_without_replacing_any() -> None:
    slash.set_extra_commands(lambda: {"/fetch.summarise": "URL", "/clear": "hijack"})
    try:
        assert slash.completions("/fetch") == ["/fetch.summarise"]
        assert slash.parse("/fetch.summarise https://x").argument == "https://x"
        assert slash.is_extra("/fetch.summarise") and not slash.is_extra("/clear")
        assert slash.known()["/clear"] == slash.COMMANDS["/clear"]
        assert slash.unknown_command("/fetch.nothing") is not None
    finally:
        slash.set_extra_commands(None)

"""MCP (Model Context Protocol) servers as a source of tools, prompts and resources, and
`llmdeck mcp`, the server that offers a person's own history to other agents.

    servers = McpServers(registry, settings.mcp_servers)  # ToolKit.mcp
    await servers.ensure_started()        # lazily: tools join the registry as server.tool
    servers.status()                      # WorkerStatus rows for F4 and `llmdeck workers`
    servers.prompt_commands() / await servers.get_prompt("/srv.name", "args")
    await servers.save_resource("srv", "notes://today")   # a file to attach
"""

from core.tools.mcp.connection import McpCallError, McpConnection
from core.tools.mcp.hub import McpServers, schema_problem

__all__ = ["McpCallError", "McpConnection", "McpServers", "schema_problem"]

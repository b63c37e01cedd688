"""`llmdeck mcp`: the MCP server of core.tools.mcp.share over the engine service's view of
the history (core.service.history_store), run in this process on stdio. It lives with
the service's other faces, not in core.tools: it is a front end that asks the service, and
the tools sit below the service."""

from __future__ import annotations

import sys

from core import paths
from core.config import Settings


def main(argv: list[str] | None = None) -> int:
    settings = Settings.load()
    for problem in settings.problems:
        print(problem, file=sys.stderr)
    from core.tools.mcp.share import NOTHING_SHARED, ReadOnlyHistory, build_server

    if not (settings.mcp_share_conversations or settings.mcp_share_documents):
        print(NOTHING_SHARED.format(path=paths.config_path()), file=sys.stderr)
        return 2
    from core.service.history_store import service_history_store

    build_server(settings, ReadOnlyHistory(service_history_store())).run()
    return 0

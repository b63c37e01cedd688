"""What the `llmdeck` entry (tui/cli.py) calls in the packages that do the work.

The entry is part of the client, and the client imports only core's faces and wire
types (issue 47). Its subcommands (`doctor`, `models`, `cluster`, `workers`) and
the home lock it takes before opening the app still live in the working packages, so it
reaches them through this one table: `from core.commands import doctor_main` resolves
the name here, on first use, with importlib. A command pays only for its own imports,
and the UI's import graph names no working package. tests/unit/test_thin_client.py
allows this module to tui/cli.py alone, and checks that every entry resolves.
"""

from __future__ import annotations

import importlib
from typing import Any

# name the entry imports -> "module:attribute" in the package that does the work
# ("module" alone: the module itself)
COMMANDS: dict[str, str] = {
    "doctor_main": "core.doctor:main",  # llmdeck doctor
    "cluster_doctor_main": "core.cluster:cluster_doctor_main",  # llmdeck doctor --cluster
    "cluster_main": "core.cluster:cluster_main",  # llmdeck cluster ...
    "clusters_report": "core.cluster:clusters_report",  # llmdeck workers, under the workers
    "workers_main": "core.workers:workers_main",  # llmdeck workers, with no service running
    "hub_cli_main": "core.hub:hub_cli_main",  # llmdeck models search|pull|list|rm|files
    "import_gguf_main": "core.engines:import_gguf_main",  # llmdeck models import
    "provision_bundled_chat": "core.bundled:provision_bundled_chat",  # models restore-default
    "acquire": "core.home_lock:acquire",  # the home's lock, for the app or `serve`
    "HomeLockError": "core.home_lock:HomeLockError",
    "holder": "core.home_lock:holder",  # the pid holding a role's lock
}

__all__ = sorted(COMMANDS)


def __getattr__(name: str) -> Any:
    target = COMMANDS.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attribute = target.partition(":")
    found = importlib.import_module(module)
    if attribute:
        found = getattr(found, attribute)
    globals()[name] = found  # resolved once
    return found

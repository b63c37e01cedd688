"""The Python sandbox: a worker process that runs code like a notebook, contained."""

from core.tools.sandbox.client import RunResult, Sandbox

__all__ = ["RunResult", "Sandbox"]

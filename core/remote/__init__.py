"""Model sources beyond this machine: any OpenAI-compatible endpoint as a Backend.

    from core.remote.client import RemoteBackend
    backend = RemoteBackend(settings.remote("gpu"), "qwen3-32b")
    async for event in backend.generate(request): ...

Imports stay light (no aiohttp) so the Runtime can use this at start-up. A Runtime whose settings.model is "remote:<endpoint>/<model>" streams from that remote;
`remote_models(settings)` lists what the model picker shows beside local models.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.config import Settings
from core.remote.backend import Backend, PoolBackend
from core.remote.refs import remote_model_string, remote_ref
from core.wire.remote import REMOTE_HINTS, remote_hint


@dataclass(frozen=True, slots=True)
class RemoteModel:
    """One entry of the model picker that lives on a remote endpoint."""

    endpoint: str
    model: str
    url: str

    @property
    def model_string(self) -> str:
        """What to put in settings.model (or pass to Runtime.switch_model)."""
        return remote_model_string(self.endpoint, self.model)


def remote_models(settings: Settings) -> list[RemoteModel]:
    """The remote models configured in settings (no network: for the picker's first paint)."""
    return [RemoteModel(r.name, m, r.url) for r in settings.remotes for m in r.models]


async def discover_models(settings: Settings) -> tuple[list[RemoteModel], list[str]]:
    """Ask every configured endpoint for its models; problems come back as sentences."""
    from core.remote.client import RemoteBackend, RemoteError

    found: list[RemoteModel] = []
    problems: list[str] = []
    for endpoint in settings.remotes:
        backend = RemoteBackend(endpoint, "", connect_timeout_s=5.0, read_timeout_s=10.0)
        try:
            found += [RemoteModel(endpoint.name, m, endpoint.url) for m in await backend.list_models()]
        except RemoteError as exc:
            problems.append(exc.message)
        except Exception as exc:  # unreachable, bad JSON: say which endpoint
            problems.append(f"Could not list the models of remote {endpoint.name!r} ({endpoint.url}): {exc}")
        finally:
            await backend.close()
    return found, problems


__all__ = ["REMOTE_HINTS", "Backend", "PoolBackend", "RemoteModel", "discover_models",
           "remote_hint", "remote_model_string", "remote_models", "remote_ref"]

"""Ollama's POST /api/pull and DELETE /api/delete on `llmdeck serve`, as service jobs.

A pull is one of the engine service's download jobs (core.hub.jobs): it goes on when
the HTTP client goes, every llmdeck client shows it, and it resumes after a restart.
The stream is Ollama's: {"status": "pulling manifest"}, then {"status": "pulling <file>",
"digest", "total", "completed"} lines, "verifying sha256 digest", "success" (or
{"error": ...}). Models come from Hugging Face, so a name is a repo, as Ollama's own
`hf.co/owner/repo:Q4_K_M` form: the tag is a quant label or a file name. /api/delete
takes a local model by id (`gemma3:270m-q4_k_m`), unloads it if it is loaded and
deletes its files, ending a download of it first.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from core.server.sse import json_response
from core.server.wire import ApiError

POLL_S = 0.25  # how often a streamed pull looks at its job
MAX_NAME = 300
_HOSTS = ("hf.co/", "huggingface.co/", "https://huggingface.co/")


def _bad(message: str, status: int = 400) -> ApiError:
    return ApiError(status, message, code="invalid_value")


def parse_name(name: Any) -> tuple[str, str | None]:
    """(repo, tag) of `hf.co/owner/repo:TAG` or `owner/repo[:TAG]`; 400 otherwise."""
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
        raise _bad("Name the model to pull: {\"model\": \"hf.co/<owner>/<repo>:<quant>\"}.")
    text = name.strip()
    for host in _HOSTS:
        if text.startswith(host):
            text = text[len(host):]
            break
    repo, _, tag = text.partition(":")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise _bad(f"llmdeck pulls from Hugging Face: name a repo, as "
                   f"hf.co/<owner>/<repo>:<quant> (got {name[:120]!r}).")
    return repo, (tag or None) if tag != "latest" else None


def pick_file(repo: str, tag: str | None) -> str | None:
    """The GGUF file a tag names (a file name, or a quant label such as Q4_K_M), None to
    let the plan choose (an MLX repo, or one GGUF); reads the Hub (call in a thread)."""
    from core.hub.listing import list_files

    if tag is None or tag.endswith(".gguf"):
        return tag
    listing = list_files(repo)
    wanted = tag.lower().replace("-", "_")
    found = [f.path for f in listing.files
             if f.path.endswith(".gguf") and (f.quant or "").lower().replace("-", "_") == wanted
             and f.role in (None, "chat")]
    if not found:
        if listing.format == "mlx":
            return None
        raise ApiError(404, f"{repo} has no GGUF file with quant {tag!r}; `llmdeck models "
                       f"files {repo}` lists them.", code="model_not_found")
    return sorted(found)[0]


def _line(job: dict[str, Any]) -> dict[str, Any]:
    state = job["state"]
    if state in ("queued", "planning"):
        return {"status": "pulling manifest"}
    if state == "verifying":
        return {"status": "verifying sha256 digest"}
    if state == "done":
        return {"status": "success"}
    if state in ("error", "cancelled"):
        return {"error": job.get("error") or f"the pull was {state}"}
    name = job.get("filename") or job["repo"]
    return {"status": f"pulling {name}", "digest": name, "total": job.get("total") or 0,
            "completed": job.get("downloaded") or 0}


def _closing_lines(job: dict[str, Any]) -> list[dict[str, Any]]:
    """A finished pull's last lines, as Ollama ends one: the file whole (a small file can
    finish between two looks), verified, written, success."""
    name = job.get("filename") or job["repo"]
    total = job.get("total") or 0
    return [{"status": f"pulling {name}", "digest": name, "total": total, "completed": total},
            {"status": "verifying sha256 digest"}, {"status": "writing manifest"},
            {"status": "success"}]


class PullRoutes:
    def __init__(self, server: Any) -> None:
        self.server = server

    def _jobs(self) -> Any:
        from core.hub.jobs import jobs_for

        return jobs_for(self.server.runtime)

    async def pull(self, request: web.Request) -> web.StreamResponse:
        body = await self.server._body(request)
        if not isinstance(body, dict):
            raise _bad("The body must be a JSON object.")
        repo, tag = parse_name(body.get("model", body.get("name")))
        stream = body.get("stream", True) is not False
        from core.hub.errors import HubError

        try:
            file = await asyncio.to_thread(pick_file, repo, tag)
        except HubError as err:
            raise ApiError(404 if err.code in ("NOT_FOUND", "GATED") else 502, err.message,
                           code="model_not_found") from None
        from core.hub.jobs import TooManyDownloads

        try:
            job = self._jobs().start(repo, file)
        except TooManyDownloads as exc:
            raise ApiError(429, str(exc), code="too_many_downloads") from None
        if not stream:
            while not job.finished:
                await asyncio.sleep(POLL_S)
            last = _line(job.describe())
            return json_response(last, status=500 if "error" in last else 200)
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        sent: dict[str, Any] | None = None
        while True:  # the client going away ends this loop, never the job
            now = job.describe()
            lines = _closing_lines(now) if now["state"] == "done" else [_line(now)]
            for line in lines:
                if line != sent:
                    await response.write((json.dumps(line) + "\n").encode())
                    sent = line
            if job.finished:
                break
            await asyncio.sleep(POLL_S)
        await response.write_eof()
        return response

    async def delete(self, request: web.Request) -> web.Response:
        body = await self.server._body(request)
        name = body.get("model", body.get("name")) if isinstance(body, dict) else None
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
            raise _bad("Name the model to delete: {\"model\": \"<id from /api/tags>\"}.")
        models = self.server.local_models
        entry = await models.find(name)
        if entry is None:
            raise ApiError(404, f"model '{name[:200]}' not found", code="model_not_found")
        if models.is_app_model(entry):
            raise _bad(f"{entry.id} is the app's model; switch the app to another (F5) "
                       "before deleting it.")
        repo = entry.hub_id.partition(":")[0]
        for job in list(self._jobs().jobs):
            if job.repo == repo and not job.finished:
                self._jobs().cancel(job.id)
        status = models.running_at(entry.path)
        if status is not None:
            await models.unload(status.key)
        await asyncio.to_thread(_delete, entry.path)
        models.catalog.invalidate()  # /api/tags lists it no more
        return web.Response(status=200)


def _delete(path: Any) -> int:
    from core.hub.errors import HubError
    from core.hub.registry import delete_model, list_local_models

    found = next((m for m in list_local_models() if m.path == path), None)
    if found is None:
        raise ApiError(404, "That model's files are gone already.", code="model_not_found")
    try:
        return delete_model(found, confirm=True)
    except HubError as err:
        raise _bad(err.message) from None


def add_routes(app: web.Application, server: Any) -> None:
    from core.server.dialects import guarded
    from core.server.ollama import render_error

    routes = PullRoutes(server)
    wrap = guarded(render_error)
    app.router.add_post("/api/pull", wrap(routes.pull))
    app.router.add_delete("/api/delete", wrap(routes.delete))

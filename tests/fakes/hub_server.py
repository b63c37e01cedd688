"""A loopback fake of the Hugging Face Hub endpoints the real huggingface_hub client calls.

Tests point the real client at it with HF_ENDPOINT, so every request goes through
huggingface_hub's own code (URL building, headers, error mapping, pagination). Repos are
built from real files on disk or bytes; LFS-sized files are redirected to a "CDN" path the
way the Hub does, with X-Linked-Size / X-Linked-Etag on the HEAD answer.

Endpoints (the ones huggingface_hub 2.x uses for what llmdeck does):
  GET  /api/models                              list_models: search, author, filter, sort,
                                                limit, expand, Link pagination
  GET  /api/models/{repo}[/revision/{rev}]      model_info (blobs=True adds sizes/lfs)
  GET  /api/models/{repo}/tree/{rev}[/{path}]   list_repo_tree
  HEAD /{repo}/resolve/{rev}/{path}             metadata: X-Repo-Commit, ETag, sizes
  GET  /{repo}/resolve/{rev}/{path}             the bytes (302 to /__lfs__/ for LFS files)
  GET  /__lfs__/{sha256}                        the LFS bytes, with Range support

Knobs for failure tests: gated repos (401 without a token, 403 with a token not granted),
missing repos/files (404 with the Hub's X-Error-Code), a byte-rate throttle, corrupting a
file's served bytes N times, and per-file counters of bytes served.

Hostile modes (a mirror, a proxy or a man in the middle can answer like this; each is off
by default, so the fake answers as the Hub does unless a test turns one on):
  FakeRepo.listed_as      a file listed (and served) under another name: `../x`, `/abs`
  FakeRepo.etag_as        the ETag / X-Linked-Etag a file's HEAD and GET carry
  FakeRepo.commit_header  X-Repo-Commit on every resolve answer
  FakeRepo.listed_sha     the listing's "sha";  FakeRepo.listed_id  its "id"
  FakeRepo.no_hashes      the listing without lfs.sha256 or blobId
  FakeHub.serve_unknown   any unknown path answered as this (repo, file), as a server
                          that ignores what it is asked (dot segments normalised away)
  FakeHub.hang            {"api", "head", "get"}: accept the request, never answer
  FakeHub.overrun_bytes   after a file's bytes, keep sending this many more
  FakeHub.trickle_bps     send bodies a byte at a time at this rate
  FakeHub.stall_after     send this many body bytes, then nothing
  FakeHub.fail_next       {"api"|"head"|"get": [503, ...]}: the next requests of that kind
                          get these statuses, one each, in order
A hang or a trickle ends when the fake stops or after `hang_limit_s`, so no test leaks
a thread that outlives it.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_THRESHOLD = 10 * 1024  # files at least this big are served like LFS files on the Hub
_SERVE_SLICE = 256 * 1024


@dataclass
class FakeFile:
    """One file in a fake repo; its bytes come from a path on disk or from memory."""

    path: str
    source: Path | bytes
    size: int
    sha256: str
    git_oid: str

    @property
    def lfs(self) -> bool:
        return self.size >= LFS_THRESHOLD

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.git_oid

    def open_at(self, start: int) -> Any:
        """A read(n) callable positioned at `start` (one open per response)."""
        if isinstance(self.source, bytes):
            view = memoryview(self.source)
            pos = [start]

            def read(n: int) -> bytes:
                block = bytes(view[pos[0] : pos[0] + n])
                pos[0] += n
                return block

            return read
        handle = open(self.source, "rb")  # noqa: SIM115  (closed with the response)
        handle.seek(start)
        return handle.read

    def read_range(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the file."""
        if isinstance(self.source, bytes):
            return self.source[start:end]
        with open(self.source, "rb") as f:
            f.seek(start)
            return f.read(end - start)


def _make_file(path: str, source: Path | bytes) -> FakeFile:
    sha = hashlib.sha256()
    size = 0
    if isinstance(source, bytes):
        sha.update(source)
        size = len(source)
        git = hashlib.sha1(b"blob %d\0" % size + source)
    else:
        size = source.stat().st_size
        git = hashlib.sha1(b"blob %d\0" % size)
        with open(source, "rb") as f:
            while block := f.read(1 << 20):
                sha.update(block)
                git.update(block)
    return FakeFile(path, source, size, sha.hexdigest(), git.hexdigest())


@dataclass
class FakeRepo:
    """A model repo with the metadata the Hub's search and info endpoints return."""

    repo_id: str
    files: dict[str, FakeFile]
    sha: str
    downloads: int = 0
    likes: int = 0
    last_modified: str = "2025-01-01T00:00:00.000Z"
    created_at: str = "2024-01-01T00:00:00.000Z"
    library_name: str | None = None
    tags: list[str] = field(default_factory=list)
    pipeline_tag: str | None = "text-generation"
    gated: bool | str = False
    license: str | None = "apache-2.0"
    config: dict[str, Any] | None = None
    gguf: dict[str, Any] | None = None
    safetensors: dict[str, Any] | None = None
    # hostile modes (see the module docstring); empty or None = the Hub's behaviour
    listed_as: dict[str, str] = field(default_factory=dict)
    etag_as: dict[str, str] = field(default_factory=dict)
    commit_header: str | None = None
    listed_sha: str | None = None
    listed_id: str | None = None
    no_hashes: bool = False

    @property
    def author(self) -> str:
        return self.repo_id.split("/")[0]

    def used_storage(self) -> int:
        return sum(f.size for f in self.files.values())

    def to_json(self, expand: list[str] | None, blobs: bool = False) -> dict[str, Any]:
        siblings = []
        for f in self.files.values():
            entry: dict[str, Any] = {"rfilename": self.listed_as.get(f.path, f.path)}
            if blobs:
                entry["size"] = f.size
                if not self.no_hashes:
                    entry["blobId"] = f.git_oid
                if f.lfs and not self.no_hashes:
                    entry["lfs"] = {"size": f.size, "sha256": f.sha256, "pointerSize": 134}
            siblings.append(entry)
        full: dict[str, Any] = {
            "_id": hashlib.md5(self.repo_id.encode()).hexdigest()[:24],
            "id": self.listed_id or self.repo_id,
            "modelId": self.listed_id or self.repo_id,
            "author": self.author,
            "sha": self.listed_sha or self.sha,
            "lastModified": self.last_modified,
            "createdAt": self.created_at,
            "private": False,
            "disabled": False,
            "gated": self.gated,
            "downloads": self.downloads,
            "likes": self.likes,
            "library_name": self.library_name,
            "tags": list(self.tags) + ([f"license:{self.license}"] if self.license else []),
            "pipeline_tag": self.pipeline_tag,
            "usedStorage": self.used_storage(),
            "cardData": {"license": self.license} if self.license else {},
            "siblings": siblings,
        }
        if self.config is not None:
            full["config"] = self.config
        if self.gguf is not None:
            full["gguf"] = self.gguf
        if self.safetensors is not None:
            full["safetensors"] = self.safetensors
        if expand is None:
            return full
        keep = set(expand) | {"_id", "id"}
        return {k: v for k, v in full.items() if k in keep}


class FakeHub:
    """The fake Hub: add repos, start it, point HF_ENDPOINT at `endpoint`.

    Knobs and counters are plain attributes, safe to change while it serves:
    `throttle_bps` (None = unthrottled), `corrupt_file()`, `grant()`, `bytes_served`
    (per "repo/path"), `requests` (method, path, Range header).
    """

    def __init__(self) -> None:
        self.repos: dict[str, FakeRepo] = {}
        self.throttle_bps: int | None = None
        self.bytes_served: Counter[str] = Counter()
        self.requests: list[tuple[str, str, str | None]] = []
        self.auth_headers_seen: list[str] = []
        self.cdn_auth_headers_seen: list[str] = []
        self._corrupt: dict[str, int] = {}
        self._drops: dict[str, list[int]] = {}
        self._grants: dict[str, set[str]] = {}
        self.users: dict[str, str] = {}  # token -> user name, for /api/whoami-v2
        # When set, every API call gets this HTML page with 200, as behind a captive portal.
        self.proxy_page: bytes | None = None
        # hostile modes (see the module docstring)
        self.serve_unknown: tuple[str, str] | None = None
        self.hang: set[str] = set()
        self.overrun_bytes: int | None = None
        self.trickle_bps: float | None = None
        self.stall_after: int | None = None
        self.hang_limit_s = 30.0
        self.fail_next: dict[str, list[int]] = {}
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._cdn: ThreadingHTTPServer | None = None

    # -- building repos -------------------------------------------------------------------

    def add_repo(self, repo_id: str, files: dict[str, Path | bytes], **meta: Any) -> FakeRepo:
        """Add a repo whose files are real bytes; its commit sha derives from the contents."""
        built = {p: _make_file(p, src) for p, src in files.items()}
        digest = hashlib.sha1(repo_id.encode())
        for f in sorted(built.values(), key=lambda f: f.path):
            digest.update(f"{f.path}:{f.sha256}".encode())
        repo = FakeRepo(repo_id=repo_id, files=built, sha=digest.hexdigest(), **meta)
        self.repos[repo_id] = repo
        return repo

    # -- knobs ------------------------------------------------------------------------------

    def corrupt_file(self, repo_id: str, path: str, times: int = 1) -> None:
        """Serve wrong bytes (same length) for the next `times` GETs of this file."""
        with self._lock:
            self._corrupt[f"{repo_id}/{path}"] = times

    def drop_connection(self, repo_id: str, path: str, after_bytes: int, times: int = 1) -> None:
        """Hang up mid-body after `after_bytes` of the next `times` GETs (a dying link)."""
        with self._lock:
            self._drops[f"{repo_id}/{path}"] = [after_bytes] * times

    def _take_drop(self, key: str) -> int | None:
        with self._lock:
            pending = self._drops.get(key)
            return pending.pop() if pending else None

    def grant(self, repo_id: str, token: str) -> None:
        """Let `token` download from a gated repo (as if its owner accepted the terms)."""
        self._grants.setdefault(repo_id, set()).add(token)

    def served(self, repo_id: str, path: str) -> int:
        return self.bytes_served[f"{repo_id}/{path}"]

    def _take_corruption(self, key: str) -> bool:
        with self._lock:
            left = self._corrupt.get(key, 0)
            if left > 0:
                self._corrupt[key] = left - 1
                return True
            return False

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The Hub's origin: what HF_ENDPOINT points at."""
        assert self._server is not None, "start() the fake hub first"
        return _origin(self._server)

    @property
    def cdn_endpoint(self) -> str:
        """A second origin for LFS bytes, so the client treats it as a CDN (no auth header)."""
        assert self._cdn is not None, "start() the fake hub first"
        return _origin(self._cdn)

    def start(self) -> FakeHub:
        self.stopping.clear()
        handler = type("BoundHandler", (_Handler,), {"hub": self})
        self._server = _serve(handler, "fake-hub")
        self._cdn = _serve(handler, "fake-hub-cdn")
        return self

    def stop(self) -> None:
        self.stopping.set()  # releases every hang and trickle
        for server in (self._server, self._cdn):
            if server is not None:
                server.shutdown()
                server.server_close()
        self._server = self._cdn = None

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _serve(handler: type[BaseHTTPRequestHandler], name: str) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), name=name, daemon=True).start()
    return server


def _origin(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{host}:{port}"


_SORT_KEYS = {
    "downloads": lambda r: r.downloads,
    "likes": lambda r: r.likes,
    "lastModified": lambda r: r.last_modified,
    "createdAt": lambda r: r.created_at,
    "trendingScore": lambda r: r.downloads,
}

_RANGE_RE = re.compile(r"bytes=(\d+)-(\d*)$")


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        return

    # -- helpers -------------------------------------------------------------------------

    def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, status: int, code: str | None, message: str) -> None:
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send_json(status, {"error": message}, headers)

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization")
        if auth and auth.startswith("Bearer "):
            return auth[len("Bearer ") :]
        return None

    def _repo(self, repo_id: str) -> FakeRepo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
        return repo

    def _check_revision(self, repo: FakeRepo, revision: str) -> bool:
        if revision in ("main", repo.sha, repo.listed_sha):
            return True
        self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return False

    def _check_gate(self, repo: FakeRepo) -> bool:
        if not repo.gated:
            return True
        token = self._token()
        if token is None:
            self._error(
                401,
                "GatedRepo",
                f"Access to model {repo.repo_id} is restricted. You must have access to it "
                "and be authenticated to access it. Please log in.",
            )
            return False
        if token not in self.hub._grants.get(repo.repo_id, set()):
            self._error(
                403,
                "GatedRepo",
                f"Access to model {repo.repo_id} is restricted and you are not in the "
                f"authorized list. Visit https://huggingface.co/{repo.repo_id} to ask for access.",
            )
            return False
        return True

    # -- routing -------------------------------------------------------------------------

    def do_HEAD(self) -> None:
        self._route()

    def do_GET(self) -> None:
        self._route()

    def _route(self) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        query = parse_qs(url.query)
        self.hub.requests.append((self.command, path, self.headers.get("Range")))
        if auth := self.headers.get("Authorization"):
            on_cdn = self.server is self.hub._cdn
            (self.hub.cdn_auth_headers_seen if on_cdn else self.hub.auth_headers_seen).append(auth)
        kind = "api" if path.startswith("/api/") else self.command.lower()
        with self.hub._lock:
            pending = self.hub.fail_next.get(kind)
            status = pending.pop(0) if pending else None
        if status is not None:
            return self._error(status, None, "Service unavailable, try again")
        if kind in self.hub.hang:
            self.hub.stopping.wait(self.hub.hang_limit_s)  # accepted, never answered
            self.close_connection = True
            return
        if self.hub.proxy_page is not None and path.startswith("/api/"):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(self.hub.proxy_page)))
            self.end_headers()
            self.wfile.write(self.hub.proxy_page)
            return
        try:
            if path == "/api/models":
                return self._list_models(query)
            if path == "/api/whoami-v2":
                name = self.hub.users.get(self._token() or "")
                if name is None:
                    return self._error(401, None, "Invalid credentials in Authorization header")
                return self._send_json(200, {"name": name, "type": "user"})
            if path.startswith("/api/models/"):
                return self._model_api(path[len("/api/models/") :], query)
            if path.startswith("/__lfs__/"):
                return self._serve_lfs(path[len("/__lfs__/") :], query)
            m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
            if m and (self.hub.serve_unknown is None or self._known(m.group(1), m.group(3))):
                return self._resolve(m.group(1), m.group(2), m.group(3))
            if self.hub.serve_unknown is not None:
                repo_id, name = self.hub.serve_unknown
                return self._resolve(repo_id, "main", name)
            self._error(404, None, "Not found")
        except (BrokenPipeError, ConnectionResetError):
            return

    # -- API ------------------------------------------------------------------------------

    def _list_models(self, query: dict[str, list[str]]) -> None:
        repos = list(self.hub.repos.values())
        if search := query.get("search", [None])[0]:
            repos = [r for r in repos if search.lower() in r.repo_id.lower()]
        if author := query.get("author", [None])[0]:
            repos = [r for r in repos if r.author == author]
        for tag in query.get("filter", []):
            repos = [r for r in repos if tag in r.tags or tag == r.library_name]
        sort = query.get("sort", [None])[0]
        if sort:
            if sort not in _SORT_KEYS:
                return self._error(400, None, f"Invalid sort: {sort}")
            repos.sort(key=_SORT_KEYS[sort], reverse=True)
        expand = query.get("expand")
        limit = int(query.get("limit", ["0"])[0] or 0)
        page_size = limit or 50
        offset = int(query.get("cursor", ["0"])[0])
        page = repos[offset : offset + page_size]
        headers = {}
        if offset + page_size < len(repos) and not limit:
            params = dict(query)
            params["cursor"] = [str(offset + page_size)]
            qs = "&".join(f"{k}={quote(v)}" for k, vs in params.items() for v in vs)
            headers["Link"] = f'<{self.hub.endpoint}/api/models?{qs}>; rel="next"'
        default = ["downloads", "likes", "lastModified", "library_name", "tags", "pipeline_tag",
                   "private", "createdAt", "gated"]
        self._send_json(200, [r.to_json(expand or default) for r in page], headers)

    def _model_api(self, rest: str, query: dict[str, list[str]]) -> None:
        parts = rest.split("/")
        repo = self._repo("/".join(parts[:2]))
        if repo is None:
            return
        tail = parts[2:]
        if not tail or tail[0] == "revision":
            if tail and not self._check_revision(repo, tail[1]):
                return
            blobs = query.get("blobs", ["false"])[0].lower() == "true"
            return self._send_json(200, repo.to_json(query.get("expand"), blobs=blobs))
        if tail[0] == "tree" and len(tail) >= 2:
            if not self._check_revision(repo, tail[1]):
                return
            prefix = "/".join(tail[2:])
            recursive = query.get("recursive", ["false"])[0].lower() == "true"
            return self._send_json(200, _tree(repo, prefix, recursive))
        self._error(404, None, "Not found")

    def _known(self, repo_id: str, path: str) -> bool:
        repo = self.hub.repos.get(repo_id)
        return repo is not None and _file(repo, path) is not None

    def _resolve(self, repo_id: str, revision: str, path: str) -> None:
        repo = self._repo(repo_id)
        if repo is None or not self._check_revision(repo, revision):
            return
        if not self._check_gate(repo):
            return
        f = _file(repo, path)
        if f is None:
            return self._error(404, "EntryNotFound", f"{path} does not exist on main")
        etag = repo.etag_as.get(f.path, f.etag)
        common = {
            "X-Repo-Commit": repo.commit_header or repo.sha,
            "ETag": f'"{etag}"',
            "Accept-Ranges": "bytes",
        }
        if f.lfs:
            location = f"{self.hub.cdn_endpoint}/__lfs__/{f.sha256}?repo={quote(repo_id)}&path={quote(path)}"
            self.send_response(302)
            for k, v in common.items():
                self.send_header(k, v)
            self.send_header("X-Linked-Size", str(f.size))
            self.send_header("X-Linked-Etag", f'"{repo.etag_as.get(f.path, f.sha256)}"')
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._send_bytes(repo, f, common)

    def _serve_lfs(self, sha: str, query: dict[str, list[str]]) -> None:
        repo = self.hub.repos.get(query.get("repo", [""])[0])
        f = repo.files.get(query.get("path", [""])[0]) if repo else None
        if repo is None or f is None or f.sha256 != sha:
            return self._error(404, None, "Not found")
        self._send_bytes(repo, f, {"ETag": f'"{f.sha256}"', "Accept-Ranges": "bytes"})

    def _send_bytes(self, repo: FakeRepo, f: FakeFile, headers: dict[str, str]) -> None:
        start, end = 0, f.size
        status = 200
        rng = self.headers.get("Range")
        if rng:
            m = _RANGE_RE.match(rng.strip())
            if not m or int(m.group(1)) >= f.size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{f.size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start = int(m.group(1))
            end = min(int(m.group(2)) + 1, f.size) if m.group(2) else f.size
            status = 206
        overrun = self.hub.overrun_bytes if self.command == "GET" else None
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/octet-stream")
        if overrun is None:
            self.send_header("Content-Length", str(end - start))
        else:  # a body delimited by closing the connection, and longer than announced
            self.send_header("Connection", "close")
            self.close_connection = True
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{f.size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        if self.hub.trickle_bps or self.hub.stall_after is not None:
            return self._send_slowly(f, start, end)
        key = f"{repo.repo_id}/{f.path}"
        corrupt = self.hub._take_corruption(key)
        drop_after = self.hub._take_drop(key)
        pos = start
        began = time.monotonic()
        sent = 0
        reader = f.open_at(start)
        while pos < end:
            block = reader(min(_SERVE_SLICE, end - pos))
            if corrupt:
                block = bytes(b ^ 0xFF for b in block[:16]) + block[16:]
            # counted before the write so a test that already holds every byte also sees
            # the count (a client that hangs up mid-write makes it over-count one slice)
            self.hub.bytes_served[key] += len(block)
            self.wfile.write(block)
            pos += len(block)
            sent += len(block)
            if drop_after is not None and sent >= drop_after:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            bps = self.hub.throttle_bps
            if bps:
                ahead = sent / bps - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
        if overrun:
            self._send_overrun(key, overrun)

    def _send_overrun(self, key: str, n: int) -> None:
        """Keep sending past the announced size; counted, so a test sees what was offered."""
        block = b"\0" * _SERVE_SLICE
        while n > 0 and not self.hub.stopping.is_set():
            part = block[: min(n, _SERVE_SLICE)]
            self.hub.bytes_served[key + "#overrun"] += len(part)
            self.wfile.write(part)
            n -= len(part)

    def _send_slowly(self, f: FakeFile, start: int, end: int) -> None:
        """A trickle (one byte at a time) or a stall (some bytes, then silence)."""
        reader = f.open_at(start)
        deadline = time.monotonic() + self.hub.hang_limit_s
        pos = start
        while pos < end and time.monotonic() < deadline and not self.hub.stopping.is_set():
            if self.hub.stall_after is not None and pos - start >= self.hub.stall_after:
                self.hub.stopping.wait(max(deadline - time.monotonic(), 0))
                break
            self.wfile.write(reader(1))
            self.wfile.flush()
            pos += 1
            if self.hub.trickle_bps:
                self.hub.stopping.wait(1 / self.hub.trickle_bps)
        self.close_connection = True


def _file(repo: FakeRepo, path: str) -> FakeFile | None:
    """The file served at `path`: by its name, or by the name the listing gives it."""
    if path in repo.files:
        return repo.files[path]
    return next((f for p, f in repo.files.items() if repo.listed_as.get(p) == path), None)


def _tree(repo: FakeRepo, prefix: str, recursive: bool) -> list[dict[str, Any]]:
    """Entries under `prefix`, as the Hub's tree endpoint lists them."""
    out: list[dict[str, Any]] = []
    dirs: set[str] = set()
    base = prefix.rstrip("/") + "/" if prefix else ""
    for f in sorted(repo.files.values(), key=lambda f: f.path):
        if not f.path.startswith(base):
            continue
        rest = f.path[len(base) :]
        if "/" in rest and not recursive:
            dirs.add(base + rest.split("/")[0])
            continue
        if recursive:
            parts = f.path.split("/")
            for i in range(len(base.split("/")) if base else 1, len(parts)):
                dirs.add("/".join(parts[:i]))
        entry: dict[str, Any] = {"type": "file", "oid": f.git_oid, "size": f.size, "path": f.path}
        if f.lfs:
            entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
        out.append(entry)
    folders = [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d} for d in sorted(dirs)]
    return folders + out


def now_iso() -> str:
    """A Hub-style timestamp, for tests that build repos with recency."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def main(argv: list[str] | None = None) -> int:
    """Serve one repo from files on disk in this process (benchmarks use it so the server
    does not share a GIL with the client being measured). Prints the endpoint, then serves
    until stdin closes."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="loopback fake of the Hugging Face Hub")
    parser.add_argument("--repo", required=True)
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    hub = FakeHub()
    hub.add_repo(args.repo, {p.name: p for p in args.files}, library_name="gguf", tags=["gguf"])
    with hub:
        print(json.dumps({"endpoint": hub.endpoint}), flush=True)
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

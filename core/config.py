"""User settings, typed, read from and written to a TOML file in the config dir.

The file is written only on a deliberate save; a missing file means defaults. An
invalid file is reported (with the path) and defaults are used, so a typo never stops
the app from starting.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import tomli_w

from core import paths
from core.engines.base import DEFAULT_PENALTY_WINDOW, SamplingParams


@dataclass
class Sampling:
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    max_tokens: int = 1024
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_window: int = DEFAULT_PENALTY_WINDOW  # tokens each penalty looks back over
    seed: int = -1  # -1: a fresh random seed for every reply (TOML has no null)

    def to_params(self, stop: tuple[str, ...] = (), seed: int | None = None) -> SamplingParams:
        if seed is None and self.seed >= 0:
            seed = self.seed
        w = self.penalty_window
        return SamplingParams(
            temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
            min_p=self.min_p, repetition_penalty=self.repetition_penalty,
            max_tokens=self.max_tokens, stop=stop, seed=seed,
            presence_penalty=self.presence_penalty, frequency_penalty=self.frequency_penalty,
            repetition_context_size=w, presence_context_size=w, frequency_context_size=w,
        )


@dataclass
class RemoteEndpoint:
    """An OpenAI-compatible server (vLLM, llama.cpp server, Ollama, another llmdeck).

    `url` is the API base as the openai client takes it (e.g. http://gpu-box:8000/v1);
    the key comes from `api_key`, or from the environment variable named by
    `api_key_env` so it need not sit in the settings file.
    """

    name: str
    url: str
    api_key: str = ""
    api_key_env: str = ""
    models: list[str] = field(default_factory=list)

    def key(self) -> str:
        return os.environ.get(self.api_key_env, "") if self.api_key_env else self.api_key


MCP_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@dataclass
class McpServerConfig:
    """An MCP server whose tools the model may call (core.tools.mcp): either a `command`
    with `args` and `env` (stdio) or a `url` with `headers` (streamable HTTP)."""

    name: str
    command: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    enabled: bool = True
    timeout_s: float = 60.0  # one tool call; start-up has its own limit

    def problem(self) -> str | None:
        """Why this entry cannot be used, as a sentence, or None."""
        if not self.name or not set(self.name) <= MCP_NAME_CHARS:
            return (f"MCP server name {self.name!r} must be letters, digits, _ or - "
                    "(it prefixes the tool names, as in name.tool)")
        if bool(self.command) == bool(self.url):
            return f"MCP server {self.name!r} needs either a command (stdio) or a url (HTTP), not both"
        if self.url and not self.url.startswith(("http://", "https://")):
            return f"MCP server {self.name!r}: url must start with http:// or https://"
        if not isinstance(self.timeout_s, (int, float)) or self.timeout_s <= 0:
            return f"MCP server {self.name!r}: timeout_s must be a positive number of seconds"
        return None

    def target(self) -> str:
        """The command line or URL, as the settings screen and the status pane show it."""
        return self.url or " ".join([self.command, *self.args])


@dataclass
class Settings:
    model: str | None = None  # path to a .gguf or an MLX model dir; None = bundled
    engine: str | None = None  # None = choose from the artifact
    context_size: int = 4096
    system_prompt: str = ""
    theme: str = "llmdeck-dark"
    replicas: int = 0  # workers per model; 0 = the engine's default (llama.cpp 2, MLX 1)
    idle_unload_minutes: float = 0  # unload an idle model to free memory; 0 = never
    # Prompt-lookup drafts for a lone greedy reply (core.engines.speculative); read at load.
    speculative: bool = True
    draft_model: str | None = None  # an MLX model folder of the same family: guesses on MLX
    sampling: Sampling = field(default_factory=Sampling)
    remotes: list[RemoteEndpoint] = field(default_factory=list)
    tools_enabled: bool = True  # offer tools to models whose output format has tool calls
    python_asks: bool = True  # ask before each python tool run (False: run without asking)
    python_timeout_s: float = 30.0
    python_memory_mb: int = 1024
    attach_max_mb: float = 20  # attachments over this many MiB are refused (core.docs)
    vision_model: str | None = None  # an mlx-vlm model folder: describes images for text models
    vision_idle_unload_s: float = 180.0  # the vision model unloads after this long unused
    serve_allow_file_urls: bool = False  # `llmdeck serve`: accept file:// image URLs
    mcp_servers: list[McpServerConfig] = field(default_factory=list)  # [[mcp_servers]]
    # What `llmdeck mcp` offers other agents; nothing unless the person turns it on.
    mcp_share_conversations: bool = False
    mcp_share_documents: bool = False
    problems: list[str] = field(default_factory=list, repr=False, compare=False)

    @classmethod
    def load(cls, path: Path | None = None) -> Settings:
        path = path or paths.config_path()
        settings = cls()
        if not path.is_file():
            return settings
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            settings.problems.append(f"{path}: {exc}; using defaults")
            return settings
        settings._apply(data)
        return settings

    def _apply(self, data: dict[str, Any]) -> None:
        names = {f.name for f in fields(self)} - {"sampling", "problems", "remotes", "mcp_servers"}
        for key, value in data.items():
            if key in names:
                setattr(self, key, value)
        samp = data.get("sampling", {})
        snames = {f.name for f in fields(Sampling)}
        for key, value in samp.items() if isinstance(samp, dict) else ():
            if key in snames:
                setattr(self.sampling, key, value)
        self.remotes = []
        for entry in data.get("remotes", []) if isinstance(data.get("remotes"), list) else ():
            try:
                remote = RemoteEndpoint(**entry)
                if not remote.name or not remote.url.startswith(("http://", "https://")):
                    raise TypeError("needs a name and an http(s) url")
            except TypeError as exc:
                self.problems.append(f"remote endpoint {entry!r} ignored: {exc}")
                continue
            self.remotes.append(remote)
        self.mcp_servers = []
        entries = data.get("mcp_servers", [])
        for entry in entries if isinstance(entries, list) else ():
            try:
                server = McpServerConfig(**entry)
                problem = server.problem()
                if problem is None and self.mcp_server(server.name) is not None:
                    problem = f"a second MCP server is named {server.name!r}"
                if problem:
                    raise TypeError(problem)
            except TypeError as exc:
                self.problems.append(f"MCP server {entry!r} ignored: {exc}")
                continue
            self.mcp_servers.append(server)

    def remote(self, name: str) -> RemoteEndpoint | None:
        """The configured endpoint called `name` (None when there is none)."""
        return next((r for r in self.remotes if r.name == name), None)

    def mcp_server(self, name: str) -> McpServerConfig | None:
        return next((m for m in self.mcp_servers if m.name == name), None)

    def save(self, path: Path | None = None) -> None:
        path = path or paths.config_path()
        data = asdict(self)
        data.pop("problems", None)
        data = {k: v for k, v in data.items() if v is not None}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(tomli_w.dumps(data), encoding="utf-8")
        tmp.replace(path)

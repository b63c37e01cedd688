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
from core.engines.base import SamplingParams


@dataclass
class Sampling:
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    max_tokens: int = 1024

    def to_params(self, stop: tuple[str, ...] = (), seed: int | None = None) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
            min_p=self.min_p, repetition_penalty=self.repetition_penalty,
            max_tokens=self.max_tokens, stop=stop, seed=seed,
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


@dataclass
class Settings:
    model: str | None = None  # path to a .gguf or an MLX model dir; None = bundled
    engine: str | None = None  # None = choose from the artifact
    context_size: int = 4096
    system_prompt: str = ""
    theme: str = "llmdeck-dark"
    replicas: int = 0  # workers per model; 0 = the engine's default (llama.cpp 2, MLX 1)
    idle_unload_minutes: float = 0  # unload an idle model to free memory; 0 = never
    sampling: Sampling = field(default_factory=Sampling)
    remotes: list[RemoteEndpoint] = field(default_factory=list)
    tools_enabled: bool = True  # offer tools to models whose output format has tool calls
    python_asks: bool = True  # ask before each python tool run (False: run without asking)
    python_timeout_s: float = 30.0
    python_memory_mb: int = 1024
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
        names = {f.name for f in fields(self)} - {"sampling", "problems", "remotes"}
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

    def remote(self, name: str) -> RemoteEndpoint | None:
        """The configured endpoint called `name` (None when there is none)."""
        return next((r for r in self.remotes if r.name == name), None)

    def save(self, path: Path | None = None) -> None:
        path = path or paths.config_path()
        data = asdict(self)
        data.pop("problems", None)
        data = {k: v for k, v in data.items() if v is not None}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(tomli_w.dumps(data), encoding="utf-8")
        tmp.replace(path)

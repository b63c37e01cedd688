"""User settings, typed, read from and written to a TOML file in the config dir.

The file is written only on a deliberate save; a missing file means defaults. A file
that does not parse, or a value of the wrong type or out of range, is reported as a
sentence in `Settings.problems` (the app shows them at start, `llmdeck doctor` and
`llmdeck serve` print them) and the default stands in, so a typo never stops the app
from starting. A save that would drop what the file holds and llmdeck could not read
keeps the old file beside the new one first: a hand-written entry is never lost.
"""

from __future__ import annotations

import os
import re
import time
import tomllib
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import tomli_w

from core import paths
from core import settings_rules as rules
from core.engines.base import DEFAULT_PENALTY_WINDOW, ROOM_LEFT, SamplingParams
from core.settings_rules import Refused


@dataclass
class Sampling:
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    max_tokens: int = 0  # 0: no cap, a reply may use the room left in the context
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
            max_tokens=self.max_tokens or ROOM_LEFT, stop=stop, seed=seed,
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

    def problem(self) -> str | None:
        """Why this entry cannot be used, as a sentence, or None."""
        if not self.name or not self.url.startswith(("http://", "https://")):
            return "needs a name and an http(s) url"
        return None


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
            return (f"MCP server name {_shown(self.name)} must be letters, digits, _ or - "
                    "(it prefixes the tool names, as in name.tool)")
        if bool(self.command) == bool(self.url):
            return f"MCP server {_shown(self.name)} needs either a command (stdio) or a url (HTTP), not both"
        if self.url and not self.url.startswith(("http://", "https://")):
            return f"MCP server {_shown(self.name)}: url must start with http:// or https://"
        if not isinstance(self.timeout_s, (int, float)) or self.timeout_s <= 0:
            return f"MCP server {_shown(self.name)}: timeout_s must be a positive number of seconds"
        return None

    def target(self) -> str:
        """The command line or URL, as the settings screen and the status pane show it."""
        return self.url or " ".join([self.command, *self.args])


@dataclass
class ClusterConfig:
    """One model served across several machines by MLX's own distributed engine
    (core.cluster: mlx.launch running mlx-lm's server, rank 0 answering the OpenAI API).

    `hosts` (IP addresses, rank 0 first) or `hostfile` (mlx.launch's JSON hostfile, which
    names SSH hosts with their IPs and, for jaccl, their RDMA devices) say where the ranks
    run; `model` is the model folder as every host sees it, `python` the interpreter with
    mlx and mlx-lm on every host ("" = the one running llmdeck). Ports of 0 are picked free.
    """

    name: str
    model: str
    hosts: list[str] = field(default_factory=list)
    hostfile: str = ""
    backend: str = "ring"
    mode: str = "tensor"
    python: str = ""
    port: int = 0  # rank 0's HTTP port
    ring_port: int = 0  # the ring's first port (one more per rank)
    # A cluster started on demand (the app's model, not `cluster up`) stops every rank after
    # this long with no request (core.cluster.on_demand); 0 keeps it up until the app quits.
    idle_minutes: float = 15.0

    def problem(self) -> str | None:
        """Why this entry cannot be used, as a sentence, or None."""
        try:
            rules.cluster_name(self.name)
            rules.cluster_backend(self.backend)
            rules.cluster_mode(self.mode)
            for label, port in (("port", self.port), ("ring_port", self.ring_port)):
                if not isinstance(port, int) or isinstance(port, bool):
                    raise Refused(f"{label} must be a whole number.")
                rules.cluster_port(str(port), f"The cluster's {label}")
            for host in self.hosts:
                rules.cluster_host(host)
            if not 0 <= self.idle_minutes <= 7 * 24 * 60:
                raise Refused("idle_minutes must be between 0 (never) and 10080 (a week).")
        except Refused as exc:
            return f"cluster {_shown(self.name)}: {exc}"
        if bool(self.hosts) == bool(self.hostfile):
            return (f"cluster {_shown(self.name)} needs either hosts (a list of IP addresses, rank 0 "
                    "first) or a hostfile (mlx.launch's JSON), not both")
        if self.hosts and len(self.hosts) < 2:
            return f"cluster {_shown(self.name)} needs two hosts or more (one host is just a model)"
        if self.backend == "jaccl" and not self.hostfile:
            return (f"cluster {_shown(self.name)}: jaccl needs a hostfile naming each Mac's RDMA "
                    "devices (mlx.distributed_config --backend jaccl writes one)")
        if self.hosts and self.backend == "ring" and not all(_is_ip(h) for h in self.hosts):
            return (f"cluster {_shown(self.name)}: the ring backend connects to IP addresses; give "
                    "hosts as IPs, or a hostfile with each host's ssh name and ips")
        if not self.model.startswith(("/", "~")):
            return (f"cluster {_shown(self.name)}: model must be the model folder's full path as "
                    "every host sees it")
        return None


def _is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


@dataclass
class Settings:
    model: str | None = None  # path to a .gguf or an MLX model dir; None = bundled
    engine: str | None = None  # None = choose from the artifact
    context_size: int = 4096
    system_prompt: str = ""
    theme: str = "llmdeck-dark"
    replicas: int = 0  # workers per model; 0 = the engine's default (llama.cpp 2, MLX 1)
    idle_unload_minutes: float = 0  # unload an idle model to free memory; 0 = never
    service_idle_minutes: float = 30  # the engine service exits this long after its last client; 0 = never
    # Prompt-lookup drafts for a lone greedy reply (core.engines.speculative); read at load.
    speculative: bool = True
    draft_model: str | None = None  # an MLX model folder of the same family: guesses on MLX
    # The chat template's thinking switch (Qwen3's enable_thinking); None: the model's
    # default. Usually set by the model's preset (core.presets).
    thinking: bool | None = None
    sampling: Sampling = field(default_factory=Sampling)
    remotes: list[RemoteEndpoint] = field(default_factory=list)
    tools_enabled: bool = True  # offer tools to models whose output format has tool calls
    python_asks: bool = True  # ask before each python tool run (False: run without asking)
    python_timeout_s: float = 30.0
    python_memory_mb: int = 1024  # all of a sandbox's processes together (and each one's)
    python_scratch_mb: int = 256  # a sandbox's /tmp, its working folder (a tmpfs in the jail)
    attach_max_mb: float = 20  # attachments over this many MiB are refused (core.docs)
    vision_model: str | None = None  # an mlx-vlm model folder: describes images for text models
    vision_idle_unload_s: float = 180.0  # the vision model unloads after this long unused
    memory_budget_gb: float = 0  # what loaded models may take together; 0 = automatic
    kv_disk_gb: float = 4  # KV caches kept on disk between runs (core.engines.kv_store); 0 = off
    serve_allow_file_urls: bool = False  # `llmdeck serve`: accept file:// image URLs
    # `llmdeck serve`'s key (`api_key = "..."`); LLMDECK_API_KEY and --api-key come first.
    api_key: str | None = None
    mcp_servers: list[McpServerConfig] = field(default_factory=list)  # [[mcp_servers]]
    # What `llmdeck mcp` offers other agents; nothing unless the person turns it on.
    mcp_share_conversations: bool = False
    mcp_share_documents: bool = False
    clusters: list[ClusterConfig] = field(default_factory=list)  # [[clusters]] (core.cluster)
    # Other names for local models, for API clients and scripts: [aliases] fast = "gemma3:270m-q4_k_m"
    aliases: dict[str, str] = field(default_factory=dict)
    # How long each model stays loaded once idle (core.keep_alive: "30m", 0, -1), by id or
    # alias; a model not named here uses idle_unload_minutes.
    keep_alive: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list, repr=False, compare=False)

    @classmethod
    def load(cls, path: Path | None = None) -> Settings:
        path = path or paths.config_path()
        settings = cls()
        if not path.is_file():
            return settings
        try:
            data = tomllib.loads(_tables_over_empty_lists(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:
            settings.problems.append(f"{path} could not be read ({exc}); using the defaults")
            return settings
        settings._apply(data)
        return settings

    def _apply(self, data: dict[str, Any]) -> None:
        """Take every value that passes its rule; each one refused (or unknown) becomes a
        sentence in self.problems and leaves the default in place."""
        for key, value in data.items():
            if key in _SECTIONS:
                continue
            check = _TOP_LEVEL.get(key)
            if check is None:
                self.problems.append(f"unknown setting {key!r} ignored")
                continue
            try:
                setattr(self, key, check(value))
            except Refused as exc:
                self.problems.append(f"{key} = {_shown(value)} ignored: {exc} "
                                     f"Using {_shown(getattr(self, key))}.")
        self._apply_sampling(data.get("sampling", {}))
        self.remotes = self._entries(data, "remotes", RemoteEndpoint, "remote endpoint",
                                     lambda remote, kept: remote.problem())
        self.mcp_servers = self._entries(data, "mcp_servers", McpServerConfig, "MCP server",
                                         _mcp_problem)
        self.clusters = self._entries(data, "clusters", ClusterConfig, "cluster", _cluster_problem)
        self.aliases = self._names(data, "aliases", _alias_target)
        self.keep_alive = self._names(data, "keep_alive", _keep_alive_value)

    def _names(self, data: dict[str, Any], key: str,
               check: Callable[[Any], str]) -> dict[str, str]:
        """A [key] table of model names to values; each entry refused is a problem."""
        table = data.get(key, {})
        if not isinstance(table, dict):
            self.problems.append(f"{key} = {_shown(table)} ignored: it must be a [{key}] table "
                                 "of model names")
            return {}
        kept: dict[str, str] = {}
        for name, value in list(table.items())[:MAX_NAMES]:
            try:
                if not _MODEL_NAME.fullmatch(name):
                    raise Refused("a name is letters, digits and . _ - : / (at most 200).")
                kept[name] = check(value)
            except Refused as exc:
                self.problems.append(f"{key}.{name[:60]!r} = {_shown(value)} ignored: {exc}")
        if len(table) > MAX_NAMES:
            self.problems.append(f"{key}: only the first {MAX_NAMES} entries are read")
        return kept

    def keep_alive_for(self, *names: str) -> float | None:
        """How long a model stays loaded once idle, from [keep_alive], by the first of its
        `names` listed (its id, an alias of it): seconds, -1.0 for ever, None when it is
        not listed (idle_unload_minutes then)."""
        from core import keep_alive

        listed = [n for n in names if n in self.keep_alive]
        listed += [a for a, target in self.aliases.items() if target in names and a in self.keep_alive]
        if not listed:
            return None
        seconds = keep_alive.parse(self.keep_alive[listed[0]])
        return -1.0 if seconds is None else seconds

    def _apply_sampling(self, samp: Any) -> None:
        if not isinstance(samp, dict):
            self.problems.append(f"sampling = {_shown(samp)} ignored: it must be a [sampling] "
                                 "table. Using the default sampling.")
            return
        for key, value in samp.items():
            if key not in _SAMPLING:
                self.problems.append(f"unknown setting sampling.{key} ignored")
                continue
            check = _SAMPLING[key]
            try:
                if check is None:  # max_tokens: below this file's own context size
                    checked = rules.max_tokens(_as_text(value), self.context_size)
                else:
                    checked = check(value)
                setattr(self.sampling, key, checked)
            except Refused as exc:
                self.problems.append(f"sampling.{key} = {_shown(value)} ignored: {exc} "
                                     f"Using {_shown(getattr(self.sampling, key))}.")

    def _entries(self, data: dict[str, Any], key: str, cls: type, what: str,
                 problem: Callable[[Any, list[Any]], str | None]) -> list[Any]:
        """The [[key]] tables that make a usable `cls`; each other one is a problem."""
        entries = data.get(key, [])
        if not isinstance(entries, list):
            self.problems.append(f"{key} = {_shown(entries)} ignored: it must be a list of "
                                 f"[[{key}]] tables")
            return []
        kept: list[Any] = []
        for entry in entries:
            try:
                if not isinstance(entry, dict):
                    raise TypeError(f"it must be a [[{key}]] table")
                wrong = _wrong_type(cls, entry)
                if wrong:
                    raise TypeError(wrong)
                made = cls(**entry)
                why = problem(made, kept)
                if why:
                    raise TypeError(why)
            except TypeError as exc:
                name = entry.get("name") if isinstance(entry, dict) else None
                shown = _shown(name if isinstance(name, str) else entry)
                self.problems.append(f"{what} {shown} in [[{key}]] ignored: {exc}")
                continue
            kept.append(made)
        return kept

    def remote(self, name: str) -> RemoteEndpoint | None:
        """The configured endpoint called `name` (None when there is none)."""
        return next((r for r in self.remotes if r.name == name), None)

    def mcp_server(self, name: str) -> McpServerConfig | None:
        return next((m for m in self.mcp_servers if m.name == name), None)

    def cluster(self, name: str) -> ClusterConfig | None:
        """The configured [[clusters]] entry called `name` (None when there is none)."""
        return next((c for c in self.clusters if c.name == name), None)

    def save(self, path: Path | None = None) -> Path | None:
        """Write the settings (atomically). Returns where the old file was kept: it is
        copied aside first when it holds something llmdeck could not read (a syntax error,
        a refused value, an unknown key), which this save would otherwise drop."""
        path = path or paths.config_path()
        data = asdict(self)
        data.pop("problems", None)
        # no `mcp_servers = []` and the like: a [[mcp_servers]] table added by hand below
        # it, as the README shows, made the whole file unreadable
        data = {k: v for k, v in data.items()
                if v is not None and not (k in _OMIT_WHEN_EMPTY and not v)}
        kept = _keep_unreadable(path)
        tmp = path.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)  # made afresh, private: it may hold an API key
        _write_private(tmp, tomli_w.dumps(data).encode("utf-8"))
        tmp.replace(path)
        self.problems.clear()  # they described the old file; the new one has none
        return kept


_TABLE_LISTS = ("remotes", "mcp_servers", "clusters")  # [[name]] tables in the file
_OMIT_WHEN_EMPTY = ("aliases", "keep_alive", *_TABLE_LISTS)


def _tables_over_empty_lists(text: str) -> str:
    """The file's text without a top-level `mcp_servers = []` (or remotes, clusters) when
    it also has `[[mcp_servers]]` tables: earlier saves wrote the empty list, and a table
    added by hand below it (the README's way) is what the person meant, not a TOML error
    that loses every setting."""
    for key in _TABLE_LISTS:
        if re.search(rf"(?m)^\s*\[\[\s*{key}\s*\]\]", text):
            text = re.sub(rf"(?m)^\s*{key}\s*=\s*\[\s*\]\s*(#.*)?$", "", text)
    return text


MAX_NAMES = 256
_MODEL_NAME = re.compile(r"[A-Za-z0-9._:/-]{1,200}")


def _alias_target(value: Any) -> str:
    if not isinstance(value, str) or not _MODEL_NAME.fullmatch(value):
        raise Refused("an alias names a model id like \"gemma3:270m-q4_k_m\" (letters, digits "
                      "and . _ - : /).")
    return value


def _keep_alive_value(value: Any) -> str:
    from core import keep_alive

    try:
        keep_alive.parse(value)
    except keep_alive.KeepAliveError as exc:
        raise Refused(str(exc)) from None
    return value if isinstance(value, str) else repr(value)


def _mcp_problem(server: McpServerConfig, kept: list[Any]) -> str | None:
    if (why := server.problem()) is not None:
        return why
    if any(m.name == server.name for m in kept):
        return f"a second MCP server is named {server.name!r}"
    return None


def _cluster_problem(cluster: ClusterConfig, kept: list[Any]) -> str | None:
    if (why := cluster.problem()) is not None:
        return why
    if any(c.name == cluster.name for c in kept):
        return f"a second cluster is named {_shown(cluster.name)}"
    return None


def _keep_unreadable(path: Path) -> Path | None:
    """Copy the config file aside when a save would lose some of it; None when it is
    absent or llmdeck read all of it."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None  # absent (or a folder: the write that follows says so)
    try:
        probe = Settings()
        probe._apply(tomllib.loads(_tables_over_empty_lists(raw.decode("utf-8"))))
        if not probe.problems:
            return None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        pass
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    kept = path.with_name(f"{path.stem}.kept-{stamp}{path.suffix}")
    n = 1
    while kept.exists():
        n += 1
        kept = path.with_name(f"{path.stem}.kept-{stamp}-{n}{path.suffix}")
    # a copy, as private as the file (it may hold a key): the real file stays whole
    # until the atomic replace
    _write_private(kept, raw)
    return kept


def _write_private(path: Path, data: bytes) -> None:
    """A new file (never one already there) readable by the user alone: config files may
    hold an API key."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(data)


def kept_notice(kept: Path) -> str:
    """What to tell the person after a save that kept the old file aside."""
    return (f"The settings file held entries llmdeck could not read; the old file is kept "
            f"as {kept.name}, beside the new one.")


# -- reading values from the file -------------------------------------------------------------

def _shown(value: Any) -> str:
    """A value as the person wrote it, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _as_text(value: Any) -> str:
    """A TOML value as the text a rule of core.settings_rules reads: a bool or a table is
    no number, so it goes through as something no number parses from."""
    return str(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) \
        else "(not a number)"


def _ruled(rule: Callable[[str], Any]) -> Callable[[Any], Any]:
    return lambda value: rule(_as_text(value))


def _flag(label: str) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        if not isinstance(value, bool):
            raise Refused(f"{label} must be true or false.")
        return value
    return check


def _words(label: str, *, optional: bool = False) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if not isinstance(value, str):
            raise Refused(f"{label} must be text in quotes.")
        return (value or None) if optional else value
    return check


def _seed(value: Any) -> int:
    """-1 (a fresh random seed a reply) as stored, or a seed the rule takes."""
    return -1 if value == -1 and not isinstance(value, bool) else rules.seed(_as_text(value))


# Every top-level setting's check (sections are read on their own).
_TOP_LEVEL: dict[str, Callable[[Any], Any]] = {
    "model": _words("The model", optional=True),
    "engine": _words("The engine", optional=True),
    "context_size": _ruled(rules.context_size),
    "system_prompt": _words("The system prompt"),
    "theme": _words("The theme"),
    "replicas": _ruled(rules.replicas),
    "idle_unload_minutes": _ruled(rules.idle_unload_minutes),
    "service_idle_minutes": _ruled(rules.service_idle_minutes),
    "speculative": _flag("speculative"),
    "draft_model": _words("The draft model", optional=True),
    "thinking": _flag("thinking"),
    "tools_enabled": _flag("tools_enabled"),
    "python_asks": _flag("python_asks"),
    "python_timeout_s": _ruled(rules.python_timeout),
    "python_memory_mb": _ruled(rules.python_memory),
    "python_scratch_mb": _ruled(rules.python_scratch),
    "attach_max_mb": _ruled(rules.attach_max_mb),
    "vision_model": _words("The vision model", optional=True),
    "vision_idle_unload_s": _ruled(rules.vision_idle_unload_s),
    "memory_budget_gb": _ruled(rules.memory_budget_gb),
    "kv_disk_gb": _ruled(rules.kv_disk_gb),
    "serve_allow_file_urls": _flag("serve_allow_file_urls"),
    "api_key": _words("api_key", optional=True),
    "mcp_share_conversations": _flag("mcp_share_conversations"),
    "mcp_share_documents": _flag("mcp_share_documents"),
}
_SECTIONS = frozenset({"sampling", "remotes", "mcp_servers", "clusters", "aliases", "keep_alive"})

_SAMPLING: dict[str, Callable[[Any], Any] | None] = {
    "temperature": _ruled(rules.temperature),
    "top_p": _ruled(rules.top_p),
    "top_k": _ruled(rules.top_k),
    "min_p": _ruled(rules.min_p),
    "repetition_penalty": _ruled(rules.repetition_penalty),
    "max_tokens": None,  # needs the context size (Settings._apply_sampling)
    "presence_penalty": _ruled(rules.presence_penalty),
    "frequency_penalty": _ruled(rules.frequency_penalty),
    "penalty_window": _ruled(rules.penalty_window),
    "seed": _seed,
}


def _wrong_type(cls: type, entry: dict[str, Any]) -> str | None:
    """A key of a [[remotes]], [[mcp_servers]] or [[clusters]] table that llmdeck does not
    read, or a known key's value of the wrong type, as a sentence naming it."""
    hints = get_type_hints(cls)
    known = [f.name for f in fields(cls)]
    unknown = [key for key in entry if key not in known]
    if unknown:
        return (f"unknown key {unknown[0][:60]!r} (llmdeck reads {', '.join(known)}); the "
                "whole entry is left out until it is removed or renamed")
    for key, value in entry.items():
        want = hints.get(key)
        if want is not None and not _is_a(value, want):
            return f"{key} must be {_TYPE_WORDS.get(want, 'something else')}"
    missing = [f.name for f in fields(cls) if f.name not in entry
               and f.default is MISSING and f.default_factory is MISSING]
    return f"it needs {' and '.join(missing)}" if missing else None


def _is_a(value: Any, want: Any) -> bool:
    if want is bool:
        return isinstance(value, bool)
    if want is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if want is str:
        return isinstance(value, str)
    origin, args = get_origin(want), get_args(want)
    if origin is list:
        return isinstance(value, list) and all(isinstance(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            isinstance(k, args[0]) and isinstance(v, args[1]) for k, v in value.items())
    return True


_TYPE_WORDS: dict[Any, str] = {
    str: "text in quotes", bool: "true or false", float: "a number",
    list[str]: "a list of texts in quotes", dict[str, str]: "a table of texts in quotes",
}

"""Per-model presets: each model remembers its own sampling, context size, system prompt
and thinking switch, and a new chat with it starts from them (issue 31, item 4).

Where they live: presets.toml beside config.toml, one table per model keyed by its short
id (core.model_ids), so a person can read and edit it:

    [presets."qwen3:4b-4bit"]
    context_size = 8192
    system_prompt = "You are terse."
    thinking = false
    [presets."qwen3:4b-4bit".sampling]
    temperature = 0.6
    top_p = 0.95

Why a file of its own and not a [presets] table in config.toml: Settings.save rewrites
config.toml from the Settings fields and copies a file holding anything it cannot read
aside, so a table it does not know would be dropped on the next save; presets are also
written from another place (the settings screen's "save as preset") at another time.

Every value passes the same rule as in the settings (core.settings_rules); a refused
value, an unknown key or a damaged file becomes a sentence in `problems`, never an
exception, and the rest of the file still counts.

`thinking` (true/false, absent: the model's own default) goes into Settings.thinking
when the preset is applied, and from there into each GenerationRequest; the engines pass
it to chat templates that have the switch (`thinking_switch`: Qwen3's enable_thinking)
and ignore it for the others.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomli_w

from core import model_ids, paths
from core import settings_rules as rules

if TYPE_CHECKING:
    from core.config import Settings

FILE_NAME = "presets.toml"
MAX_FILE_BYTES = 1 << 20  # a preset file is a few KiB; a bigger one is not read
MAX_PRESETS = 512
MAX_SYSTEM_PROMPT = 100_000
SAMPLING_RULES = {
    "temperature": rules.temperature, "top_p": rules.top_p, "top_k": rules.top_k,
    "min_p": rules.min_p, "repetition_penalty": rules.repetition_penalty,
    "presence_penalty": rules.presence_penalty, "frequency_penalty": rules.frequency_penalty,
    "penalty_window": rules.penalty_window, "seed": rules.seed,
}
SAMPLING_KEYS = (*SAMPLING_RULES, "max_tokens")  # max_tokens is checked against the context


@dataclass
class Preset:
    """What one model remembers; None / absent keys leave the global setting as it is."""

    sampling: dict[str, float | int] = field(default_factory=dict)
    context_size: int | None = None
    system_prompt: str | None = None
    thinking: bool | None = None  # None: the model's own default

    def to_toml(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.context_size is not None:
            out["context_size"] = self.context_size
        if self.system_prompt is not None:
            out["system_prompt"] = self.system_prompt
        if self.thinking is not None:
            out["thinking"] = self.thinking
        if self.sampling:
            out["sampling"] = dict(self.sampling)
        return out


@dataclass
class Presets:
    """Every model's preset by id, and what could not be read (sentences)."""

    by_model: dict[str, Preset] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def get(self, model_id: str) -> Preset | None:
        return self.by_model.get(model_id)


def presets_path() -> Path:
    return paths.config_dir() / FILE_NAME


def model_key(model: str | None, label: str) -> str:
    """The id a preset is filed under: the listed model's short id when the local models
    list has it (the id `llmdeck serve` answers to), else the id its file name makes, else
    the one its display label makes. Reads the disk: call it in a thread."""
    if model:
        from core.model_catalog import ModelCatalog

        try:
            catalog = ModelCatalog()
            catalog.entries()
            entry = catalog.by_path(model)
        except Exception:  # a damaged cache must not lose the preset: fall back to the name
            entry = None
        if entry is not None:
            return entry.id
        return model_ids.base_id(Path(model).expanduser().name)
    return model_ids.base_id(label)


@lru_cache(maxsize=64)
def cached_key(model: str | None, label: str) -> str:
    """model_key, read once per path: listing the local models walks the disk, and a file
    keeps its id (core.model_ids)."""
    return model_key(model, label)


def find(model: str | None, label: str) -> tuple[str, Preset | None]:
    """(the id `model` is filed under, its preset or None). Reads the disk: in a thread."""
    key = cached_key(model, label)
    return key, load().get(key)


def save_current(settings: Settings, model: str | None, label: str) -> tuple[str, Path]:
    """File `settings` as the preset of `model` (a path; None: the label names it): (its
    id, the file). A thinking switch set in the file by hand is kept. Reads and writes the
    disk: in a thread."""
    key = cached_key(model, label)
    old = load().get(key)
    return key, save(key, from_settings(settings, old.thinking if old is not None else None))


def load(path: Path | None = None) -> Presets:
    """Read the presets file; a missing file is no presets, a damaged one a problem."""
    path = path or presets_path()
    found = Presets()
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return found
    except OSError as exc:
        found.problems.append(f"{path} could not be read ({exc.strerror or exc}).")
        return found
    if len(raw) > MAX_FILE_BYTES:
        found.problems.append(f"{path} is larger than {MAX_FILE_BYTES >> 10} KiB and was not read.")
        return found
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:
        found.problems.append(f"{path} could not be read ({exc}); no presets are used.")
        return found
    table = data.get("presets", {})
    if not isinstance(table, dict):
        found.problems.append("presets must be a [presets.\"model id\"] table per model.")
        return found
    for model_id, entry in list(table.items())[:MAX_PRESETS]:
        preset = _read_entry(str(model_id), entry, found.problems)
        if preset is not None:
            found.by_model[str(model_id)] = preset
    if len(table) > MAX_PRESETS:
        found.problems.append(f"only the first {MAX_PRESETS} presets were read.")
    return found


def _read_entry(model_id: str, entry: Any, problems: list[str]) -> Preset | None:
    where = f"preset {model_id!r}"
    if not isinstance(entry, dict):
        problems.append(f"{where} ignored: it must be a table.")
        return None
    preset = Preset()
    for key, value in entry.items():
        if key == "sampling":
            continue
        try:
            if key == "context_size":
                preset.context_size = rules.context_size(_text(value))
            elif key == "system_prompt":
                if not isinstance(value, str) or len(value) > MAX_SYSTEM_PROMPT:
                    raise rules.Refused(f"the system prompt must be text of at most "
                                        f"{MAX_SYSTEM_PROMPT:,} characters.")
                preset.system_prompt = value
            elif key == "thinking":
                if not isinstance(value, bool):
                    raise rules.Refused("thinking must be true or false.")
                preset.thinking = value
            else:
                raise rules.Refused("it is not a preset setting.")
        except rules.Refused as exc:
            problems.append(f"{where}: {key} ignored: {exc}")
    sampling = entry.get("sampling", {})
    if not isinstance(sampling, dict):
        problems.append(f"{where}: sampling ignored: it must be a table.")
        sampling = {}
    for key, value in sampling.items():
        try:
            if key == "max_tokens":
                context = preset.context_size or rules.MAX_CONTEXT
                preset.sampling[key] = rules.max_tokens(_text(value), context)
            elif key in SAMPLING_RULES:
                preset.sampling[key] = SAMPLING_RULES[key](_text(value))
            else:
                raise rules.Refused("it is not a sampling setting.")
        except rules.Refused as exc:
            problems.append(f"{where}: sampling.{key} ignored: {exc}")
    return preset


def _text(value: Any) -> str:
    """A TOML value as the rules take it (text, as typed); anything else is refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise rules.Refused("it must be a number.")
    return str(value)


def save(model_id: str, preset: Preset, path: Path | None = None) -> Path:
    """File `preset` under `model_id`, keeping every other model's (atomically). A file
    that could not be read is kept aside first (presets.kept.toml) rather than lost."""
    path = path or presets_path()
    current = load(path)
    if current.problems and path.exists():
        path.replace(path.with_name("presets.kept.toml"))
    current.by_model[model_id] = preset
    data = {"presets": {key: p.to_toml() for key, p in sorted(current.by_model.items())}}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(tomli_w.dumps(data), encoding="utf-8")
    tmp.replace(path)
    return path


def from_settings(settings: Settings, thinking: bool | None = None) -> Preset:
    """The current settings as a preset (what "save as this model's preset" files)."""
    s = settings.sampling
    return Preset(sampling={key: getattr(s, key) for key in SAMPLING_KEYS},
                  context_size=settings.context_size, system_prompt=settings.system_prompt,
                  thinking=thinking)


def apply(settings: Settings, preset: Preset) -> bool:
    """Put a preset's values into the settings; True when the context size changed (the
    model must load again for it)."""
    for key, value in preset.sampling.items():
        setattr(settings.sampling, key, value)
    if preset.system_prompt is not None:
        settings.system_prompt = preset.system_prompt
    settings.thinking = preset.thinking  # per model: unset means the model's own default
    changed = preset.context_size is not None and preset.context_size != settings.context_size
    if preset.context_size is not None:
        settings.context_size = preset.context_size
    if settings.sampling.max_tokens >= settings.context_size:  # a smaller context: still valid
        settings.sampling.max_tokens = max(1, settings.context_size // 2)
    return changed


def thinking_switch(info: dict[str, Any]) -> bool:
    """Whether the loaded model's chat template has a thinking switch (Qwen3's
    enable_thinking and the templates that copied it)."""
    template = info.get("chat_template")
    return isinstance(template, str) and "enable_thinking" in template

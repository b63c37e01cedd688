"""A config file written by hand, wrongly: every value of the wrong type or out of range
is refused with a sentence that names it, the default stands in, nothing raises, and a
save that would drop what llmdeck could not read keeps the old file first (real TOML
files in a temp dir)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import McpServerConfig, RemoteEndpoint, Settings

# (file text, the key a problem must name, (attribute path, the default that stays))
HOSTILE = [
    ('context_size = "big"\n', "context_size", ("context_size", 4096)),
    ("context_size = -5\n", "context_size", ("context_size", 4096)),
    ("context_size = nan\n", "context_size", ("context_size", 4096)),
    ("context_size = 8192.5\n", "context_size", ("context_size", 4096)),
    ("model = 12\n", "model", ("model", None)),
    ('system_prompt = ["a"]\n', "system_prompt", ("system_prompt", "")),
    ("theme = 7\n", "theme", ("theme", "llmdeck-dark")),
    ('replicas = "two"\n', "replicas", ("replicas", 0)),
    ('idle_unload_minutes = "soon"\n', "idle_unload_minutes", ("idle_unload_minutes", 0)),
    ('speculative = "yes"\n', "speculative", ("speculative", True)),
    ("python_memory_mb = 1\n", "python_memory_mb", ("python_memory_mb", 1024)),
    ("attach_max_mb = 0\n", "attach_max_mb", ("attach_max_mb", 20)),
    ('[sampling]\ntemperature = "hot"\n', "sampling.temperature", ("sampling.temperature", 0.7)),
    ("[sampling]\ntop_p = inf\n", "sampling.top_p", ("sampling.top_p", 0.95)),
    ("[sampling]\nmax_tokens = 5000\n", "sampling.max_tokens", ("sampling.max_tokens", 0)),
    ("[sampling]\ntop_k = true\n", "sampling.top_k", ("sampling.top_k", 40)),
    ("sampling = [1, 2]\n", "sampling", ("sampling.temperature", 0.7)),
    ("contxt_size = 8192\n", "contxt_size", ("context_size", 4096)),
    ('[[remotes]]\nname = 5\nurl = 7\n', "remote endpoint", ("remotes", [])),
    ('remotes = "x"\n', "remotes", ("remotes", [])),
    ('remotes = [1, "a"]\n', "remote endpoint", ("remotes", [])),
    ('[[remotes]]\nname = "gpu"\nurl = "http://g/v1"\nmodels = [1]\n', "models", ("remotes", [])),
    ('[[mcp_servers]]\nname = "a"\ncommand = 5\n', "command", ("mcp_servers", [])),
    ('[[mcp_servers]]\nname = "a"\ncommand = "x"\nenv = {A = 1}\n', "env", ("mcp_servers", [])),
    ('[[mcp_servers]]\ncommand = "x"\n', "needs name", ("mcp_servers", [])),
    ('mcp_servers = 5\n', "mcp_servers", ("mcp_servers", [])),
]


def value_at(settings: Settings, dotted: str):
    obj = settings
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize(("text", "named", "stays"), HOSTILE,
                         ids=[h[0].strip().replace("\n", " ")[:40] for h in HOSTILE])
def test_a_hostile_value_is_named_and_the_default_stands(tmp_path: Path, text: str, named: str,
                                                         stays: tuple) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    settings = Settings.load(path)
    assert len(settings.problems) >= 1 and named in settings.problems[0], settings.problems
    assert value_at(settings, stays[0]) == stays[1]


def test_good_values_beside_bad_ones_are_taken(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('context_size = 8192\nreplicas = "two"\nspeculative = false\n'
                    '[sampling]\ntemperature = 0.2\nseed = -1\nmax_tokens = 5000\ntop_p = 2\n'
                    '[[remotes]]\nname = "gpu"\nurl = "http://gpu:8000/v1"\n'
                    '[[remotes]]\nname = "bad"\nurl = "http://x/v1"\napi_key = 3\n',
                    encoding="utf-8")
    s = Settings.load(path)
    assert (s.context_size, s.speculative, s.sampling.temperature) == (8192, False, 0.2)
    assert s.sampling.max_tokens == 5000  # under the file's own context size
    assert s.sampling.seed == -1 and s.sampling.top_p == 0.95 and s.replicas == 0
    assert [r.name for r in s.remotes] == ["gpu"]
    assert len(s.problems) == 3 and "api_key must be text in quotes" in s.problems[2]


def test_a_file_that_is_not_utf8_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b'theme = "\xff\xfe"\n')
    s = Settings.load(path)
    assert s == Settings() and "could not be read" in s.problems[0]


def test_what_llmdeck_writes_it_reads_back_without_a_problem(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    s = Settings(model="/m/x.gguf", context_size=8192, idle_unload_minutes=2.5,
                 remotes=[RemoteEndpoint("gpu", "http://g/v1", models=["a"])],
                 mcp_servers=[McpServerConfig("fs", command="npx", args=["-y", "x"],
                                              env={"A": "1"})])
    s.sampling.seed = 7
    assert s.save(path) is None  # no old file: nothing kept
    again = Settings.load(path)
    assert again == s and again.problems == []
    assert s.save(path) is None and not list(tmp_path.glob("config.kept-*"))


@pytest.mark.parametrize("old", [b"context_size = [\n", b'theme = "\xff"\n',
                                 b'context_size = 8192\n[[mcp_servers]]\nname = "t"\ncomand = "x"\n'])
def test_a_save_keeps_the_file_it_could_not_read_once(tmp_path: Path, old: bytes) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(old)
    s = Settings.load(path)
    assert s.problems
    kept = s.save(path)
    assert kept is not None and kept.parent == tmp_path and kept.read_bytes() == old
    assert kept.name.startswith("config.kept-") and kept.suffix == ".toml"
    assert s.problems == [] and Settings.load(path).problems == []
    assert s.save(path) is None  # the new file reads cleanly: no second copy
    assert len(list(tmp_path.glob("config.kept-*"))) == 1

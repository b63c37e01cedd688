"""Claude Code, Codex, opencode and oterm, the real agents, against a real `llmdeck serve`.

Each is pointed at the server with only what README's "Pointing other tools at llmdeck"
says (a base URL, a key, a model name), runs headless, and makes a tool round trip: the
scripted engine's first reply calls the agent's own tool, the agent runs it, and the
second reply is the answer it prints. Skipped when the package is not installed:
`npm install --prefix /tmp/agents-npm @anthropic-ai/claude-code @openai/codex opencode-ai`
(or set LLMDECK_AGENT_CLIS to a node_modules/.bin folder holding `claude`, `codex` and
`opencode`), and `python -m venv /tmp/oterm-venv && /tmp/oterm-venv/bin/pip install oterm`
(or set LLMDECK_OTERM_PYTHON to the python of an environment holding oterm).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.serve import ROOT, scripted_args, spawn_serve

pytestmark = pytest.mark.slow

TEMPLATE = "{{ messages }}<tool_call>{{ tools }}</tool_call>"


def _cli(name: str, package: str) -> str:
    folders = [os.environ.get("LLMDECK_AGENT_CLIS", ""), "/tmp/agents-npm/node_modules/.bin"]
    for folder in folders:
        if folder and (Path(folder) / name).exists():
            return str(Path(folder) / name)
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{package} is not installed (npm install --prefix /tmp/agents-npm {package})")
    return found


def _call(name: str, arguments: dict[str, str]) -> str:
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


def _agent_home(tmp_path: Path) -> Path:
    """A home whose context holds an agent's whole first request (Claude Code's and Codex's
    run to tens of thousands of characters; the scripted engine refuses a prompt past its
    context, as a model does)."""
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.toml").write_text("context_size = 131072\n", encoding="utf-8")
    return home


SHARED = ("codex", "opencode", "oterm")
"""The agents that share one scripted serve (Claude Code has its own: its replies wait
a prefill, which the others need not pay)."""


class Served:
    """One scripted serve for the module: each agent's note holds its own words, and the
    replies go by what a request holds (replies_for), so no agent takes another's turn:
    its prompt "read <its note>" gets its own tool call, a request holding its note's
    words (the tool's result came back) gets the answer, opencode's title request a title.
    Anything else gets a reply no assertion accepts."""

    def __init__(self, base: Path) -> None:
        self.notes: dict[str, Path] = {}
        for agent in SHARED:
            (base / agent).mkdir()
            self.notes[agent] = base / agent / "note.txt"
            self.notes[agent].write_text(f"hello-from-{agent}-file\n")
        calls = {"codex": _call("exec_command", {"cmd": f"cat {self.notes['codex']}"}),
                 "opencode": _call("read", {"filePath": str(self.notes["opencode"])}),
                 "oterm": _call("shell", {"command": f"cat {self.notes['oterm']}"})}
        replies_for = [["title generator", "Reading a note"],
                       *[[f"hello-from-{agent}-file", "The file says hello."] for agent in SHARED],
                       *[[f"read {self.notes[agent]}", calls[agent]] for agent in SHARED]]
        self.proc, self.url = spawn_serve(_agent_home(base), *scripted_args(template=TEMPLATE),
                                          "--option", "reply=No request of this test.",
                                          "--option", f"replies_for={json.dumps(replies_for)}")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    srv = Served(tmp_path_factory.mktemp("agents"))
    try:
        yield srv
    finally:
        srv.proc.terminate()
        srv.proc.wait(10)


def test_claude_code_runs_a_tool_against_serve(tmp_path: Path) -> None:
    claude = _cli("claude", "@anthropic-ai/claude-code")
    note = tmp_path / "note.txt"
    note.write_text("hello-from-file\n")
    replies = json.dumps([f"I will read it.{_call('Read', {'file_path': str(note)})}",
                          "The file says hello."])
    # each reply waits 1 s, as a prefill does: the stream opens with pings first
    proc, url = spawn_serve(_agent_home(tmp_path), *scripted_args(template=TEMPLATE),
                            "--option", f"replies={replies}", "--option", "prefill_s=1.0")
    try:
        env = {**os.environ, "HOME": str(tmp_path), "ANTHROPIC_BASE_URL": url.removesuffix("/v1"),
               "ANTHROPIC_API_KEY": "unused", "DISABLE_TELEMETRY": "1",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
        run = subprocess.run([claude, "-p", f"read {note}", "--model", "scripted",
                              "--output-format", "stream-json", "--verbose"], env=env,
                             cwd=tmp_path, capture_output=True, text=True, timeout=120)
        lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
        results = [m for m in lines if m.get("type") == "user"]
        assert any("hello-from-file" in json.dumps(m) for m in results), run.stdout[-2000:]
        final = lines[-1]
        assert final["type"] == "result" and not final["is_error"], final
        assert final["result"] == "The file says hello."
    finally:
        proc.terminate()
        proc.wait(10)


def test_codex_runs_a_tool_against_serve(tmp_path: Path, served: Served) -> None:
    codex = _cli("codex", "@openai/codex")
    note, url = served.notes["codex"], served.url
    home = tmp_path / "codex"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "scripted"\nmodel_provider = "llmdeck"\n\n[model_providers.llmdeck]\n'
        f'name = "llmdeck"\nbase_url = "{url}"\nwire_api = "responses"\n'
        'env_key = "LLMDECK_API_KEY"\n')
    env = {**os.environ, "HOME": str(tmp_path), "CODEX_HOME": str(home),
           "LLMDECK_API_KEY": "unused"}
    run = subprocess.run([codex, "exec", "--skip-git-repo-check", "--json", f"read {note}"],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    done = [e["item"] for e in events if e.get("type") == "item.completed"]
    commands = [i for i in done if i.get("type") == "command_execution"]
    assert commands and "hello-from-codex-file" in commands[0]["aggregated_output"], run.stdout
    messages = [i["text"] for i in done if i.get("type") == "agent_message"]
    assert messages == ["The file says hello."], run.stdout
    assert any(e.get("type") == "turn.completed" for e in events), run.stdout


def test_opencode_runs_a_tool_against_serve(tmp_path: Path, served: Served) -> None:
    """opencode (npm opencode-ai) with a provider in its opencode.json, as its docs give
    for any OpenAI-compatible server. Its title request (a side request with its own
    system prompt) gets a title whatever order the two requests come in."""
    opencode = _cli("opencode", "opencode-ai")
    note = served.notes["opencode"]
    work = note.parent
    (work / "opencode.json").write_text(json.dumps({"provider": {"llmdeck": {
        "npm": "@ai-sdk/openai-compatible", "name": "llmdeck",
        "options": {"baseURL": served.url, "apiKey": "unused"},
        "models": {"scripted": {"name": "scripted"}}}}}))
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / ".config"),
           "XDG_DATA_HOME": str(tmp_path / ".data"), "XDG_CACHE_HOME": str(tmp_path / ".cache"),
           "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_SHARE": "1",
           "PWD": str(work)}  # opencode takes its project folder from $PWD
    run = subprocess.run([opencode, "run", "--model", "llmdeck/scripted", "--format", "json",
                          f"read {note}"], env=env, cwd=work, capture_output=True, text=True,
                         timeout=180, stdin=subprocess.DEVNULL)
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    parts = [e.get("part", {}) for e in events]
    tools = [p for p in parts if p.get("type") == "tool" and p.get("tool") == "read"]
    assert tools and "hello-from-opencode-file" in json.dumps(tools), \
        run.stdout[-3000:] + run.stderr[-2000:]
    texts = [p.get("text") for p in parts if p.get("type") == "text"]
    assert texts and texts[-1] == "The file says hello.", run.stdout[-3000:]
    assert run.returncode == 0, run.stderr[-2000:]


def _oterm_python() -> str:
    for python in (os.environ.get("LLMDECK_OTERM_PYTHON", ""), "/tmp/oterm-venv/bin/python"):
        if python and Path(python).exists() and subprocess.run(
                [python, "-c", "import oterm"], capture_output=True).returncode == 0:
            return python
    pytest.skip("oterm is not installed (python -m venv /tmp/oterm-venv && "
                "/tmp/oterm-venv/bin/pip install oterm)")


def test_oterm_runs_a_tool_against_serve(tmp_path: Path, served: Served) -> None:
    """oterm (PyPI) with only OLLAMA_URL set: its model list, /api/show's capabilities
    (tools offered because the template takes them), its agent over Ollama's /v1 with its
    own `shell` tool, and /api/ps's context. oterm has no one-shot mode: its own code is
    driven by tests/helpers/oterm_chat.py, the calls its TUI makes."""
    python = _oterm_python()
    note = served.notes["oterm"]
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / ".data"),
           "OLLAMA_URL": served.url.removesuffix("/v1")}
    env.pop("PYTHONPATH", None)
    run = subprocess.run([python, str(ROOT / "tests" / "helpers" / "oterm_chat.py"),
                          "scripted", f"read {note}"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert "scripted" in out["models"] and out["tools"] is True, out
    assert any("hello-from-oterm-file" in r for r in out["tool_returns"]), out
    assert out["reply"] == "The file says hello.", out
    assert out["context"] == 131072, out


def test_oterm_gets_a_plain_reply_from_the_bundled_model(tmp_path: Path) -> None:
    """oterm against serve on a fresh home, the bundled Gemma as shipped: its template
    takes no tools, so /api/show offers none and oterm chats without them. Replies are
    capped at 24 tokens (oterm sends no limit, so sampled Gemma could run to the context's
    end): the test needs words back, not an essay."""
    python = _oterm_python()
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.toml").write_text(
        "context_size = 8192\n[sampling]\nmax_tokens = 24\n", encoding="utf-8")
    proc, url = spawn_serve(home)
    try:
        env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / ".data"),
               "OLLAMA_URL": url.removesuffix("/v1")}
        env.pop("PYTHONPATH", None)
        run = subprocess.run([python, str(ROOT / "tests" / "helpers" / "oterm_chat.py"),
                              "gemma3:270m-q4_k_m", "What is the capital of France?"],
                             env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180,
                             stdin=subprocess.DEVNULL)
        assert run.returncode == 0, run.stderr[-3000:]
        out = json.loads(run.stdout.strip().splitlines()[-1])
        assert out["models"] == ["gemma3:270m-q4_k_m"] and out["tools"] is False, out
        assert out["reply"].strip(), out  # sampled as the server's settings say: any words
        assert out["context"] == 8192, out
    finally:
        proc.terminate()
        proc.wait(10)

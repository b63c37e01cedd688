"""The README's two set-up commands stay true, and CI runs the README's test command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", setup)


def test_readme_has_exactly_two_setup_commands() -> None:
    commands = _readme_commands()
    assert len(commands) == 2
    assert commands[0].endswith("llmdeck")
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert _readme_commands()[1] in ci


def test_version_and_help_work_without_the_ui() -> None:
    exe = Path(sys.executable).parent / "llmdeck"
    for flag in ("--version", "--help"):
        out = subprocess.run([str(exe), flag], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "llmdeck" in out.stdout
    probe = subprocess.run(
        [sys.executable, "-c",
         "import sys\nfrom tui import cli\ntry:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
         "print(sorted(m for m in ('textual', 'llama_cpp', 'torch', 'mlx') if m in sys.modules))"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert probe.stdout.strip().endswith("[]"), probe.stdout  # nothing heavy was imported


def test_ruff_is_clean() -> None:
    ruff = Path(sys.executable).parent / "ruff"
    out = subprocess.run([str(ruff), "check", str(ROOT)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr

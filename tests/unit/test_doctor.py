"""`llmdeck doctor` looks at the real machine and files: all good exits 0; a damaged
database, a settings typo, too little disk or a refused token each exit 1 with the fix;
an unreachable Hub is a warning (the app works offline)."""

from __future__ import annotations

import pytest

from core import paths
from core.doctor import PROBLEM, WARN, check_disk, run_checks
from tests.fakes.hub_repos import catalog_files_fixture, fake_hub_fixture  # noqa: F401
from tests.fakes.hub_server import FakeHub
from tui.cli import main


def by_name(checks):
    return {c.name: c for c in checks}


def test_a_healthy_setup_passes_and_names_every_area(fake_hub: FakeHub, capsys) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for area in ("python", "platform", "mlx", "llama.cpp", "memory", "disk", "database",
                 "logs", "settings", "bundled model", "hugging face"):
        assert f"  {area} " in out, area
    assert "CPU features:" in out and str(paths.log_dir()) in out
    assert fake_hub.endpoint in out and "reachable; no token" in out


def test_each_problem_exits_1_with_its_fix(fake_hub: FakeHub, capsys,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    paths.db_path().write_bytes(b"SQLite format 3\0" + b"\x07" * 4096)  # damaged
    paths.config_path().write_text("context_size = [\n")  # a typo
    fake_hub.users["hf_good"] = "tester"
    monkeypatch.setenv("HF_TOKEN", "hf_revoked0000")
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    checks = by_name(run_checks())
    assert checks["database"].status == PROBLEM and "damaged-" in checks["database"].fix
    assert checks["settings"].status == PROBLEM and "config.toml" in checks["settings"].fix
    assert "keeps the old one" in checks["settings"].fix
    assert checks["hugging face"].status == PROBLEM and "hf auth login" in checks["hugging face"].fix
    assert out.count("fix: ") >= 3 and "3 problems" in out

    monkeypatch.setenv("HF_TOKEN", "hf_good")
    assert "(user tester)" in by_name(run_checks())["hugging face"].detail


def test_low_disk_is_a_problem_and_an_unreachable_hub_a_warning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    disk = check_disk(min_free=10**18)  # more than any disk here has free
    assert disk.status == PROBLEM and "LLMDECK_HOME" in disk.fix
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on discard
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the network is asked for, and fails
    hub = by_name(run_checks())["hugging face"]
    assert hub.status == WARN and "HF_ENDPOINT" in hub.fix
    assert main(["doctor", "--offline"]) == 0


def test_each_refused_setting_is_named_in_one_readable_line() -> None:
    from core.doctor import check_settings

    paths.config_path().write_text('context_size = "big"\n[sampling]\ntemperature = 9\n')
    check = check_settings()
    assert check.status == PROBLEM and ".;" not in check.detail
    assert "context_size = 'big' ignored" in check.detail and "sampling.temperature" in check.detail


def test_offline_mode_is_said_as_such_not_as_an_unreachable_hub(
        fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE=1 is the person's choice: the line says offline mode is on and how to
    leave it (it probed the Hub and said "unreachable ... check the network or proxy")."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub = by_name(run_checks())["hugging face"]
    assert hub.status == WARN and "offline mode is on (HF_HUB_OFFLINE)" in hub.detail
    assert "Unset HF_HUB_OFFLINE" in hub.fix and "proxy" not in hub.fix

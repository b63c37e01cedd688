"""The CLI as a new user meets it (issue 48, items 6 and 10): `llmdeck paths` names the
Hugging Face cache, `llmdeck service` without an action prints its help like `models`,
`llmdeck cluster status` without a name lists the configured clusters, and no message
calls the data folder a "home"."""

from __future__ import annotations

import pytest

from core import paths
from tui.cli import main


def test_paths_names_the_hugging_face_cache(capsys) -> None:
    assert main(["paths"]) == 0
    out = capsys.readouterr().out
    assert f"hf_cache_dir {paths.hf_cache_dir()}" in out


def test_service_without_an_action_prints_its_help(capsys) -> None:
    assert main(["service"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: llmdeck service") and "status" in out


def test_cluster_status_without_a_name_lists_the_clusters(capsys) -> None:
    assert main(["cluster", "status"]) == 0
    assert "No cluster is configured" in capsys.readouterr().out
    paths.config_path().write_text(
        '[[clusters]]\nname = "lan"\nmodel = "/models/big"\nhosts = ["10.0.0.2", "10.0.0.3"]\n\n'
        '[[clusters]]\nname = "tb"\nmodel = "/models/big"\nhostfile = "/etc/tb.json"\n')
    assert main(["cluster", "status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["lan  not started  (10.0.0.2, 10.0.0.3)",
                     "tb  not started  (/etc/tb.json)"]
    with pytest.raises(SystemExit):  # up and down still need the name
        main(["cluster", "up"])


def test_the_data_folder_is_not_called_a_home(monkeypatch: pytest.MonkeyPatch) -> None:
    from core.home_lock import home_label

    monkeypatch.delenv("LLMDECK_HOME")
    assert home_label().startswith("the data folder ") and "default home" not in home_label()

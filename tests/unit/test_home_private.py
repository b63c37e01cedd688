"""llmdeck's folders and its config are the user's alone: every conversation (llmdeck.db),
the config (an API key, remotes' keys) and the KV caches live there. They were made with
the umask's 0755 and 0644, so on a Linux box whose home others may enter, any local user
could read them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from core import paths
from core.config import Settings


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_folders_are_made_private(llmdeck_home: Path) -> None:
    for folder in (paths.data_dir(), paths.config_dir(), paths.log_dir(), paths.cache_dir(),
                   paths.models_dir()):
        assert _mode(folder) == 0o700, folder


def test_a_folder_of_ours_left_open_is_closed(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    os.chmod(home / "data", 0o755)  # as an older llmdeck made it
    monkeypatch.setenv("LLMDECK_HOME", str(home))
    assert _mode(paths.data_dir()) == 0o700


def test_the_config_file_and_its_kept_copy_are_private(llmdeck_home: Path) -> None:
    config = paths.config_path()
    config.write_text('api_key = "secret"\nno_such_key = 1\n')
    os.chmod(config, 0o644)
    settings = Settings.load()
    assert settings.api_key == "secret"
    kept = settings.save()
    assert kept is not None and _mode(kept) == 0o600
    assert _mode(config) == 0o600

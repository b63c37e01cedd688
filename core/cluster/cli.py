"""`llmdeck cluster up|down|status NAME`: a cluster from another SSH window.

`up` starts the ranks, waits for rank 0 and returns, leaving the cluster running (mlx.launch
keeps the ranks together: one that dies takes the others down); `down` stops every rank and
checks each pid; `status` shows each host, its rank, its state and the endpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from core.cluster.launch import Cluster, ClusterError, current, stop_processes
from core.cluster.state import ClusterState, alive, write_state
from core.terminal_text import visible


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmdeck cluster",
                                description="Start, stop or show a [[clusters]] entry: one model "
                                "across several Macs on MLX's distributed engine.")
    p.add_argument("action", choices=("up", "down", "status"))
    p.add_argument("name", nargs="?", help="the cluster's name in settings ([[clusters]]); "
                   "`status` without one lists every configured cluster")
    p.add_argument("--timeout", type=float, default=180.0, metavar="S",
                   help="how long `up` waits for rank 0 to answer (default 180)")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    from core.cluster.state import BadClusterName, checked_name
    from core.config import Settings

    settings = Settings.load()
    if args.name is None:  # `cluster status` alone lists them; up and down need a name
        if args.action != "status":
            parser().error(f"{args.action} needs the cluster's name")
        return _list(settings)
    try:  # a name is never a path: `../../x` would read and write outside the clusters folder
        checked_name(args.name)
    except BadClusterName as exc:
        return _fail(f"{args.name[:80]!r} is not a cluster's name: {exc}")
    cfg = settings.cluster(args.name)
    if args.action == "up":
        if cfg is None:
            return _fail(_unknown(args.name, settings))
        try:
            state = asyncio.run(Cluster(cfg).up(ready_timeout_s=args.timeout, detach=True))
        except ClusterError as exc:
            return _fail(exc.message)
        except KeyboardInterrupt:
            return 130
        print(f"Cluster {args.name!r} is up: {len(state.ranks)} ranks, OpenAI API at {state.url} "
              f"(use it as --model cluster:{args.name}).")
        return 0
    state = current(args.name)
    if state is None:
        if cfg is None:
            return _fail(_unknown(args.name, settings))
        print(f"Cluster {args.name!r} has not been started (`llmdeck cluster up {args.name}`).")
        return 0 if args.action == "down" else 1
    if args.action == "down":
        return _down(state)
    print(format_status(state))
    return 0 if state.state == "up" else 1


def _list(settings: object) -> int:
    """`cluster status` without a name: each configured cluster, one line, with its state
    (not started, up, down, failed) and its hosts."""
    configured = list(getattr(settings, "clusters", []))
    if not configured:
        print("No cluster is configured; add one under [[clusters]] in settings "
              "(README: Several Macs, one model).")
        return 0
    for cfg in configured:
        state = current(cfg.name)
        where = f" at {state.endpoint()}" if state is not None and state.state == "up" else ""
        said = state.state if state is not None else "not started"
        hosts = ", ".join(_cell(str(h)) for h in cfg.hosts) or _cell(cfg.hostfile)
        print(f"{_cell(cfg.name)}  {said}{where}" + (f"  ({hosts})" if hosts else ""))
    return 0


def _down(state: ClusterState) -> int:
    left = stop_processes(state)
    if left:
        return _fail(f"Cluster {state.name!r}: processes {', '.join(map(str, left))} did not stop; "
                     "stop them by hand (kill -9).")
    was = state.state
    state.state = "down" if was != "failed" else "failed"
    write_state(state)
    print(f"Cluster {state.name!r} is down; every rank on this machine was checked stopped.")
    return 0


def format_status(state: ClusterState) -> str:
    """HOST RANK STATE PID ENDPOINT, one row a rank, then the error sentence if any. Host
    names and log lines come from outside: shown through core.terminal_text.visible."""
    rows = [("HOST", "RANK", "STATE", "PID", "ENDPOINT")]
    for r in state.ranks:
        if state.state != "up":
            rank_state = state.state
        elif r.local and r.pid:
            rank_state = "up" if alive(r.pid) else "exited"
        else:
            rank_state = "up (via ssh)" if r.pid and alive(r.pid) else "unknown"
        rows.append((_cell(r.host), str(r.rank), rank_state, str(r.pid or "-"),
                     state.endpoint() if r.rank == 0 else "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [f"cluster {_cell(state.name)}: {state.state} ({state.backend}, {state.mode})"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    if state.state == "up" and state.owner_pid and not alive(state.owner_pid):
        lines.append(f"The llmdeck process that started it (pid {state.owner_pid}) has gone; "
                     f"`llmdeck cluster down {_cell(state.name)}` stops it.")
    if state.error:
        lines.append(_cell(state.error, 2000))
    return "\n".join(lines)


def clusters_report() -> str | None:
    """Every cluster not cleanly down, as `llmdeck workers` shows them; None if none."""
    from core.cluster.state import clusters_dir

    shown = []
    for path in sorted(clusters_dir().glob("*.json")):
        state = current(path.stem)
        if state is not None and state.state != "down":
            shown.append(format_status(state))
    return "\n\n".join(shown) if shown else None


def _cell(text: str, limit: int = 60) -> str:
    shown = visible(text).replace("\n", " ")
    return shown if len(shown) <= limit else shown[:limit - 1] + "…"


def _unknown(name: str, settings: object) -> str:
    """No such cluster: the settings file's sentence when an entry of that name was
    there and not read (an unknown key, a bad value), else the names there are."""
    for problem in getattr(settings, "problems", []):
        if problem.startswith(f"cluster {name!r} "):
            return f"The [[clusters]] entry {name!r} in config.toml was not read: " + \
                problem.split(" ignored: ", 1)[-1]
    names = [c.name for c in getattr(settings, "clusters", [])]
    known = f" (configured: {', '.join(names)})" if names else ""
    return f"No cluster named {name!r} is configured{known}; add it under [[clusters]] in settings."


def _fail(message: str) -> int:
    print(f"llmdeck cluster: {visible(message)}", file=sys.stderr)
    return 1

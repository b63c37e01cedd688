"""`llmdeck doctor --cluster NAME`: what a person gets wrong first when a cluster won't start.

mlx.launch reaches other hosts with ssh and no terminal to type a password into; every
host needs the same mlx and mlx-lm (ranks exchange tensors in lockstep), the model folder
at the same path with the same files, and the ports free. One small probe (standard
library only, no mlx import, so it answers in a moment) runs through each host's own
Python and reports what it finds there as JSON.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

from core import json_text
from core.checks import OK, PROBLEM, WARN, Check
from core.cluster.launch import (
    MLX_DEFAULT_RING_PORT,
    MLX_LM_DEFAULT_PORT,
    ClusterError,
    Host,
    hosts_of,
)
from core.config import ClusterConfig
from core.terminal_text import visible

SSH_TIMEOUT_S = 8
PROBE_TIMEOUT_S = 30
_MAX_PROBE_BYTES = 256 * 1024

PROBE = r"""
import json, os, socket, sys
from importlib.metadata import version, PackageNotFoundError
out = {"platform": sys.platform}
for name in ("mlx", "mlx-lm"):
    try:
        out[name] = version(name)
    except PackageNotFoundError:
        out[name] = None
model = os.path.expanduser(sys.argv[1])
if os.path.isdir(model):
    names = sorted(os.listdir(model))[:1000]
    out["model"] = {n: os.path.getsize(os.path.join(model, n)) for n in names
                    if os.path.isfile(os.path.join(model, n))}
else:
    out["model"] = None
out["ports"] = {}
for port in sys.argv[2:]:
    s = socket.socket()
    try:
        s.bind(("", int(port)))
        out["ports"][port] = True
    except OSError:
        out["ports"][port] = False
    finally:
        s.close()
print(json.dumps(out))
"""


def _ports(cfg: ClusterConfig, hosts: list[Host]) -> dict[int, list[int]]:
    """The fixed ports each rank will listen on (ports left at 0 are picked free at start)."""
    wanted: dict[int, list[int]] = {i: [] for i in range(len(hosts))}
    if cfg.port or not hosts[0].local:
        wanted[0].append(cfg.port or MLX_LM_DEFAULT_PORT)
    all_local = all(h.local for h in hosts)
    if cfg.backend == "ring" and (cfg.ring_port or not all_local):
        base = cfg.ring_port or MLX_DEFAULT_RING_PORT
        for i in range(len(hosts)):
            wanted[i].append(base + i)
    return wanted


def _run_probe(host: Host, python: str, model: str, ports: list[int]) -> tuple[dict | None, str]:
    """The probe's findings on `host`, or (None, why it could not run)."""
    argv = [python, "-c", PROBE, model, *map(str, ports)]
    if not host.local:
        argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_TIMEOUT_S}", host.ssh,
                shlex.join(argv)]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    if done.returncode != 0:
        err = done.stderr[-2000:].decode("utf-8", "replace").strip()
        return None, err or f"exit code {done.returncode}"
    try:
        found = json_text.loads(done.stdout[:_MAX_PROBE_BYTES].decode("utf-8", "replace"))
    except ValueError as exc:
        return None, f"its answer was not the probe's JSON ({exc})"
    return (found, "") if isinstance(found, dict) else (None, "its answer was not an object")


def _ssh_check(host: Host) -> Check:
    try:
        done = subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_TIMEOUT_S}",
                               host.ssh, "true"], capture_output=True, timeout=SSH_TIMEOUT_S + 5,
                              stdin=subprocess.DEVNULL)
        ok, why = done.returncode == 0, done.stderr.decode("utf-8", "replace").strip()[-300:]
    except (OSError, subprocess.TimeoutExpired) as exc:
        ok, why = False, str(exc)
    if ok:
        return Check(f"ssh {host.ssh}", OK, "reached without a password")
    return Check(f"ssh {host.ssh}", PROBLEM, visible(why or "ssh failed"),
                 f"mlx.launch needs ssh without a password: run `ssh-copy-id {host.ssh}` and "
                 f"`ssh {host.ssh} true` once by hand (it must not ask anything).")


def cluster_checks(cfg: ClusterConfig) -> list[Check]:
    """Every check for one cluster, in the order a person fixes them."""
    try:
        hosts = hosts_of(cfg)
    except ClusterError as exc:
        return [Check("hosts", PROBLEM, exc.message, "Fix the hostfile, or list hosts instead.")]
    checks = [Check("cluster", OK, f"{cfg.name}: {len(hosts)} ranks, {cfg.backend}, {cfg.mode}; "
                    f"hosts {', '.join(h.ssh for h in hosts)}")]
    python = cfg.python or sys.executable
    ports = _ports(cfg, hosts)
    found: dict[str, dict] = {}
    for host in dict.fromkeys(hosts):
        name = "this machine" if host.local else host.ssh
        if not host.local:
            ssh = _ssh_check(host)
            checks.append(ssh)
            if ssh.status != OK:
                continue
        host_ports = sorted({p for i, h in enumerate(hosts) if h == host for p in ports[i]})
        probe, why = _run_probe(host, python, cfg.model, host_ports)
        if probe is None:
            checks.append(Check(f"python on {name}", PROBLEM, visible(why)[-500:],
                                f"Set python in [[clusters]] to a Python with mlx and mlx-lm that "
                                f"exists at the same path on every host (now {python})."))
            continue
        found[name] = probe
        checks += _host_checks(cfg, name, probe)
    checks += _same_everywhere(cfg, found)
    if cfg.backend == "jaccl":
        checks += _jaccl_checks(found)
    return checks


def _host_checks(cfg: ClusterConfig, name: str, probe: dict) -> list[Check]:
    out = []
    if not probe.get("mlx") or not probe.get("mlx-lm"):
        out.append(Check(f"mlx on {name}", PROBLEM, f"mlx {probe.get('mlx')}, mlx-lm "
                         f"{probe.get('mlx-lm')}", "Install both into that Python: pip install "
                         "mlx mlx-lm (the same versions as the other hosts)."))
    if probe.get("model") is None:
        out.append(Check(f"model on {name}", PROBLEM, f"no folder {cfg.model}",
                         "Copy the model folder to the same path on every host (rsync -a), or set "
                         "model in [[clusters]] to where it is."))
    taken = [p for p, free in (probe.get("ports") or {}).items() if not free]
    if taken:
        out.append(Check(f"ports on {name}", PROBLEM, f"in use: {', '.join(map(str, taken))}",
                         "Stop what listens there (`llmdeck cluster down`, or lsof -i :PORT), or "
                         "set port / ring_port in [[clusters]] (0 picks a free one)."))
    return out


def _same_everywhere(cfg: ClusterConfig, found: dict[str, dict]) -> list[Check]:
    if not found:
        return []
    out = []
    versions = {n: (p.get("mlx"), p.get("mlx-lm")) for n, p in found.items()}
    if len(set(versions.values())) == 1:
        mlx, mlx_lm = next(iter(versions.values()))
        out.append(Check("versions", OK, f"mlx {mlx}, mlx-lm {mlx_lm} on every host"))
    else:
        shown = "; ".join(f"{n}: mlx {v[0]}, mlx-lm {v[1]}" for n, v in versions.items())
        out.append(Check("versions", PROBLEM, visible(shown), "Install the same mlx and mlx-lm "
                         "everywhere (pip install mlx==X mlx-lm==Y): ranks exchange tensors in "
                         "lockstep and must agree on every operation."))
    models = {n: p.get("model") for n, p in found.items() if p.get("model") is not None}
    if models and len({tuple(sorted(m.items())) for m in models.values()}) > 1:
        first, *_ = models
        differ = [n for n, m in models.items() if m != models[first]]
        out.append(Check("model files", PROBLEM, f"{cfg.model} differs on {', '.join(differ)} "
                         f"from {first} (file names or sizes)",
                         "Copy the folder again (rsync -a --delete) so every host has the same files."))
    elif models and len(models) == len(found):
        size = sum(next(iter(models.values())).values())
        out.append(Check("model files", OK, f"{cfg.model}: the same files on every host "
                         f"({size / 10**9:.2f} GB)"))
    return out


def _jaccl_checks(found: dict[str, dict]) -> list[Check]:
    not_mac = [n for n, p in found.items() if p.get("platform") != "darwin"]
    if not_mac:
        return [Check("jaccl", PROBLEM, f"not macOS: {', '.join(not_mac)}",
                      "jaccl is RDMA over Thunderbolt 5 between Macs; use backend = \"ring\" here.")]
    return [Check("jaccl", WARN, "RDMA over Thunderbolt cannot be checked from here",
                  "On each Mac (macOS 26.2 or later, Thunderbolt 5): turn RDMA on once with "
                  "`rdma_ctl enable` in Recovery, cable every pair of Macs, and write the hostfile "
                  "with `mlx.distributed_config --backend jaccl`.")]


def main(argv: list[str]) -> int:
    """`llmdeck doctor --cluster NAME`."""
    import argparse

    from core.checks import report
    from core.config import Settings

    parser = argparse.ArgumentParser(prog="llmdeck doctor --cluster",
                                     description="Check a [[clusters]] entry's hosts.")
    parser.add_argument("--cluster", required=True, metavar="NAME")
    args, _ = parser.parse_known_args(argv)
    settings = Settings.load()
    cfg = settings.cluster(args.cluster)
    if cfg is None:
        names = ", ".join(c.name for c in settings.clusters) or "none"
        print(f"llmdeck doctor: no cluster named {visible(args.cluster)!r} is configured "
              f"(configured: {names}); add it under [[clusters]] in settings.", file=sys.stderr)
        return 1
    checks = cluster_checks(cfg)
    print(report(checks))
    return 1 if any(c.status == PROBLEM for c in checks) else 0

"""The sandbox's walls on macOS: a sandbox-exec (Seatbelt) profile, written here and
checked as text on Linux."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

# --- macOS ---------------------------------------------------------------------------
#
# sandbox-exec (Seatbelt) with a profile that starts from (deny default). Apple calls
# sandbox-exec deprecated but ships it and builds its own services on the same language;
# the operations and filters below are the ones Chromium's and other public profiles use.
# What it does not do, unlike Linux: cap memory (macOS has no working RLIMIT_AS; the app
# watches the sandbox's memory from outside), give the sandbox its own process table (a
# process that leaves the session is found by the app's sweep, and with fork denied there
# is none), limit the scratch folder's total size (RLIMIT_FSIZE caps each file), hide the
# existence of the folders above the ones it may read, or run Python from an interpreter
# whose libraries live outside the folders listed (a framework build elsewhere). It is
# not run here (this CI is Linux): tests check its text.

MACOS_READ = ("/usr/lib", "/usr/share", "/System/Library", "/Library/Apple/System/Library",
              "/System/Volumes/Preboot/Cryptexes/OS", "/private/var/db/dyld",
              "/private/var/db/timezone", "/opt/homebrew", "/usr/local/lib",
              "/usr/local/opt", "/usr/local/Cellar", "/Library/Frameworks/Python.framework")
MACOS_FILES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/fd",
               "/private/etc/localtime")  # (time.localtime: a link into /var/db/timezone)
MACOS_SYSCTLS = ("hw.activecpu", "hw.byteorder", "hw.cachelinesize", "hw.cpufamily",
                 "hw.cpusubtype", "hw.cputype", "hw.logicalcpu", "hw.logicalcpu_max",
                 "hw.machine", "hw.memsize", "hw.model", "hw.ncpu", "hw.nperflevels",
                 "hw.pagesize", "hw.pagesize_compat", "hw.physicalcpu",
                 "hw.physicalcpu_max", "kern.argmax", "kern.hostname",
                 "kern.maxfilesperproc", "kern.osproductversion", "kern.osrelease",
                 "kern.ostype", "kern.osvariant_status", "kern.osversion",
                 "kern.secure_kernel", "kern.usrstack64", "kern.version",
                 "sysctl.proc_cputype", "sysctl.proc_translated", "vm.loadavg")
MACOS_SYSCTL_PREFIXES = ("hw.optional.", "hw.perflevel", "machdep.cpu.")


def _sbpl_string(text: str) -> str:
    """A path as an SBPL string literal: quotes and backslashes escaped, so a folder
    named `a") (allow default) ("` stays one string; control characters refused."""
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ValueError(f"a sandbox path holds a control character: {text!r}")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _ancestors(path: str) -> list[str]:
    parts, found = path.strip("/").split("/"), ["/"]
    for n in range(1, len(parts)):
        found.append("/" + "/".join(parts[:n]))
    return found


def _both_forms(paths: Sequence[str]) -> list[str]:
    """Each path as given (absolute) and resolved: Seatbelt matches the resolved one,
    and /tmp and /var are links to /private/... there."""
    return sorted({os.path.abspath(p) for p in paths} | {os.path.realpath(p) for p in paths})


def _interpreter_folders() -> list[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    return [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
            os.path.dirname(sys.executable), here]


def macos_profile(scratch: list[str], needed: Sequence[str] | None = None, *,
                  allow_fork: bool = False) -> str:
    """A sandbox-exec profile starting from (deny default): read and map the interpreter,
    its environment (`needed`, by default this interpreter's folders) and the system
    libraries; read and write only the `scratch` folders; exec only the interpreter; no
    network at all, so no Unix socket either (connect and bind to one are network
    operations); no Apple Events, launch services or other Mach services but the user
    lookup; no signals or process inspection outside the sandbox.

    `allow_fork` False (the default): the code can start no process, so none can
    double-fork away from the sweep; True lets the sandbox's own supervisor start the
    runner (fork and exec of the interpreter only)."""
    folders = _both_forms(needed if needed is not None else _interpreter_folders())
    writable = _both_forms(scratch)
    executables = sorted({sys.executable, os.path.realpath(sys.executable)})
    walk = sorted({a for p in [*folders, *writable] for a in _ancestors(p)})

    def subpaths(paths: Sequence[str]) -> str:
        return " ".join(f"(subpath {_sbpl_string(p)})" for p in paths)

    def literals(paths: Sequence[str]) -> str:
        return " ".join(f"(literal {_sbpl_string(p)})" for p in paths)

    sysctls = " ".join([*(f'(sysctl-name "{n}")' for n in MACOS_SYSCTLS),
                        *(f'(sysctl-name-prefix "{n}")' for n in MACOS_SYSCTL_PREFIXES)])
    lines = [
        "(version 1)",
        "(deny default)",
        f"(allow file-read* file-map-executable {subpaths([*MACOS_READ, *folders])})",
        f"(allow file-read-metadata {literals(walk)})",
        f"(allow file-read* file-write* {subpaths(writable)})",
        f"(allow file-read* {literals(MACOS_FILES)})",
        '(allow file-write-data (require-all (literal "/dev/null") '
        "(vnode-type CHARACTER-DEVICE)))",
        f"(allow process-exec {literals(executables)})",
        "(allow process-info* (target self))",
        "(allow signal (target same-sandbox))",
        f"(allow sysctl-read {sysctls})",
        '(allow mach-lookup (global-name "com.apple.system.opendirectoryd.libinfo"))',
        "(allow ipc-posix-sem)",
    ]
    if allow_fork:
        lines += ["(allow process-fork)", "(allow process-info* (target same-sandbox))"]
    else:
        lines.append("(deny process-fork)")  # (deny default) says so already; spelled out
    return "\n".join(lines) + "\n"

"""Loading llama_cpp.Llama: how many threads a worker takes, and model parameters its
constructor does not take.

Threads: llama.cpp runs one sequence per worker, so a model gets several workers
(replicas; two by default) to stream several chats at once. Each used to start a thread
per core, so two busy workers ran twice as many threads as cores and each decode step
waited on threads the OS had parked. The cores are now shared: each of n replicas takes
cores // n threads (the first cores % n one more, so together they use every core
exactly once), at least 1. The "threads" option sets the count outright.

Why: llama.cpp's "extra buffer types" (weights repacked at load for AMX and other CPU
kernels) crashed every multi-token batch of the bundled Gemma with SIGSEGV inside
llama_decode on an Intel CPU with AMX (Sapphire Rapids, under a VM; llama-cpp-python 0.3.35
and 0.3.36 built natively): the worker died on the first prompt. One-token batches, and
the same build with the extra buffers off, ran. So where the CPU advertises AMX they are
off (the plain CPU kernels serve instead); LLMDECK_LLAMA_REPACK=1 turns them back on.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one, as in a
    container limited to some cores), else every core the machine reports; at most
    LLMDECK_CORES where that is set (a machine shared with other work: llama.cpp's threads
    wait by spinning, so more of them than free cores slows every one)."""
    try:
        cores = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS has no affinity
        cores = max(1, os.cpu_count() or 1)
    cap = os.environ.get("LLMDECK_CORES", "")
    return min(cores, int(cap)) if cap.isdigit() and int(cap) > 0 else cores


def replica_threads(replicas: int, index: int | None = None, cores: int | None = None) -> int:
    """Threads for one of `replicas` llama.cpp workers of a model sharing `cores`.

    Replica `index` (0-based) takes cores // replicas, plus one of the cores % replicas
    left over when its index is below that, so the replicas' counts sum to the cores;
    with no index, cores // replicas. Never below 1 (more replicas than cores share)."""
    cores = usable_cores() if cores is None else max(1, cores)
    replicas = max(1, replicas)
    share, extra = divmod(cores, replicas)
    if index is not None and 0 <= index < extra:
        share += 1
    return max(1, share)


def worker_threads(option: Any, replicas: Any, index: Any = None,
                   cores: int | None = None) -> int:
    """A worker's thread count from its spec's options: "threads" when it is a whole number
    above 0, else its share of the cores among "replicas" workers ("replica": its index).
    A worker told nothing about its siblings takes every core, as one alone should."""
    if isinstance(option, int) and not isinstance(option, bool) and option > 0:
        return option
    n = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1
    i = index if isinstance(index, int) and not isinstance(index, bool) else None
    return replica_threads(n, i, cores)


def cpu_has_amx(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether the CPU advertises AMX tiles (Linux; False where it cannot tell)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return False
    return any(line.startswith("flags") and " amx_tile" in line for line in text.splitlines())


def repack_weights() -> bool:
    """Whether llama.cpp may use its extra (repacked-weight) buffer types here."""
    setting = os.environ.get("LLMDECK_LLAMA_REPACK")
    if setting is not None:
        return setting.strip() not in ("", "0", "false", "no")
    return not cpu_has_amx()


def load_llama(**kwargs: Any) -> Any:
    """llama_cpp.Llama(**kwargs), with repacked weights off where repack_weights() says so.

    Llama() starts from llama_model_default_params() and has no argument for
    use_extra_bufts, so the defaults it reads are adjusted for the length of this call.
    """
    import llama_cpp.llama_cpp as low
    from llama_cpp import Llama

    if repack_weights():
        return Llama(**kwargs)
    defaults = low.llama_model_default_params

    def without_extra_buffers() -> Any:
        params = defaults()
        params.use_extra_bufts = False
        return params

    low.llama_model_default_params = without_extra_buffers
    try:
        return Llama(**kwargs)
    finally:
        low.llama_model_default_params = defaults

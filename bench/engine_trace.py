"""Trace our server's engine from inside its worker, for bench/chat.py --trace (issue 49).

bench/chat.py starts our server with a folder holding a `sitecustomize.py` (written by
`install`) first on PYTHONPATH and LLMDECK_BENCH_TRACE naming a file: every Python process
of that server (the worker too) then imports it, and once core.engines.mlx.engine is
imported MlxEngine.submit and .step append one JSON line per request admitted, per step
and per first non-blank text, with the worker's clock (a step's exception goes to
`<file>.error.<pid>` before it ends the worker). `summarise` turns the file into the
engine's view of each burst of requests: how spread their arrival was and their TTFT from
the worker's submit (so HTTP, the service and the pool are what the client's figure adds).
Nothing here is imported by the app.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

_SITE = '''
import os, sys
_path = os.environ.get("LLMDECK_BENCH_TRACE")
if _path:
    import importlib.abc, importlib.util, json, time

    def _patch(engine_cls):
        out = open(_path + "." + str(os.getpid()), "a", buffering=1)
        seen = {}
        submit, step = engine_cls.submit, engine_cls.step

        def traced_submit(self, request):
            out.write(json.dumps({"e": "submit", "rid": request.request_id,
                                  "t": time.perf_counter()}) + "\\n")
            return submit(self, request)

        def traced_step(self):
            t0 = time.perf_counter()
            try:
                results = step(self)
            except Exception:  # the worker only says "internal error": keep the traceback
                import traceback
                with open(_path + ".error." + str(os.getpid()), "a") as err:
                    err.write(traceback.format_exc())
                raise
            t1 = time.perf_counter()
            import mlx.core as mx  # memory held and cached in this worker (GB)
            out.write(json.dumps({"e": "step", "t0": t0, "t1": t1, "n": len(results),
                                  "active_gb": mx.get_active_memory() / 1e9,
                                  "cache_gb": mx.get_cache_memory() / 1e9}) + "\\n")
            for rid, events in results:
                if rid in seen:
                    continue
                for e in events:
                    text = getattr(e, "text", None)
                    if isinstance(text, str) and text.strip():
                        seen[rid] = t1
                        out.write(json.dumps({"e": "first", "rid": rid, "t": t1}) + "\\n")
                        break
            return results

        engine_cls.submit, engine_cls.step = traced_submit, traced_step

    class _Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "core.engines.mlx.engine":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                _patch(module.MlxEngine)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _Hook())
'''


def install(folder: Path) -> Path:
    """Write the sitecustomize into `folder`; returns the folder (for PYTHONPATH)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_SITE)
    return folder


def summarise(trace: Path, burst: int = 8, gap_s: float = 0.25) -> list[dict[str, Any]]:
    """Every burst of exactly `burst` submits (no gap over gap_s inside it), in order:
    arrival spread, engine TTFT (submit to the first non-blank text) p50/max, steps taken
    and the longest step inside it."""
    rows: list[dict[str, Any]] = []
    for f in sorted(trace.parent.glob(trace.name + ".*")):
        if ".error." in f.name:  # a worker's traceback, not trace lines
            continue
        rows += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    submits = sorted((r for r in rows if r["e"] == "submit"), key=lambda r: r["t"])
    firsts = {r["rid"]: r["t"] for r in rows if r["e"] == "first"}
    steps = [r for r in rows if r["e"] == "step"]
    groups: list[list[dict[str, Any]]] = []
    for r in submits:
        if groups and r["t"] - groups[-1][-1]["t"] <= gap_s:
            groups[-1].append(r)
        else:
            groups.append([r])
    out = []
    for g in groups:
        if len(g) != burst:
            continue
        start = g[0]["t"]
        ttfts = [(firsts[r["rid"]] - r["t"]) * 1000 for r in g if r["rid"] in firsts]
        if not ttfts:
            continue
        end = max(firsts[r["rid"]] for r in g if r["rid"] in firsts)
        inside = [s for s in steps if s["t0"] >= start and s["t1"] <= end]
        out.append({
            "arrival_spread_ms": round((g[-1]["t"] - start) * 1000, 1),
            "engine_ttft_p50_ms": round(statistics.median(ttfts), 1),
            "engine_ttft_max_ms": round(max(ttfts), 1),
            "steps": len(inside),
            "longest_step_ms": round(max(((s["t1"] - s["t0"]) * 1000 for s in inside),
                                         default=0.0), 1),
            # the worker's MLX memory by the burst's end: held, and freed but cached
            "active_gb": round(max((s.get("active_gb", 0.0) for s in inside), default=0.0), 2),
            "cache_gb": round(max((s.get("cache_gb", 0.0) for s in inside), default=0.0), 2),
        })
    return out

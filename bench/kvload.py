"""The disk KV cache's load path against the read bound (issue 49 item 2), per way a file
can reach the device (kv_disk_copy), on a file of a model's KV shape.

Prints one JSON object (median ms over --repeats, after one discarded warm-up round):

- `read_bound_ms`: the file's bytes read into a fresh buffer by one thread (plain read
  calls, the page cache warm; bench.read_bound, as bench/kvdisk.py reads): what any loader
  has to do; `read_parallel_ms` the same on up to 16 threads (no checksums), `hash_ms` mapping it and checking every
  section's SHA-256 on the hashing threads (no copy);
- `load_ms[copy]`: kv_mlx_load.on_device's whole step for that copy mode (open, map,
  copy and hash, verified, on the device and synchronised), `touch_ms[copy]` the first
  pass of a GPU kernel over every section afterwards (pages still to move move here),
  `load_over_read_bound[copy]` = (load + touch) / read bound;
- `best_copy`: the mode with the smallest load + touch; `prefetch_ok`: whether the CUDA
  prefetch (copy "stream" on CUDA) was found and ran;
- `probe`: the cost model's idle-time probe of the same file (kv_mlx_load.probe_read,
  copy "stream"): its estimate of a whole load against `load_ms["stream"]`, first as a
  fresh process's first load (`first_estimate_ms`, what a worker's probe meets), then the
  median of three.

    python bench/kvload.py                      # Qwen3-0.6B's shape, 4,172 tokens, bf16
    python bench/kvload.py --bits 8             # the 8-bit file of the same cache
    python bench/kvload.py --quick              # a small file (the plumbing, a CPU)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx  # noqa: E402

from bench.read_bound import read_whole  # noqa: E402
from core.engines import kv_file, kv_mlx_load  # noqa: E402


def make_file(folder: Path, layers: int, heads: int, tokens: int, dim: int, bits: int) -> Path:
    """A cache file of random keys and values in the layout the MLX keeper writes."""
    rng = np.random.default_rng(0)
    sections: list[tuple[str, str, np.ndarray]] = []
    for i in range(layers):
        for part in ("keys", "values"):
            name = f"{i}.{part}"
            if bits == 8:
                sections += [
                    (name, "uint32", rng.integers(0, 2**32 - 1, (1, heads, tokens, dim // 4),
                                                  dtype=np.uint32)),
                    (f"{name}.scales", "bfloat16", rng.integers(0, 2**15, (1, heads, tokens, dim // 64),
                                                                dtype=np.uint16)),
                    (f"{name}.biases", "bfloat16", rng.integers(0, 2**15, (1, heads, tokens, dim // 64),
                                                                dtype=np.uint16))]
            else:
                sections.append((name, "bfloat16",
                                 rng.integers(0, 2**15, (1, heads, tokens, dim), dtype=np.uint16)))
    path = folder / ("0" * 40 + ".kv")
    kv_file.write_file(path, "bench", list(range(tokens)), sections,
                       {"engine": "mlx", "layers": layers, "kv_bits": bits})
    return path


def _ms(f: Any) -> float:
    started = time.perf_counter()
    f()
    return (time.perf_counter() - started) * 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=4172)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--bits", type=int, choices=(8, 16), default=16)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--copies", default=",".join(kv_mlx_load.COPIES))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--quick", action="store_true",
                    help="a small file (4 layers, 1,024 tokens, 2 repeats): the plumbing, on a CPU")
    args = ap.parse_args(argv)
    if args.quick:
        args.layers, args.tokens, args.repeats = 4, 1024, min(args.repeats, 2)
    copies = [c for c in args.copies.split(",") if c in kv_mlx_load.COPIES]
    folder = Path(tempfile.mkdtemp(prefix="kvload-"))
    path = make_file(folder, args.layers, args.heads, args.tokens, args.dim, args.bits)
    header = kv_file.read_header(path)
    size = path.stat().st_size
    pool = ThreadPoolExecutor(min(16, os.cpu_count() or 1))

    one = ThreadPoolExecutor(1)

    def read_bound() -> None:
        read_whole([path], one)

    def read_parallel() -> None:
        read_whole([path], pool)

    def hashed() -> None:
        kv_file.read_sections(path, header, wait=True, hash=True)

    held: dict[str, Any] = {}

    def load(copy: str) -> None:
        sections = kv_file.read_sections(path, header, wait=False, hash=copy == "single")
        arrays = kv_mlx_load.on_device(header, sections, copy)
        sections.verify()
        mx.eval(list(arrays.values()))
        mx.synchronize()
        held["arrays"] = arrays

    def touch() -> None:
        arrays = held.pop("arrays")
        mx.eval([mx.sum(a.astype(mx.float32)) for a in arrays.values()])
        mx.synchronize()

    def probe() -> float:
        got = kv_mlx_load.probe_read(path, "bench", 1 << 40, "stream")
        return -1.0 if got is None else got[1] * 1000

    # the cost model's probe as a fresh worker runs it: its first load in the process
    probe_first = probe() if "stream" in copies else -1.0
    runs: dict[str, list[float]] = {"read_bound": [], "read_parallel": [], "hash": []}
    for c in copies:
        runs[f"load_{c}"], runs[f"touch_{c}"] = [], []
    for r in range(args.repeats + 1):
        got = {"read_bound": _ms(read_bound), "read_parallel": _ms(read_parallel),
               "hash": _ms(hashed)}
        for c in (copies if r % 2 else copies[::-1]):
            got[f"load_{c}"] = _ms(lambda c=c: load(c))
            got[f"touch_{c}"] = _ms(touch)
        if r:  # round 0 warms up
            for k, v in got.items():
                runs[k].append(v)
        print(f"[{time.strftime('%H:%M:%S')}] round {r}: "
              + " ".join(f"{k}={v:.1f}" for k, v in got.items()), file=sys.stderr, flush=True)
    probes = [probe() for _ in range(3)] if "stream" in copies else [-1.0]
    med = {k: round(statistics.median(v), 1) for k, v in runs.items()}
    total = {c: med[f"load_{c}"] + med[f"touch_{c}"] for c in copies}
    out = {
        "device": str(mx.default_device()), "cuda": bool(mx.cuda.is_available()),
        "file_bytes": size, "bits": args.bits, "cpus": os.cpu_count(),
        "read_bound_ms": med["read_bound"], "read_parallel_ms": med["read_parallel"],
        "hash_ms": med["hash"],
        "load_ms": {c: med[f"load_{c}"] for c in copies},
        "touch_ms": {c: med[f"touch_{c}"] for c in copies},
        "load_over_read_bound": {c: round(total[c] / med["read_bound"], 3) for c in copies},
        "best_copy": min(total, key=lambda c: total[c]),
        "prefetch_ok": kv_mlx_load.last_prefetch,
        "probe": {"first_estimate_ms": round(probe_first, 1),
                  "estimate_ms": round(statistics.median(probes), 1),
                  "load_ms": med.get("load_stream"),
                  "estimate_over_load": round(statistics.median(probes) / med["load_stream"], 3)
                  if "stream" in copies else None},
        "runs_ms": {k: [round(x, 1) for x in v] for k, v in runs.items()},
    }
    text = json.dumps(out, indent=2)
    if args.out is not None:
        args.out.write_text(text)
    print(text)
    path.unlink()
    folder.rmdir()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The MLX engine: continuous batching over mlx_lm for every session of one model.

Why not just mlx_lm's BatchGenerator: a lone user would pay for batching (its batched KV
cache makes single-stream decode markedly slower than mlx_lm's own generate_step), and a
conversation's second turn would re-prefill its whole history. So this engine runs:

- one request alone on a plain KV cache with generate_step's pipelining (the next token's
  graph is queued with async_eval before the current one is read back);
- two or more through BatchGenerator (a running single request joins the batch with its
  cache and pending token, nothing is recomputed), decoding with a lean step that skips
  the per-row log-probability split the engine never reads;
- a PrefixCache of finished requests' KV caches, so a new turn prefills only new tokens;
- when a batch drains back to one request, that request returns to the single path.

Stop strings, streaming detokenisation and Usage are handled here; reasoning and tool
markup are left in the raw text for core.parsing (the worker runs StreamParser on top).

The rooms: engine (MlxEngine, the protocol and the hot loop), admission, scheduler,
single (+ chunked, a long prompt a chunk per step), speculative, batch (+ lean_batch, its
decode step), prefix, warmup, checks (model checks and loading), state (the dataclasses
they share).
"""

from __future__ import annotations

import os

# On CUDA, MLX hands attention to cuDNN, which builds a new graph (compiling kernels) for
# every new (batch, query length, cache buffer length) it meets: on the GPU machine that is
# a stall of up to seconds the first time a prompt length, a cached turn's suffix or a
# batch size at a new 256-token cache step comes along, which no warm-up can cover. MLX's
# own attention kernels have no per-shape cost. Set before MLX runs anything (every room
# of this package is imported after this line); an explicit setting in the environment wins.
os.environ.setdefault("MLX_CUDA_USE_CUDNN_SDPA", "0")

from core.engines.mlx.checks import check_architecture, supported_architectures  # noqa: E402
from core.engines.mlx.engine import MlxEngine  # noqa: E402

__all__ = ["MlxEngine", "check_architecture", "supported_architectures"]

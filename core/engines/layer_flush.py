"""Lets the GPU start on a pass's first layers while Python still builds the rest.

MLX is lazy: a forward pass is first built as a graph in Python, layer by layer, and
nothing runs until it is evaluated. In a pass nobody overlaps with (a cached turn's new
tokens, a prompt's last chunk) the time to first token is then the CPU time to build and
launch every layer's kernels plus the GPU time to run them, one after the other. For a
small model on a big GPU both halves are a few milliseconds. Queueing the evaluation of
the hidden state after every few layers (`mx.async_eval`) lets the GPU run those layers
while Python builds the next ones, so the two halves overlap.

Decode steps do not need it (the engine already queues step n+1 before reading step n),
so the flushing is switched on only around the passes that the engine waits on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import mlx.core as mx
import mlx.nn as nn


class FlushSwitch:
    """On only inside `active()`; the wrapped layers read it on every call."""

    def __init__(self) -> None:
        self.on = False

    @contextmanager
    def active(self) -> Iterator[None]:
        self.on = True
        try:
            yield
        finally:
            self.on = False


class _FlushAfter(nn.Module):
    """A model layer that queues its output for evaluation while the switch is on.

    Attribute reads fall through to the wrapped layer, so code that inspects layers
    (cache construction reading `is_linear`, `self_attn`, ...) sees the original.
    """

    def __init__(self, inner: nn.Module, switch: FlushSwitch) -> None:
        super().__init__()
        self.inner = inner
        self._switch = switch

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self.inner(*args, **kwargs)
        if self._switch.on:
            mx.async_eval(out)
        return out

    def __getattr__(self, key: str) -> Any:
        if key in self:
            return self[key]
        try:
            inner = self["inner"]
        except KeyError:
            raise AttributeError(key) from None
        return getattr(inner, key)


def install(model: nn.Module, chunks: int) -> FlushSwitch | None:
    """Wrap the layers that end each of `chunks` groups; None when the model has no
    plain list of layers (then nothing changes)."""
    layers = getattr(model, "layers", None)
    if not isinstance(layers, list) or len(layers) < 2 or chunks < 2:
        return None
    switch = FlushSwitch()
    n = len(layers)
    ends = sorted({round(n * k / chunks) - 1 for k in range(1, chunks)})
    for i in ends:
        if 0 <= i < n - 1 and not isinstance(layers[i], _FlushAfter):
            layers[i] = _FlushAfter(layers[i], switch)
    return switch

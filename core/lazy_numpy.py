"""numpy, imported on first use.

The documents modules use numpy for embeddings and retrieval, but the app imports them at
start-up (the runtime wires documents into every turn) long before any document is
attached. Importing numpy costs ~100 ms and tens of thousands of objects on the way to the
first frame; `np` here is a stand-in that imports it when an attribute is first read.
It is typed Any: annotations in its users are strings (from __future__ import annotations).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class _LazyNumpy:
    __slots__ = ("_module",)

    def __init__(self) -> None:
        self._module: ModuleType | None = None

    def __getattr__(self, name: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module("numpy")
        return getattr(module, name)


np: Any = _LazyNumpy()

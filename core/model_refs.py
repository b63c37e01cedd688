"""Kept path: model references (how a conversation remembers its model) now live in
core.wire.model_refs (the client parses and shows them too); core imports them from here."""

from core.wire.model_refs import ENGINES, ModelRef, display, make, parse

__all__ = ["ENGINES", "ModelRef", "display", "make", "parse"]

"""Kept path: how settings name a remote model now lives in core.wire.model_refs (the
client reads references too); the Runtime and core.remote import it from here."""

from core.wire.model_refs import REMOTE_PREFIX, remote_model_string, remote_ref

__all__ = ["REMOTE_PREFIX", "remote_model_string", "remote_ref"]

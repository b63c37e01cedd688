"""Kept path: the settings rules now live in core.wire.settings_rules (plain functions the
settings form and the config file's reader share); core code imports them from here."""

from core.wire.settings_rules import *  # noqa: F403

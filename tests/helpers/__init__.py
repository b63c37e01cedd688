"""Helpers shared by several test areas (real processes, tmux)."""

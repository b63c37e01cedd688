"""The test helper that reads the foreground in force from a terminal stream."""

from __future__ import annotations

from tests.helpers.sgr import foreground_at

CELL = "\U0010eeee".encode()


def test_a_colour_set_before_other_cells_is_still_in_force() -> None:
    # tmux does not repeat a colour the previous cell already had (CI met id 254 so).
    out = b"\x1b[m\x1b[48;5;234m\x1b[38;5;254m " + CELL
    assert foreground_at(out, out.find(CELL)) == 254


def test_resets_background_and_truecolour_are_read_apart() -> None:
    out = b"\x1b[38;5;20mA\x1b(B\x1b[m" + CELL
    assert foreground_at(out, out.find(CELL)) is None
    out = b"\x1b[38;5;20m\x1b[48;5;99;1mB" + CELL
    assert foreground_at(out, out.find(CELL)) == 20
    out = b"\x1b[38;2;1;2;3m\x1b[91m" + CELL + b"\x1b[38:2:4:5:6m" + CELL
    assert foreground_at(out, out.find(CELL)) == 9
    assert foreground_at(out, out.rfind(CELL)) == (4, 5, 6)

"""How the stdio transport cuts a server's stdout into messages (core.tools.mcp.stdio):
correct for any chunking, and a line over the cap is dropped as it streams, never held."""

from __future__ import annotations

from core.tools.mcp.stdio import MessageLines, TooLong


def feed_all(lines: MessageLines, data: bytes, size: int) -> list[bytes | TooLong]:
    out: list[bytes | TooLong] = []
    for at in range(0, len(data), size):
        out += lines.feed(data[at:at + size])
    return out


def test_lines_come_out_whole_for_any_chunking() -> None:
    data = b'{"a": 1}\n{"b": 2}\n\n{"c": 3}\n'
    for size in (1, 2, 3, 7, 100):
        assert feed_all(MessageLines(100), data, size) == [b'{"a": 1}', b'{"b": 2}', b"", b'{"c": 3}']


def test_a_line_over_the_cap_is_dropped_and_the_next_one_comes_through() -> None:
    long = b'{"jsonrpc": "2.0", "id": 7, "result": "' + b"x" * 1000 + b'"}'
    for size in (1, 5, 64, 5000):
        lines = MessageLines(100)
        out = feed_all(lines, long + b"\n" + b'{"ok": 1}\n', size)
        assert len(out) == 2 and isinstance(out[0], TooLong) and out[1] == b'{"ok": 1}'
        assert out[0].size == len(long) and out[0].head.startswith(b'{"jsonrpc": "2.0", "id": 7')
        assert len(lines.pending) == 0 and lines.skipping is None


def test_nothing_past_the_cap_is_held_while_a_line_streams() -> None:
    lines = MessageLines(1000)
    for _ in range(200):
        assert lines.feed(b"y" * 4096) == []
        assert len(lines.pending) <= 1000 and len(lines.skipping or b"") <= 512

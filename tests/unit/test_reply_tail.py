"""The per-token tail both engines share (core/engines/reply_tail.py), piece by piece."""

from __future__ import annotations

from core.engines.reply_tail import ReplyTail


def _run(tail: ReplyTail, pieces: list[str], *, last: str = "", cut: bool = False) -> str:
    shown = ""
    for piece in pieces:
        text, stopped = tail.feed(piece)
        shown += text
        if stopped:
            return shown + tail.end(cut=cut)
    return shown + tail.end(last, cut=cut)


def test_a_stop_split_over_pieces_is_never_shown_nor_anything_after_it() -> None:
    tail = ReplyTail(["\nUser:"])
    assert _run(tail, ["Hello", ",\nUs", "er: more", " text"]) == "Hello,"
    assert tail.stopped


def test_text_held_back_as_a_possible_stop_is_flushed_at_the_end() -> None:
    assert _run(ReplyTail(["\nUser:"]), ["Hello", "\nUs"]) == "Hello\nUs"
    assert _run(ReplyTail(["</s>"]), ["a", "</"], last="b") == "a</b"


def test_a_reply_cut_by_max_tokens_drops_the_start_of_a_stop() -> None:
    assert _run(ReplyTail(["\nUser:"]), ["Hello", "\nUs"], cut=True) == "Hello"


def test_a_base_prompt_drops_the_replys_leading_whitespace_only() -> None:
    tail = ReplyTail(["\nUser:"], trim_start=True, trim_end=False)
    assert _run(tail, [" ", "\n", "  Hi", " there", "  "]) == "Hi there  "
    # whitespace until the very end: the last piece is trimmed too
    assert _run(ReplyTail((), trim_start=True), [" ", " "], last="  ok") == "ok"
    assert _run(ReplyTail((), trim_start=False), [" ", "a"]) == " a"


def test_nothing_after_a_stop_even_at_the_end() -> None:
    tail = ReplyTail(["STOP"])
    assert tail.feed("aSTOPb") == ("a", True)
    assert tail.end("more") == ""


def test_a_base_prompt_drops_the_newline_its_turn_marker_leaves() -> None:
    """Issue 48.8: every reply ended with "\n" ("Paris.\n\nUser:" stops at "\nUser:")."""
    stops = ["\nUser:", "\nAssistant:", "\n\n\n"]
    assert _run(ReplyTail(stops, trim_start=True), [" The capital", " is Paris.", "\n",
                                                    "\nUser:", " next"]) == "The capital is Paris."
    assert _run(ReplyTail(stops, trim_start=True), ["Paris.\n\n", "User: x"]) == "Paris."
    # whitespace inside the reply still shows, once text follows it
    assert _run(ReplyTail(stops, trim_start=True), ["One.\n", "\nTwo.", " \n"]) == "One.\n\nTwo."
    # the end of a reply with no stop (the model's end of text) is trimmed too
    assert _run(ReplyTail(stops, trim_start=True), ["Done.", "\n"]) == "Done."
    # a chat-templated model keeps what it wrote
    assert _run(ReplyTail(["<end_of_turn>"]), ["Done.\n", "<end_of_turn>"]) == "Done.\n"

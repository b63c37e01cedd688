"""Aliases name exactly one attachment; @doc(...) mentions resolve or are reported."""

from __future__ import annotations

from core.docs.attachments import AttachmentRegistry, parse_mentions, resolve_mentions


def test_duplicate_names_get_numbered_aliases() -> None:
    reg = AttachmentRegistry()
    first = reg.add("/a/report.pdf")
    second = reg.add("/b/report.pdf")
    third = reg.add("/c/report.pdf")
    assert [first.alias, second.alias, third.alias] == [
        "report.pdf",
        "report.pdf #2",
        "report.pdf #3",
    ]
    assert reg.get("report.pdf #2").path == "/b/report.pdf"


def test_removed_alias_is_reused() -> None:
    reg = AttachmentRegistry()
    reg.add("/a/x.txt")
    reg.add("/b/x.txt")
    reg.remove("x.txt #2")
    assert reg.add("/c/x.txt").alias == "x.txt #2"


def test_mentions_resolve_and_unresolved_are_reported() -> None:
    reg = AttachmentRegistry()
    reg.add("/a/report.pdf")
    reg.add("/b/report.pdf")
    reg.add("/c/slides.pptx")
    text = "Compare @doc(report.pdf #2) with @doc(slides.pptx) and @doc(budget.xlsx)."
    res = resolve_mentions(text, reg)
    assert [a.alias for a in res.resolved] == ["report.pdf #2", "slides.pptx"]
    assert [m.alias for m in res.unresolved] == ["budget.xlsx"]
    assert not res.ok
    bad = res.unresolved[0]
    assert text[bad.start : bad.end] == "@doc(budget.xlsx)"


def test_alias_with_parentheses_in_file_name() -> None:
    reg = AttachmentRegistry()
    reg.add("/dl/report (1).pdf")
    res = reg.resolve("what does @doc(report (1).pdf) say?")
    assert [a.alias for a in res.resolved] == ["report (1).pdf"]
    assert res.ok


def test_case_insensitive_match_only_when_unambiguous() -> None:
    reg = AttachmentRegistry()
    reg.add("/a/Notes.md")
    assert reg.resolve("@doc(notes.md)").ok
    reg.add("/b/NOTES.md")
    res = reg.resolve("@doc(notes.MD)")
    assert not res.ok


def test_unclosed_and_empty_mentions_are_flagged() -> None:
    reg = AttachmentRegistry()
    reg.add("/a/a.txt")
    mentions = parse_mentions("see @doc() and @doc(a.txt\nnext line")
    assert [m.alias for m in mentions] == ["", "a.txt"]
    res = reg.resolve("see @doc() here")
    assert len(res.unresolved) == 1


def test_repeated_mention_resolves_once_and_no_mentions_is_ok() -> None:
    reg = AttachmentRegistry()
    reg.add("/a/a.txt")
    res = reg.resolve("@doc(a.txt) and again @DOC(a.txt)")
    assert len(res.resolved) == 1 and len(res.mentions) == 2
    plain = reg.resolve("no mentions here, email me@doc.org")
    assert plain.ok and not plain.mentions

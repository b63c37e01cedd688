"""Conversations sidebar: newest first, with a live full-text search box.

The list's own keys (r rename, d / delete) post requests; the screen asks for the new
name or a confirmation, since it owns the runtime.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, OptionList
from textual.widgets.option_list import Option

from core.wire.store import Conversation, SearchHit
from tui.terminal_text import visible

_OPERATORS = ("OR", "NOT", "AND")


def searched_as_typed(query: str) -> str:
    """What the box searches for while it is typed: its last word as a prefix, so "Germ"
    already finds Germany (the full-text index matches whole words, and the box showed
    "No matches" until a word was typed to its end). A query ending in a space, a quote,
    a `*` or a sign, an operator, or a last word of one letter (a prefix index starts at
    two) is searched as it stands."""
    words = query.split()
    if not words or query[-1].isspace():
        return query
    last = words[-1]
    if len(last) < 2 or last in _OPERATORS or not last[-1].isalnum() or query.count('"') % 2:
        return query
    return query + "*"


def _hit_label(hit: SearchHit) -> Text:
    text = Text(visible(hit.title or "Untitled"), style="bold")
    text.append("\n")
    text.append(highlight_snippet(hit.snippet))
    return text


def _row(conversation: Conversation, repeated: bool) -> Text:
    """A conversation's row: its title (Text, not str: a str prompt is read as markup, and
    a title is anyone's words), and when it was last used where the title repeats."""
    text = Text(visible(conversation.title or "Untitled"))
    if repeated:
        text.append(f" · {last_used(conversation.updated_at)}", style="dim")
    return text


def last_used(at: float, now: float | None = None) -> str:
    """A short date/time: 14:05 today, 28 Nov 14:05 this year, 28 Nov 2025 before."""
    then = time.localtime(at)
    today = time.localtime(now if now is not None else time.time())
    if then[:3] == today[:3]:
        return time.strftime("%H:%M", then)
    if then.tm_year == today.tm_year:
        return time.strftime("%d %b %H:%M", then).lstrip("0")
    return time.strftime("%d %b %Y", then).lstrip("0")


def highlight_snippet(snippet: str) -> Text:
    """Turn the store's highlight markers into highlighted spans."""
    from core.wire.store import snippet_parts  # the search module: not before the first frame

    out = Text()
    for part, matched in snippet_parts(snippet.replace("\n", " ")):
        out.append(visible(part), style="bold reverse" if matched else "dim")
    return out


class ConversationList(OptionList):
    """The conversation rows, with keys for the highlighted one."""

    BINDINGS = [
        Binding("r", "request('rename')", "Rename"),
        Binding("d,delete", "request('delete')", "Delete"),
    ]

    def action_request(self, what: str) -> None:
        if self.highlighted is None:
            return
        oid = self.get_option_at_index(self.highlighted).id or ""
        kind, _, rest = oid.partition(":")
        if kind in ("c", "h"):
            cid = rest.partition(":")[0]
            self.post_message(Sidebar.Requested(cid, what))


class SearchBox(Input):
    """The search box: Down goes to the hits (Enter there opens one), as Enter here does;
    Esc clears the search, so the list shows every conversation again."""

    BINDINGS = [Binding("down", "to_hits", "Hits", show=False),
                Binding("escape", "leave", "Clear search", show=False)]

    def action_to_hits(self) -> None:
        self.screen.query_one("#conversations", OptionList).focus()

    def action_leave(self) -> None:
        """The list showed the last query's hits for good (new conversations missing from
        it) with no key to end it: Esc ends it, then does what Esc does on the chat
        screen (stops a reply; else back to the composer)."""
        self.value = ""
        stop = getattr(self.screen, "action_stop", None)
        if stop is not None:
            stop()


class Sidebar(Vertical):
    """Lists conversations; typing in the search box switches to FTS results."""

    @dataclass
    class Opened(Message):
        conversation_id: str
        message_id: str | None = None

    @dataclass
    class SearchChanged(Message):
        query: str

    @dataclass
    class Requested(Message):
        """Rename or delete a conversation (`action` is "rename" or "delete")."""

        conversation_id: str
        action: str

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self._shown_for: str | None = None  # the query whose results the list shows
        self._open_when_fresh: int | None = None  # a row chosen in stale results

    def compose(self) -> ComposeResult:
        yield SearchBox(placeholder="Search chats (ctrl+f)", id="search")
        yield ConversationList(id="conversations")

    @property
    def options(self) -> OptionList:
        return self.query_one("#conversations", OptionList)

    def show_conversations(self, conversations: list[Conversation], current: str | None = None) -> None:
        options = self.options
        options.clear_options()
        titles = Counter(c.title or "Untitled" for c in conversations)
        options.add_options(
            Option(_row(c, titles[c.title or "Untitled"] > 1), id=f"c:{c.id}")
            for c in conversations
        )
        if not conversations:
            options.add_option(Option(Text("No conversations yet", style="dim"), disabled=True))
        if current is not None:
            self.highlight(current)
        elif conversations:
            options.highlighted = 0
        self._shown("")

    def show_hits(self, hits: list[SearchHit], query: str) -> None:
        options = self.options
        options.clear_options()
        seen: set[str] = set()
        for hit in hits:
            if hit.conversation_id in seen:
                continue
            seen.add(hit.conversation_id)
            options.add_option(Option(_hit_label(hit), id=f"h:{hit.conversation_id}:{hit.message_id or ''}"))
        if not hits:
            options.add_option(Option(Text("No matches", style="dim"), disabled=True))
        else:
            options.highlighted = 0
        self._shown(query)

    @property
    def query_text(self) -> str:
        return self.query_one("#search", Input).value.strip()

    def _shown(self, query: str) -> None:
        """The list now shows the results for `query`; a row chosen while it showed an
        older query's results (Tab and Enter typed right after the query, before its
        search came back) opens now, from the results the user was typing for."""
        self._shown_for = query.strip()
        index = self._open_when_fresh
        if index is None or self._shown_for != self.query_text:
            return
        self._open_when_fresh = None
        options = self.options
        if not options.option_count:
            return
        index = min(index, options.option_count - 1)
        option = options.get_option_at_index(index)
        if not option.disabled:
            options.highlighted = index
            self._open(option.id or "")

    def highlight(self, conversation_id: str) -> None:
        try:
            index = self.options.get_option_index(f"c:{conversation_id}")
        except Exception:
            return
        self.options.highlighted = index

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._open_when_fresh = None  # typed after choosing: the choice no longer stands
        self.post_message(self.SearchChanged(event.value))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self._choose(event.option_index)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the search box opens the highlighted hit (the first, unless Down and
        Up moved it): before, only Tab then Enter did (issue 48)."""
        event.stop()
        options = self.options
        index = options.highlighted if options.highlighted is not None else 0
        if options.option_count or self._shown_for != self.query_text:
            self._choose(index)

    def _choose(self, index: int) -> None:
        if self._shown_for is not None and self._shown_for != self.query_text:
            self._open_when_fresh = index  # its search is still on its way
            return
        options = self.options
        if not 0 <= index < options.option_count:
            return
        option = options.get_option_at_index(index)
        if not option.disabled:
            self._open(option.id or "")

    def _open(self, oid: str) -> None:
        kind, _, rest = oid.partition(":")
        if kind == "c":
            self.post_message(self.Opened(rest))
        elif kind == "h":
            cid, _, mid = rest.partition(":")
            self.post_message(self.Opened(cid, mid or None))

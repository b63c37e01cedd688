"""Documents in the composer area: attachment chips, mention warnings, /attach and its
path completion, the sources line under a cited answer, and the memory rollover marker.

The main screen only forwards to these: the logic of attaching (calling the runtime,
showing each error as the sentence the runtime wrote, giving failed paths back to the
composer) lives here so the screen stays a dispatcher.
"""

from __future__ import annotations

import os
import shlex
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from tui.terminal_text import visible

# The documents and memory layers load after the first frame (tui.warmup): imported here
# only where a result, marker or error is handled.
if TYPE_CHECKING:
    from core.runtime import AttachResult
    from core.wire.docs import Attachment, DocError, MentionResolution
    from core.wire.memory import RolloverMarker

ATTACH = "/attach"
ATTACH_GROUP = "attach"  # the screen's workers reading files; Esc cancels them
MIB = 1024 * 1024


# -- /attach arguments and path completion ---------------------------------------------------
def parse_paths(argument: str) -> list[str]:
    """Paths of `/attach a.pdf "my notes.docx"`; quotes or backslashes keep spaces."""
    try:
        return shlex.split(argument)
    except ValueError:  # an unclosed quote: take the words as they are
        return argument.split()


def path_candidates(partial: str, limit: int = 50) -> list[str]:
    """Entries of the folder `partial` points into whose names start with its last part."""
    expanded = os.path.expanduser(partial) if partial else ""
    folder, _, stem = expanded.rpartition(os.sep)
    base = Path(folder or ("/" if expanded.startswith(os.sep) else "."))
    try:
        names = sorted(
            e.name + (os.sep if e.is_dir() else "")
            for e in os.scandir(base)
            if e.name.startswith(stem) and (stem.startswith(".") or not e.name.startswith("."))
        )
    except OSError:
        return []
    shown_folder = partial[: len(partial) - len(stem)] if stem else partial
    return [shown_folder + name for name in names[:limit]]


def _split_last(text: str) -> tuple[str, str]:
    """(everything before, the last path) where a backslash-escaped space stays in the path."""
    i = len(text)
    while i > 0 and not (text[i - 1] == " " and (i < 2 or text[i - 2] != "\\")):
        i -= 1
    return text[: max(0, i - 1)], text[i:].replace("\\ ", " ")


def complete_attach(text: str) -> str | None:
    """Composer text after Tab on `/attach ... PARTIAL`: the longest common completion."""
    if not text.startswith(ATTACH + " ") or "\n" in text:
        return None
    head, partial = _split_last(text)
    if '"' in partial or "'" in partial:
        return None
    matches = path_candidates(partial)
    if not matches:
        return None
    common = os.path.commonprefix(matches)
    end = " " if len(matches) == 1 and not common.endswith(os.sep) else ""
    if common == partial and not end:
        return None
    return f"{head} {common.replace(' ', chr(92) + ' ')}{end}"


def attach_hint(text: str) -> str:
    """What the hint line shows while a path is typed after /attach."""
    if not text.startswith(ATTACH + " "):
        return ""
    partial = _split_last(text)[1]
    matches = path_candidates(partial, limit=8)
    if not matches:
        return "No such file or folder here." if partial else "Type a path; Tab completes."
    names = [m.rstrip(os.sep).rpartition(os.sep)[2] + ("/" if m.endswith(os.sep) else "")
             for m in matches]
    return "  ".join(names) + "   (tab completes)"


# -- widgets -------------------------------------------------------------------------------------
class AttachmentBar(Vertical):
    """Chips for the conversation's attachments, and one line of warnings or errors."""

    def compose(self) -> ComposeResult:
        yield Horizontal(classes="chips")
        yield Static("", classes="notice")

    def on_mount(self) -> None:
        self._chips: list[str] = getattr(self, "_chips", [])
        self.query_one(".chips", Horizontal).display = bool(self._chips)
        self.notice.display = False
        self._sync()
        listeners = getattr(getattr(self.app, "runtime", None), "memory_listeners", None)
        if listeners is not None:  # a rollover summary can take seconds with a real model
            listeners.append(self._on_memory)

    def on_unmount(self) -> None:
        listeners = getattr(getattr(self.app, "runtime", None), "memory_listeners", None)
        if listeners is not None and self._on_memory in listeners:
            listeners.remove(self._on_memory)

    def _on_memory(self, conversation_id: str, stage: str) -> None:
        """The service's memory stages, pushed to every client: only the open
        conversation's show (or any while a new chat's first turn makes its own)."""
        if getattr(self.screen, "conversation_id", None) not in (None, conversation_id):
            return
        if stage == "summarising":
            self.say("Context is 70% full: summarising the conversation so far…", "info memory")
        elif stage.startswith("describing "):  # the vision worker captions an image
            self.say(stage.removeprefix("describing "), "info memory")
        elif "memory" in self.notice.classes:
            self.say("")

    @property
    def chips(self) -> list[str]:
        return list(getattr(self, "_chips", []))

    @property
    def notice(self) -> Static:
        return self.query_one(".notice", Static)

    def _sync(self) -> None:
        self.display = bool(self._chips) or bool(self.notice.display)

    async def show(self, attachments: Sequence[Attachment | AttachResult]) -> None:
        """Replace the chips with `attachments` (an empty list hides the bar)."""
        self._chips = [a.alias for a in attachments]
        row = self.query_one(".chips", Horizontal)
        await row.remove_children()
        if self._chips:
            await row.mount_all(
                [Static("Attached", classes="chips-label")]
                + [Static(visible(alias), classes="chip", markup=False) for alias in self._chips]
            )
        row.display = bool(self._chips)
        self._sync()

    def clear(self) -> None:
        """A new chat: no chips, no notice."""
        self._chips = []
        row = self.query_one(".chips", Horizontal)
        row.remove_children()
        row.display = False
        self.say("")

    def say(self, text: str, kind: str = "warning") -> None:
        """One line under the chips: "warning", "error" or "info"; "" clears it."""
        notice = self.notice
        notice.set_classes(f"notice {kind}")
        notice.update(text)
        notice.display = bool(text)
        self._sync()

    def show_mentions(self, resolution: MentionResolution) -> None:
        """Flag `@doc(...)` mentions that match no attachment (cleared when all match)."""
        if resolution.ok:
            if "mention" in self.notice.classes:
                self.say("")
            return
        names = ", ".join(f"@doc({m.alias})" for m in resolution.unresolved)
        known = ", ".join(self._chips) if self._chips else "nothing is attached yet"
        self.say(f"⚠ {names} matches no attachment ({known}); fix it before sending.",
                 "warning mention")

    def show_results(self, results: Sequence[AttachResult | DocError]) -> None:
        from core.runtime import AttachResult
        from core.wire.docs import DocError

        errors = [r for r in results if isinstance(r, DocError)]
        done = [r for r in results if isinstance(r, AttachResult)]
        if errors:
            lines = [f"✗ {e.message}" for e in errors]
            if done:
                lines.insert(0, "Attached " + ", ".join(r.label for r in done) + ".")
            self.say("\n".join(lines), "error")
        elif done:
            self.say("Attached " + ", ".join(r.label for r in done) + ".", "info")


class SourcesLine(Static):
    """Under a cited answer: the document excerpts the model was given."""

    def __init__(self, sources: Sequence[str]) -> None:
        super().__init__("Sources: " + " · ".join(f"[{s}]" for s in sources),
                         classes="sources", markup=False)


class MemoryMarker(Vertical):
    """The point where the conversation was summarised into a fresh session."""

    def __init__(self, marker: RolloverMarker) -> None:
        super().__init__(classes="memory-marker")
        self.marker = marker

    def compose(self) -> ComposeResult:
        from core.wire.memory import marker_headline

        m = self.marker
        yield Static(marker_headline(m), classes="memory-headline", markup=False)
        carried = f"kept the last {m.kept_messages} messages"
        if m.facts:
            carried += f" and {len(m.facts)} retrieved facts"
        yield Static(f"Summary ({carried}): {m.summary}", classes="memory-summary",
                     markup=False)


def marker_of(message: Any) -> RolloverMarker | None:
    """The rollover marker a stored message carries (None for ordinary messages)."""
    from core.wire.memory import marker_of as stored_marker

    return stored_marker(message)


def progress_line(name: str, stage: str, done: int, total: int,
                  left_s: float | None = None) -> str:
    """The attachment bar's line while a file is read and indexed (`left_s`: the time
    still to go, as the rate so far says)."""
    pct = f" ({100 * done // total}%)" if total else ""
    if stage == "reading":
        what = f"Reading {name}: {done / MIB:.1f} of {total / MIB:.1f} MB{pct}"
    elif stage == "pages":
        what = f"Reading {name}: page {done} of {total}"
    elif stage == "converting":  # done: seconds so far; total: when the worker gives up
        return f"Converting {name}: {done} s (gives up at {total} s) · Esc cancels"
    else:
        what = f"Indexing {name}: {done:,} of {total:,} passages{pct}"
    if left_s is not None and left_s >= 60:
        what += f", about {round(left_s / 60)} min left"
    elif left_s is not None and left_s >= 5:
        what += f", about {round(left_s)} s left"
    return f"{what} · Esc cancels"


class _Pace:
    """Time left for each file and stage, from its progress since the first report."""

    def __init__(self) -> None:
        self._first: dict[tuple[str, str], tuple[float, int]] = {}

    def left_s(self, name: str, stage: str, done: int, total: int) -> float | None:
        import time

        now = time.monotonic()
        t0, done0 = self._first.setdefault((name, stage), (now, done))
        if done <= done0 or now - t0 < 1.0:
            return None
        return (total - done) * (now - t0) / (done - done0)


# Screens with files being read right now, and how many reads: from the call into the
# runtime until its results are in (not the worker's whole life, which runs on a moment
# longer to draw the results, when Esc must no longer be offered).
_reading: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def start_attach(screen: Any, argument: str) -> None:
    """Run `/attach` in a worker, so the screen keeps taking keys (Esc cancels it)."""
    screen.run_worker(attach_from_composer(screen, argument), group=ATTACH_GROUP,
                      exclusive=False)


def attaching(screen: Any) -> bool:
    """Whether files are being read for the screen (Esc then cancels them)."""
    return _reading.get(screen, 0) > 0


def cancel_attach(screen: Any) -> bool:
    """Cancel the files being attached (True when there were some)."""
    if not attaching(screen):
        return False
    for worker in screen.workers:
        if worker.group == ATTACH_GROUP and worker.node is screen and not worker.is_finished:
            worker.cancel()
    return True


async def attach_from_composer(screen: Any, argument: str) -> None:
    """Run `/attach PATH...` for the main screen: attach, then chips and messages.

    Paths that failed are put back in the composer after `/attach` (when the composer is
    still empty), so a typo is fixed in place; the conversation and its other
    attachments stay as they were. Progress shows in the bar; a cancel changes nothing.
    """
    import asyncio

    from core.runtime import AttachResult
    from core.wire.docs import DocError

    bar = screen.query_one(AttachmentBar)
    paths = parse_paths(argument)
    if not paths:
        bar.say("Usage: /attach PATH [PATH...] (Tab completes paths).", "warning")
        return
    bar.say(f"Reading {len(paths)} file{'s' if len(paths) > 1 else ''}… · Esc cancels",
            "info progress")

    pace = _Pace()

    def progress(name: str, stage: str, done: int, total: int) -> None:
        if "progress" in bar.notice.classes:
            left = pace.left_s(name, stage, done, total)
            bar.say(progress_line(name, stage, done, total, left), "info progress")

    _reading[screen] = _reading.get(screen, 0) + 1
    screen.refresh_bindings()  # the footer offers Esc while a file is read
    try:
        results = await screen.runtime.attach(screen.conversation_id, paths, progress)
    except asyncio.CancelledError:
        bar.say("Cancelled: nothing was attached.", "info")
        raise
    finally:
        _reading[screen] -= 1
        screen.refresh_bindings()
    done = [r for r in results if isinstance(r, AttachResult)]
    if done and screen.conversation_id != done[0].conversation_id:
        screen.conversation_id = done[0].conversation_id
        await screen.refresh_sidebar()
    if screen.conversation_id is not None:
        await bar.show(await screen.runtime.attachments(screen.conversation_id))
    bar.show_results(results)
    from tui.widgets.image_card import ImageCard

    for result in done:  # an image also shows in the chat, where it was attached
        if result.image is not None:
            await screen.chat.add_message(ImageCard(result.alias, result.image))
    failed = [p for p, r in zip(paths, results, strict=True) if isinstance(r, DocError)]
    if failed and not screen.composer.text.strip():
        screen.composer.restore(f"{ATTACH} " + " ".join(shlex.quote(p) for p in failed))

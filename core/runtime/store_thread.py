"""The store's single writer thread: every SQLite call of the Runtime runs on it, in order.

One thread because a SQLite connection belongs to the thread that opened it, and because
one ordered queue means a streamed reply's partial writes, its finish and the next turn's
user message can never race. Opening the file (its integrity check, the recovery of a
damaged one) runs here too, started while the app is built so the first frame can list
the history without waiting.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from core import paths
from core.runtime.state import SIDEBAR_PAGE  # noqa: F401  (named here too)
from core.store import Conversation, Store, StoreError, check_store, open_store
from core.store.errors import CANNOT_OPEN

T = TypeVar("T")
# GIL hand-over interval while the store thread reads the first page (see open_soon).
STARTUP_SWITCH_INTERVAL_S = 5e-5


class StoreThread:
    """The open store and the one thread that may touch it."""

    def __init__(self) -> None:
        self._db = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmdeck-store")
        self._opening: Future[Store] | None = None
        self._checked: Future[Store] | None = None  # the store after its integrity check
        self._first_page: Future[list[Conversation] | None] | None = None
        self._store: Store | None = None
        self._failure: StoreError | None = None
        # Said once the store is open when a damaged database was replaced (for the UI).
        self.notice: str | None = None
        # True from the moment a damaged database is found until open() returns: copying
        # what can be read takes seconds on a long history, and the UI says so meanwhile.
        self.recovering = False

    # -- opening -------------------------------------------------------------------------------
    def open_soon(self) -> None:
        """Open the store and read the sidebar's first page on the store thread now.

        The app calls this as it is built, so both are done while Textual starts up and its
        first frame can list the history (take_first_page): waiting for open() instead
        costs frames, since the loop is busy composing when the store thread answers.

        SQLite releases the GIL for every row it steps, and the UI thread, busy starting up,
        keeps it for the whole switch interval (5 ms) each time: 200 rows took 60-120 ms
        instead of 1. Until the page is read, the interval is 50 us (it costs nothing
        when no other thread waits for the GIL).
        """
        if self._opening is None:
            self._submit_open()
            self._first_page = self._db.submit(self._read_first_page, self._opening)
            self._checked = self._db.submit(self._check, self._opening)
            previous = sys.getswitchinterval()
            if previous > STARTUP_SWITCH_INTERVAL_S:
                sys.setswitchinterval(STARTUP_SWITCH_INTERVAL_S)
                self._first_page.add_done_callback(lambda _: sys.setswitchinterval(previous))

    def _submit_open(self) -> None:
        # paths.db_path() creates folders: on the store thread too, where a read-only home
        # becomes a StoreError that open() reports, not a traceback while the app is built.
        self._opening = self._db.submit(lambda: open_store(paths.db_path()))

    def _check(self, opening: Future[Store]) -> Store:
        """On the store thread after the first page: a damaged file is replaced here (see
        core.store.recovery), so the first frame never waits for the check."""
        return check_store(opening.result(), on_damage=self._on_damage)

    def _on_damage(self) -> None:
        self.recovering = True  # read by the UI while open() still waits

    @staticmethod
    def _read_first_page(opening: Future[Store]) -> list[Conversation] | None:
        try:  # runs on the store thread after the open (one thread, in order): done
            return opening.result().list_conversations(SIDEBAR_PAGE)
        except StoreError:
            return None  # open() reports the open's error; a listing error, the UI's list

    def take_first_page(self) -> list[Conversation] | None:
        """The first page that open_soon read, if it is there now (never waits);
        given out once, None otherwise."""
        page, self._first_page = self._first_page, None
        if page is None or not page.done():
            return None
        return page.result()

    async def open(self) -> Store:
        """The checked store (opened now unless open_soon already started it); raises the
        open's StoreError, which every later `handle` raises again."""
        if self._checked is None:
            self._submit_open()
            self._checked = self._db.submit(self._check, self._opening)
        try:
            self._store = await asyncio.wrap_future(self._checked)
        except StoreError as exc:
            self._failure = exc
            raise
        finally:
            self.recovering = False
        if self._store.recovery is not None:
            self.notice = self._store.recovery.message
        return self._store

    @property
    def handle(self) -> Store:
        """The open store; StoreError (the open's own, with its sentence) when it could not
        be opened, so every caller gets the reason rather than an assertion."""
        if self._store is None:
            raise self._failure or StoreError(
                CANNOT_OPEN, "The conversation history is not open yet; try again in a moment.")
        return self._store

    # -- calls ---------------------------------------------------------------------------------
    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run `fn` on the store thread and wait for its result (or its exception)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._db, lambda: fn(*args, **kwargs))

    def call_nowait(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue a write on the store thread without waiting (ordered with other calls)."""
        self._db.submit(fn, *args)

    async def close(self) -> None:
        """Close the store (waiting for an early open that was never awaited) and the thread."""
        if self._store is None and self._checked is not None:  # opened early, never started
            try:
                self._store = await asyncio.wrap_future(self._checked)
            except StoreError:
                pass
        if self._store is not None:
            await self.call(self._store.close)
        self._db.shutdown(wait=True)

"""A reply the last service was streaming when it died (a crash, kill -9, the Mac
sleeping through a power cut) is still `partial` in the store, with the text saved up to
its last flush. The service that starts next is the store's one writer again, so it
marks each such reply `stopped`, keeping its text: the history then reads as a reply
that ended, with a note saying why, rather than one that looks still under way."""

from __future__ import annotations

from typing import Any

CUT_NOTE = "The reply was cut short: the llmdeck service stopped unexpectedly."


async def stop_cut_replies(runtime: Any) -> int:
    """Mark every partial assistant message stopped; how many there were."""
    store = runtime.store_handle

    def _stop() -> int:
        ids = [row[0] for row in store.conn.execute(
            "SELECT id FROM messages WHERE status = 'partial' AND role = 'assistant'")]
        for message_id in ids:
            store.update_message(message_id, status="stopped", error=CUT_NOTE)
        return len(ids)

    return await runtime.store_call(_stop)

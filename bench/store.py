"""Benchmark the conversation store on a generated history of 10,000 conversations /
200,000 messages (--quick: 1,000 / 20,000, same queries).

Prints one JSON object. Every figure is timed against raw sqlite3 doing the equivalent
work on the same file in the same run: a plain `MATCH ... ORDER BY rank LIMIT 50` with
snippets for search, the last 50 rows by conversation for opening a conversation (no
branch walk), a pointer UPDATE for switching branch, an UPDATE for a streamed delta,
connect + the sidebar SELECT for start-up. `*_throughput_ratio` = raw time / our time
(ours over theirs in operations per second; higher is better, 1.0 = no overhead).

Targets (issue 7): search p95 <= 30 ms, open p95 <= 20 ms, DB open + sidebar <= 50 ms.

Run: .venv/bin/python bench/store.py --quick
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.stats import pct  # noqa: E402
from core.store import MessageStream, Store, fts_query  # noqa: E402
from core.store.store import _CONVERSATION_SELECT  # noqa: E402

# The same queries at both sizes: a rare word, mid and common words, two words, a prefix,
# a phrase, operators, and input that is not valid FTS syntax.
QUERIES = [
    "zebulon", "quorvane", "tamrel", "the", "python error", "tam*", "qu*",
    '"python error"', "velmo OR zebulon", "python NOT error", 'unbalanced "quote', "AND *",
]
TARGETS = {"search_p95_ms": 30.0, "open_p95_ms": 20.0, "db_open_sidebar_p95_ms": 50.0}


def _words(rng: random.Random, n: int) -> list[str]:
    syllables = ["ta", "ve", "lo", "mi", "ran", "zeb", "qu", "or", "el", "mo", "tar", "in",
                 "ka", "su", "ne", "rel", "do", "phi", "xa", "bu"]
    out: set[str] = set()
    while len(out) < n:
        out.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    common = ["the", "a", "to", "of", "and", "is", "in", "it", "you", "that", "python",
              "error", "model", "file", "run", "code", "data", "how", "what", "can"]
    return common + sorted(out)


def generate(path: Path, conversations: int, messages: int, seed: int = 7) -> float:
    """Fill a fresh store in one transaction with executemany, FTS triggers on."""
    rng = random.Random(seed)
    vocab = _words(rng, 8000) + ["zebulon", "quorvane", "tamrel", "velmo", "tarin"]
    zipf = 1.0 / np.arange(1, len(vocab) + 1)
    per = messages // conversations
    lengths = [
        rng.randint(4, 30) if m % 2 == 0 else rng.randint(20, 110)
        for _ in range(conversations) for m in range(per)
    ]
    # All words in one vectorised draw; messages are consecutive slices of it.
    drawn = np.random.default_rng(seed).choice(len(vocab), size=sum(lengths), p=zipf / zipf.sum())
    words = np.array(vocab, dtype=object)[drawn].tolist()
    started = time.perf_counter()
    store = Store.open(path)
    now = time.time()
    conv_rows, msg_rows, cursor = [], [], 0
    for c in range(conversations):
        cid = uuid.uuid4().hex
        t0 = now - rng.uniform(0, 365 * 86400)
        parent = None
        for m in range(per):
            mid = uuid.uuid4().hex
            length = lengths[c * per + m]
            text = " ".join(words[cursor : cursor + length])
            cursor += length
            role, usage = ("user", None) if m % 2 == 0 else ("assistant", f'{{"completion_tokens":{length}}}')
            msg_rows.append((mid, cid, parent, role, text, usage, t0 + m))
            parent = mid
        title = " ".join(rng.choices(vocab[20:], k=rng.randint(2, 6)))
        conv_rows.append((cid, title, "gemma-3-270m", t0, t0 + per, parent))
    conn = store.conn
    conn.execute("PRAGMA cache_size = -65536")  # 64 MB for the bulk load only
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO conversations (id, title, model, created_at, updated_at, active_leaf_id) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        conv_rows,
    )
    conn.executemany(
        "INSERT INTO messages (id, conversation_id, parent_id, role, content, usage, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        msg_rows,
    )
    conn.execute("COMMIT")
    conn.execute("PRAGMA optimize")
    store.close()
    return time.perf_counter() - started


def _holds(path: Path, conversations: int, messages: int) -> bool:
    """Whether a kept DB from an earlier run already has this size (to skip generating)."""
    if not path.exists():
        return False
    conn = sqlite3.connect(path)
    try:
        counts = conn.execute(
            "SELECT (SELECT COUNT(*) FROM conversations), (SELECT COUNT(*) FROM messages)"
        ).fetchone()
    except sqlite3.Error:
        return False
    finally:
        conn.close()
    # The stream section adds one conversation and a few messages per run.
    return counts[0] - conversations in range(0, 50) and counts[1] - messages in range(0, 200)


def _time_ms(fn: Callable[[], Any], repeat: int) -> list[float]:
    fn()  # warm
    out = []
    for _ in range(repeat):
        t = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t) / 1e6)
    return out


def _pct(values: list[float], q: float) -> float:
    return round(pct(values, q), 3)

def run(quick: bool, keep: Path | None) -> dict[str, Any]:
    conversations, messages = (1_000, 20_000) if quick else (10_000, 200_000)
    workdir = Path(tempfile.mkdtemp(prefix="llmdeck-bench-store-"))
    path = keep or workdir / "bench.db"
    gen_s = None
    if not (keep and _holds(path, conversations, messages)):
        for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            stale.unlink(missing_ok=True)
        gen_s = generate(path, conversations, messages)
    rng = random.Random(11)
    repeat = 10 if quick else 20
    result: dict[str, Any] = {
        "bench": "store",
        "quick": quick,
        "conversations": conversations,
        "messages": messages,
        "generate_s": round(gen_s, 2) if gen_s else None,  # None: reused a --keep DB
        "generate_messages_per_s": round(messages / gen_s) if gen_s else None,
        "db_mb": round(path.stat().st_size / 1e6, 1),
    }

    # Start-up: open the file (checks schema, WAL) and fetch the first sidebar page.
    def ours_open_sidebar() -> None:
        with Store.open(path) as s:
            s.list_conversations(limit=100)

    def raw_open_sidebar() -> None:
        c = sqlite3.connect(path)
        c.execute(_CONVERSATION_SELECT + " ORDER BY c.updated_at DESC, c.seq DESC LIMIT 100").fetchall()
        c.close()

    ours = _time_ms(ours_open_sidebar, repeat * 2)
    raw = _time_ms(raw_open_sidebar, repeat * 2)
    result |= {
        "db_open_sidebar_p50_ms": _pct(ours, 0.5),
        "db_open_sidebar_p95_ms": _pct(ours, 0.95),
        "raw_db_open_sidebar_p95_ms": _pct(raw, 0.95),
        "db_open_sidebar_throughput_ratio": round(statistics.median(raw) / statistics.median(ours), 3),
    }

    # The start-up integrity check (core.store.recovery): our quick_check against the full
    # integrity_check it stands in for, on the same file (warm cache).
    def ours_check() -> None:
        with Store.open(path) as s:
            assert s.quick_check() == []

    def raw_integrity() -> None:
        c = sqlite3.connect(path)
        c.execute("PRAGMA integrity_check").fetchall()
        c.close()

    ours = _time_ms(ours_check, 3)
    raw = _time_ms(raw_integrity, 3)
    result |= {
        "startup_check_p50_ms": _pct(ours, 0.5),
        "raw_integrity_check_p50_ms": _pct(raw, 0.5),
        "startup_check_throughput_ratio": round(statistics.median(raw) / statistics.median(ours), 3),
    }

    store = Store.open(path)
    rawc = sqlite3.connect(path)
    rawc.execute("PRAGMA synchronous = NORMAL")  # as ours: compare the work, not fsyncs
    ids = [r[0] for r in rawc.execute("SELECT id FROM conversations")]
    sample = rng.sample(ids, min(200, len(ids)))

    # Open a conversation: its last 50 messages on the active branch.
    ours = [t for cid in sample for t in _time_ms(lambda cid=cid: store.messages(cid, limit=50), 1)]
    raw = [
        t for cid in sample
        for t in _time_ms(lambda cid=cid: rawc.execute(
            "SELECT * FROM messages WHERE conversation_id = ? ORDER BY seq DESC LIMIT 50",
            (cid,)).fetchall(), 1)
    ]
    result |= {
        "open_p50_ms": _pct(ours, 0.5),
        "open_p95_ms": _pct(ours, 0.95),
        "raw_open_p95_ms": _pct(raw, 0.95),
        "open_throughput_ratio": round(statistics.median(raw) / statistics.median(ours), 3),
    }

    # Switching branch: make the path through a conversation's first message active
    # (walks down to its newest leaf) against a bare pointer UPDATE.
    firsts = [
        rawc.execute("SELECT id FROM messages WHERE conversation_id = ? ORDER BY seq LIMIT 1",
                     (cid,)).fetchone()[0]
        for cid in sample[:50]
    ]
    ours = [t for mid in firsts for t in _time_ms(lambda mid=mid: store.switch_branch(mid), 1)]

    def raw_switch(cid: str, mid: str) -> None:
        rawc.execute("UPDATE conversations SET active_leaf_id = ? WHERE id = ?", (mid, cid))
        rawc.commit()

    raw = [t for cid, mid in zip(sample, firsts, strict=False)
           for t in _time_ms(lambda cid=cid, mid=mid: raw_switch(cid, mid), 1)]
    result |= {
        "switch_branch_p50_ms": _pct(ours, 0.5),
        "switch_branch_p95_ms": _pct(ours, 0.95),
        "raw_switch_branch_p95_ms": _pct(raw, 0.95),
        "switch_branch_throughput_ratio": round(statistics.median(raw) / statistics.median(ours), 3),
    }

    # Search: our API (sanitising, one hit per conversation, titles, snippets) against a
    # plain FTS5 query with snippets over the same sanitised expression.
    ours, raw, per_query = [], [], {}
    for query in QUERIES:
        times = _time_ms(lambda q=query: store.search(q, limit=50), repeat)
        ours += times
        per_query[query] = {"p50_ms": _pct(times, 0.5), "hits": len(store.search(query))}
        expression = fts_query(query)
        if expression:
            raw += _time_ms(lambda e=expression: rawc.execute(
                "SELECT rowid, snippet(messages_fts, 0, '«', '»', '…', 12) FROM messages_fts "
                "WHERE messages_fts MATCH ? ORDER BY rank LIMIT 50", (e,)).fetchall(), repeat)
    result |= {
        "search_p50_ms": _pct(ours, 0.5),
        "search_p95_ms": _pct(ours, 0.95),
        "raw_search_p50_ms": _pct(raw, 0.5),
        "raw_search_p95_ms": _pct(raw, 0.95),
        "search_p50_throughput_ratio": round(statistics.median(raw) / statistics.median(ours), 3),
        "search_p95_throughput_ratio": round(_pct(raw, 0.95) / _pct(ours, 0.95), 3),
        "search_by_query": per_query,
    }

    # Streaming: cost of one flushed delta (UPDATE + FTS re-index of the growing message),
    # and of a buffered feed between flushes.
    cid = store.create_conversation("stream bench")
    store.add_message(cid, "user", "write a long answer")
    stream = MessageStream(store, cid, interval=0.0)
    delta = "lorem ipsum dolor sit amet "
    flush_ms = _time_ms(lambda: stream.feed(delta), 400)  # ~11 KB by the end
    stream.finish()
    rid = uuid.uuid4().hex
    rawc.execute("INSERT INTO messages (id, conversation_id, role, content, created_at) "
                 "VALUES (?, ?, 'assistant', '', 0)", (rid, cid))
    rawc.commit()
    text = [""]

    def raw_update() -> None:
        text[0] += delta
        rawc.execute("UPDATE messages SET content = ? WHERE id = ?", (text[0], rid))
        rawc.commit()

    raw_flush = _time_ms(raw_update, 400)
    buffered = MessageStream(store, cid, interval=3600.0)
    feed_ms = _time_ms(lambda: buffered.feed(delta), 2000)
    buffered.finish()
    result |= {
        "append_delta_flush_p50_ms": _pct(flush_ms, 0.5),
        "append_delta_flush_p95_ms": _pct(flush_ms, 0.95),
        "raw_append_delta_flush_p95_ms": _pct(raw_flush, 0.95),
        "append_delta_throughput_ratio": round(statistics.median(raw_flush) / statistics.median(flush_ms), 3),
        "append_delta_buffered_p50_us": round(statistics.median(feed_ms) * 1000, 2),
        "append_delta_buffered_p95_us": round(sorted(feed_ms)[int(0.95 * len(feed_ms))] * 1000, 2),
    }
    store.close()
    rawc.close()
    result["targets"] = TARGETS
    result["targets_met"] = {name: result[name] <= limit for name, limit in TARGETS.items()}
    if keep is None:
        for leftover in workdir.iterdir():
            leftover.unlink()
        workdir.rmdir()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 conversations / 20,000 messages")
    parser.add_argument(
        "--keep", type=Path,
        help="keep the generated DB at this path, and reuse it next time if it has the right size",
    )
    args = parser.parse_args()
    print(json.dumps(run(args.quick, args.keep)))


if __name__ == "__main__":
    main()

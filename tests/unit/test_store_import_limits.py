"""Conversation imports from outside (issue 38): streamed, bounded, never overwriting.

A 72 MiB export of 10^6 messages once imported in 44 s at a 3 GiB peak, because the
whole document was parsed before the first row. Each test goes through Store.import_json,
the door the app uses, and checks from outside: memory measured, the database unchanged
after a refusal, the existing conversation byte for byte the same after a collision."""

from __future__ import annotations

import json
import os
import threading
import time
import tracemalloc
from pathlib import Path

import psutil
import pytest

from core.store import Store, StoreError, exchange
from core.store.export_reader import ExportLimits
from tests.fixtures.store import store_fixture, store_path_fixture  # noqa: F401

MIB = 1024 * 1024


def write_export(path: Path, count: int, *, conversation_id: str = "c-import",
                 body: str = "a short message",
                 ids: list[str] | None = None) -> Path:
    """An export of `count` messages in one chain, written line by line (no big strings)."""
    with path.open("w", encoding="utf-8") as f:
        f.write('{"format": "llmdeck.conversation", "version": 1, "conversation": ')
        f.write(json.dumps({"id": conversation_id, "title": "Imported", "model": "m",
                            "created_at": 1.0, "updated_at": 2.0,
                            "active_leaf_id": (ids or [f"m{count - 1}"])[-1]}))
        f.write(', "messages": [\n')
        parent = None
        for i in range(count):
            mid = ids[i] if ids else f"m{i}"
            f.write(("," if i else "") + json.dumps(
                {"id": mid, "parent_id": parent, "role": "user" if i % 2 == 0 else "assistant",
                 "content": f"{body} {i}", "created_at": 3.0 + i}) + "\n")
            parent = mid
        f.write('], "attachments": []}')
    return path


class RssPeak:
    """The process's resident memory sampled every 5 ms while a block runs (psutil)."""

    def __init__(self) -> None:
        self.process = psutil.Process()
        self.start = self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def grew(self) -> int:
        return self.peak - self.start


def test_a_hundred_thousand_messages_import_streamed_in_bounded_memory(
    store: Store, tmp_path: Path
) -> None:
    path = write_export(tmp_path / "big.json", 100_000)
    assert path.stat().st_size > 9 * MIB
    t0 = time.perf_counter()
    with RssPeak() as rss:
        cid = store.import_json(path)
    seconds = time.perf_counter() - t0
    print(f"100,000 messages ({path.stat().st_size / MIB:.1f} MiB): {seconds:.1f} s, "
          f"RSS grew {rss.grew / MIB:.0f} MiB")
    assert cid == "c-import"
    assert store.get_conversation(cid).message_count == 100_000
    assert rss.grew < 96 * MIB, f"RSS grew {rss.grew / MIB:.0f} MiB"
    assert seconds < 60
    last = store.messages(cid, limit=1)
    assert last[0].id == "m99999" and last[0].parent_id == "m99998"


def test_the_python_heap_stays_small_whatever_the_length(store: Store, tmp_path: Path) -> None:
    """tracemalloc: the heap is the ids seen plus one batch, not the document. Reading the
    whole file first (the old import) peaked at several times the file's size."""
    path = write_export(tmp_path / "big.json", 10_000, body="word " * 200)
    tracemalloc.start()
    try:
        store.import_json(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    size = path.stat().st_size
    print(f"file {size / MIB:.1f} MiB, Python heap peak {peak / MIB:.1f} MiB")
    assert peak < 10 * MIB, f"{peak / MIB:.1f} MiB for a file of {size / MIB:.1f} MiB"


def test_a_file_over_the_size_limit_is_refused_before_a_byte_is_read(
    store: Store, tmp_path: Path
) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as f:
        f.truncate(257 * MIB)  # sparse: nothing is written, nothing could be read cheaply
    with RssPeak() as rss:
        with pytest.raises(StoreError) as info:
            store.import_json(path)
    assert info.value.code == "BAD_IMPORT"
    assert "it is 257 MB, over the 256 MB limit for an import" in info.value.message
    assert "nothing was imported" in info.value.message
    assert rss.grew < 16 * MIB
    assert store.list_conversations() == []


def test_a_text_over_the_size_limit_is_refused(store: Store,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exchange, "DEFAULT_LIMITS", ExportLimits(file_bytes=MIB))
    with pytest.raises(StoreError) as info:
        store.import_json(" " * (MIB + 1))
    assert "over the 1 MB limit for an import" in info.value.message
    assert store.list_conversations() == []


def test_too_many_messages_are_refused_and_nothing_is_written(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = store.create_conversation("Mine")
    store.add_message(before, "user", "keep me")
    monkeypatch.setattr(exchange, "DEFAULT_LIMITS", ExportLimits(messages=1_000))
    path = write_export(tmp_path / "many.json", 1_001)
    changes = store.conn.total_changes
    with pytest.raises(StoreError) as info:
        store.import_json(path)
    assert store.conn.total_changes == changes, "refused before a row was written"
    assert "it holds more than 1,000 messages, the limit for one import" in info.value.message
    assert "nothing was imported" in info.value.message
    assert [c.id for c in store.list_conversations()] == [before]
    assert store.conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 1
    assert store.search("ordinary") == []


def test_a_message_over_the_size_limit_is_refused(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "fat.json"
    write_export(path, 3)
    document = json.loads(path.read_text())
    document["messages"][1]["content"] = "x" * (9 * MIB)  # over the 8 MB for one message
    path.write_text(json.dumps(document))
    with RssPeak() as rss:
        with pytest.raises(StoreError) as info:
            store.import_json(path)
    assert "message 1 is over the 8 MB limit" in info.value.message, info.value.message
    assert rss.grew < 96 * MIB, f"{rss.grew / MIB:.0f} MiB to refuse it"
    assert store.list_conversations() == []


def _conversation_rows(store: Store, cid: str) -> tuple[list, list, list]:
    conn = store.conn
    return (
        conn.execute("SELECT * FROM conversations WHERE id = ?", (cid,)).fetchall(),
        conn.execute("SELECT * FROM messages WHERE conversation_id = ? ORDER BY seq",
                     (cid,)).fetchall(),
        conn.execute("SELECT * FROM attachments WHERE conversation_id = ?", (cid,)).fetchall(),
    )


def test_ids_that_collide_never_overwrite_they_are_minted_afresh(
    store: Store, tmp_path: Path
) -> None:
    mine = store.create_conversation("Mine")
    q = store.add_message(mine, "user", "my question")
    a = store.add_message(mine, "assistant", "my answer")
    att = store.add_attachment(mine, "notes", "/n.txt", text="my notes")
    rows_before, export_before = _conversation_rows(store, mine), store.export_json(mine)
    # Another conversation whose messages and attachment reuse my ids, with other text.
    path = write_export(tmp_path / "theirs.json", 3, conversation_id="theirs",
                        body="their text", ids=[q, a, "t3"])
    document = json.loads(path.read_text())
    document["attachments"] = [{"id": att, "alias": "x", "path": "/x", "text": "theirs"}]
    path.write_text(json.dumps(document))
    cid = store.import_json(path)
    assert cid == "theirs"
    assert _conversation_rows(store, mine) == rows_before
    assert store.export_json(mine) == export_before
    theirs = store.messages(cid)
    assert [m.content for m in theirs] == ["their text 0", "their text 1", "their text 2"]
    assert theirs[0].id not in (q, a) and theirs[1].id not in (q, a) and theirs[2].id == "t3"
    assert theirs[1].parent_id == theirs[0].id and theirs[2].parent_id == theirs[1].id
    assert store.get_conversation(cid) is not None
    [their_att] = store.attachments(cid)
    assert their_att.id != att and their_att.text == "theirs"
    # The conversation's own id taken: a copy with every id fresh; mine untouched again.
    copy = store.import_json(tmp_path / "theirs.json")
    assert copy != cid and _conversation_rows(store, mine) == rows_before
    assert {m.id for m in store.messages(copy)}.isdisjoint({m.id for m in theirs})


@pytest.mark.parametrize(("messages", "says"), [
    ([{"id": "a", "role": "user", "parent_id": "b"}, {"id": "b", "role": "user", "parent_id": "a"}],
     "message 0 replies to a message that is not before it"),
    ([{"id": "a", "role": "user", "parent_id": "a"}],
     "message 0 replies to a message that is not before it"),
    ([{"id": "a", "role": "user"}, {"id": "b", "role": "user", "parent_id": "a"},
      {"id": "a", "role": "user", "parent_id": "b"}],
     "message 2 repeats the id of an earlier one"),
], ids=["two-cycle", "self-parent", "cycle-through-a-repeated-id"])
def test_parent_cycles_are_refused(store: Store, messages: list, says: str) -> None:
    text = json.dumps({"format": "llmdeck.conversation", "version": 1,
                       "conversation": {"id": "c"}, "messages": messages})
    with pytest.raises(StoreError) as info:
        store.import_json(text)
    assert says in info.value.message and "nothing was imported" in info.value.message
    assert store.list_conversations() == []
    assert store.conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 0


@pytest.mark.parametrize(("document", "says"), [
    ({"conversation": {"id": "c", "title": {"a": 1}}, "messages": []},
     "the title has dict where text goes"),
    ({"conversation": {"id": "c"}, "messages": [{"id": "m", "role": "user", "content": [1]}]},
     "message 0 has list where text goes"),
    ({"conversation": {"id": "c"}, "messages": [{"id": "m", "role": "user", "created_at": "x"}]},
     "message 0 has 'x' where a time goes"),
    ({"messages": [{"id": "m", "role": "user"}], "conversation": {"id": "c"}},
     "no conversation or messages, or its conversation comes after them"),
], ids=["dict-title", "list-content", "word-for-time", "messages-first"])
def test_fields_of_the_wrong_kind_are_refused_not_crashing(store: Store, document: dict,
                                                           says: str) -> None:
    """A dict where text goes raised sqlite3.ProgrammingError out of the import."""
    text = json.dumps({"format": "llmdeck.conversation", "version": 1, **document})
    with pytest.raises(StoreError) as info:
        store.import_json(text)
    assert says in info.value.message, info.value.message
    assert store.list_conversations() == []


def test_a_fifo_named_like_an_export_is_refused_without_blocking(store: Store,
                                                                 tmp_path: Path) -> None:
    fifo = tmp_path / "export.json"
    os.mkfifo(fifo)
    t0 = time.perf_counter()
    with pytest.raises(StoreError) as info:
        store.import_json(fifo)
    assert "it is not a regular file" in info.value.message
    assert time.perf_counter() - t0 < 2


def test_text_that_is_not_utf8_is_refused(store: Store, tmp_path: Path) -> None:
    path = write_export(tmp_path / "latin.json", 2, body="caf\u00e9")
    path.write_bytes(path.read_bytes().replace(b'"caf', b'"caf\xe9'))
    with pytest.raises(StoreError) as info:
        store.import_json(path)
    assert "it is not UTF-8 text" in info.value.message
    assert store.list_conversations() == []


def test_an_empty_conversation_and_a_file_object_import(store: Store, tmp_path: Path) -> None:
    cid = store.create_conversation("Empty")
    exported = store.export_json(cid)
    path = tmp_path / "empty.json"
    path.write_text(exported)
    with Store.open(tmp_path / "other.db") as other:
        with path.open("rb") as f:
            assert other.import_json(f) == cid
        assert other.export_json(cid) == exported


def test_the_streamed_reader_agrees_with_json_loads_at_every_block_boundary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Blocks of 7 characters cut every number, escape and string somewhere."""
    import random

    from core.store import export_reader
    from core.store.export_reader import STREAMED, read_export

    monkeypatch.setattr(export_reader, "READ_CHARS", 7)
    monkeypatch.setattr(export_reader, "SCALAR_CHARS", 3)
    rng = random.Random(38)
    values = [0, -12.5e-3, 123456789012345678901234567890, True, None, "", "a\"b\\c\u00e9\n",
              "\U0001F600 emoji", [], {}, [1, [2, [3]]], {"k": {"l": ["m", 1.5]}}]
    for _ in range(60):
        document = {"format": "llmdeck.conversation", "version": 1,
                    "conversation": {"id": "c", "x": rng.choice(values)},
                    "messages": [{"id": f"m{i}", "v": rng.choice(values)}
                                 for i in range(rng.randrange(0, 6))]}
        text = json.dumps(document, ensure_ascii=rng.random() < 0.5,
                          indent=rng.choice([None, 1]))
        source = text if rng.random() < 0.5 else text.encode()
        got: dict = {}
        for member in read_export(source):
            if member.index is None:
                got[member.key] = [] if member.value is STREAMED else member.value
            else:
                got[member.key].append(member.value)
        assert got == json.loads(text), text


@pytest.mark.parametrize(("text", "says"), [
    ('{"format": "llmdeck.conversation"} trailing', "there is more text after the export"),
    ('{"messages": [{"id": "m"}, ]}', "message 1 is not valid JSON"),
    ('{"messages": [{"id": "m", "content": "never closed', "message 0 is cut short"),
    ('{"format": 1, "format": 2}', "it has two 'format' members"),
    ('{"messages": [' + "[" * 5000 + "]" * 5000 + "]}", "message 0 is nested too deeply"),
], ids=["trailing", "bad-element", "cut-short", "repeated-key", "deep"])
def test_the_streamed_reader_says_what_is_wrong(store: Store, text: str, says: str) -> None:
    with pytest.raises(StoreError) as info:
        store.import_json(text)
    assert says in info.value.message, info.value.message
    assert store.list_conversations() == []

"""Retrieval through the real markitdown and the real bundled MiniLM model.

One embedder is loaded per module (the model load dominates the cost), shared by
every test here; the idle-unload test runs last and restores it.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from core.docs.chunking import chunk_sections
from core.docs.embeddings import Embedder, ensure_model_files
from core.docs.errors import DocError
from core.docs.extract import extract
from core.docs.persist import load_results, save_result
from core.docs.retrieval import IngestResult, VectorIndex, build_context, ingest
from core.docs.service import DocsService
from tests.fixtures.docs_files import FACTS, make_fact_document, make_pdf, make_pptx, make_xlsx

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("llmdeck-home")
        mp.setenv("LLMDECK_HOME", str(path))
        yield path


@pytest.fixture(scope="module")
def model_folder(home: Path) -> Path:
    return ensure_model_files()  # conftest gives each test its own home: pin this one


@pytest.fixture(scope="module")
def embedder(model_folder: Path) -> Embedder:
    # No idle timer: unloading is tested explicitly below.
    emb = Embedder(idle_seconds=0, model_path=model_folder)
    emb.encode(["warm up"])
    yield emb
    emb.unload()


@pytest.fixture(scope="module")
def fact_doc(home: Path, embedder: Embedder) -> tuple[IngestResult, dict[int, int]]:
    path = home / "handbook.pdf"
    where = make_fact_document(path, pages=50)
    result = ingest(path, embedder=embedder)
    assert isinstance(result, IngestResult)
    return result, where


def test_model_comes_from_the_bundled_package(
    home: Path, model_folder: Path, embedder: Embedder
) -> None:
    assert model_folder == home / "cache" / "embeddings" / "all-MiniLM-L6-v2"
    assert (model_folder / "model.safetensors").stat().st_size > 80_000_000
    vecs = embedder.encode(["a cat sat on the mat", "a kitten rested on the rug", "tax law"])
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2]


def test_large_document_is_chunked_with_page_labels(fact_doc) -> None:
    result, _ = fact_doc
    assert not result.whole and result.units == 50
    assert result.vectors.shape == (len(result.chunks), 384)
    assert {c.label for c in result.chunks} == {f"p.{i}" for i in range(1, 51)}


def test_chunks_fit_minilm_window_by_its_real_tokenizer(fact_doc, embedder: Embedder) -> None:
    result, _ = fact_doc
    tokenizer = embedder._model.tokenizer  # the real WordPiece tokenizer of the model
    longest = max(len(tokenizer(c.text)["input_ids"]) for c in result.chunks)
    assert longest <= 256


def test_recall_at_5_on_paraphrased_questions(fact_doc, embedder: Embedder) -> None:
    result, where = fact_doc
    index = VectorIndex()
    index.add_result(result)
    found = 0
    for i, (_, question) in enumerate(FACTS):
        hits = index.search(embedder.encode_one(question), k=5)
        if f"p.{where[i]}" in [h.chunk.label for h in hits]:
            found += 1
    recall = found / len(FACTS)
    assert recall >= 0.9, f"recall@5 = {recall}"


def test_build_context_cites_the_page(fact_doc, embedder: Embedder) -> None:
    result, where = fact_doc
    context = build_context(FACTS[5][1], [result], embedder=embedder, k=3)
    assert f"[handbook.pdf p.{where[5]}]" in context
    assert "1,270 meters" in context
    assert context.count("[handbook.pdf p.") == 3


def test_small_document_goes_in_whole_with_its_labels(home: Path, embedder: Embedder) -> None:
    deck = make_pptx(home / "deck.pptx", [("Plan", "Launch in June"), ("Budget", "40k EUR")])
    result = ingest(deck, embedder=embedder)
    assert isinstance(result, IngestResult) and result.whole and len(result.chunks) == 0
    context = build_context("anything", [result], embedder=embedder)
    assert "[deck.pptx slide 1]" in context and "[deck.pptx slide 2]" in context
    assert "Launch in June" in context and "40k EUR" in context


def test_model_loads_lazily_only_when_something_needs_embedding(
    home: Path, model_folder: Path
) -> None:
    fresh = Embedder(idle_seconds=0, model_path=model_folder)
    small = make_pdf(home / "memo.pdf", ["Lunch moves to noon on Fridays."])
    result = ingest(small, embedder=fresh)
    assert isinstance(result, IngestResult) and result.whole
    assert not fresh.is_loaded and fresh.loads == 0


def test_index_save_and_load_round_trip(fact_doc, home: Path, embedder: Embedder) -> None:
    result, where = fact_doc
    index = VectorIndex()
    index.add_result(result)
    index.save(home / "index")
    loaded = VectorIndex.load(home / "index")
    q = embedder.encode_one(FACTS[0][1])
    assert [h.chunk for h in loaded.search(q, 5)] == [h.chunk for h in index.search(q, 5)]


def test_service_attaches_several_mentions_select_and_errors_change_nothing(
    home: Path, embedder: Embedder
) -> None:
    sheet = make_xlsx(home / "ledger.xlsx", {"Q1": [["item", "eur"], ["rent", 800]]})
    pages = [
        f"Page {i}. " + "routine filler text about nothing in particular. " * 30
        for i in range(1, 9)
    ]
    pages[4] += " The vault combination is 31-07-22."
    report = make_pdf(home / "report.pdf", pages)
    (home / "copy").mkdir()
    copy = make_pdf(home / "copy" / "report.pdf", pages)
    service = DocsService(embedder, whole_threshold=300)

    async def attach():
        with ThreadPoolExecutor(2) as pool:
            return await service.attach_many(
                "c1", [report, copy, sheet, home / "missing.pdf"], executor=pool
            )

    results = asyncio.run(attach())
    assert [r.alias for r in results[:3]] == ["report.pdf", "report.pdf #2", "ledger.xlsx"]
    assert isinstance(results[3], DocError) and results[3].code == "NOT_FOUND"
    assert [a.alias for a in service.registry("c1").all()] == [
        "report.pdf",
        "report.pdf #2",
        "ledger.xlsx",
    ]

    check = service.check_mentions("c1", "see @doc(report.pdf #2) and @doc(nothing.pdf)")
    assert [m.alias for m in check.unresolved] == ["nothing.pdf"]

    context = service.context_for("c1", "What is the vault combination in @doc(report.pdf #2)?")
    assert "[report.pdf #2 p.5]" in context and "[report.pdf p." not in context
    assert "ledger.xlsx" not in context
    everything = service.context_for("c1", "What is the vault combination?")
    assert "[ledger.xlsx sheet Q1]" in everything and "31-07-22" in everything
    hits = service.retrieve("c1", "vault combination", k=2)
    assert {h.chunk.label for h in hits} == {"p.5"}
    assert service.detach("c1", "report.pdf")
    assert "[report.pdf p." not in service.context_for("c1", "vault combination")


def test_documents_round_trip_through_the_real_store(
    fact_doc, home: Path, embedder: Embedder
) -> None:
    from core.store import Store

    result, where = fact_doc
    memo = ingest(make_pdf(home / "memo2.pdf", ["Lunch moves to noon.", "Parking on level 2."]))
    assert isinstance(memo, IngestResult) and memo.whole
    store = Store.open(home / "docs-test.db")
    try:
        conversation = store.create_conversation("docs")
        save_result(store, conversation, result)
        save_result(store, conversation, memo)
        loaded = load_results(store, conversation)
    finally:
        store.close()
    assert [r.alias for r in loaded] == ["handbook.pdf", "memo2.pdf"]
    big, small = loaded
    assert not big.whole and big.chunks == result.chunks
    assert np.array_equal(big.vectors, result.vectors)
    assert small.whole and [s.label for s in small.sections] == ["p.1", "p.2"]

    service = DocsService(embedder)
    for r in loaded:
        service.add_result("c", r)
    context = service.context_for("c", FACTS[10][1])
    assert f"[handbook.pdf p.{where[10]}]" in context and "15 minutes" in context
    assert "[memo2.pdf p.2]" in context


def test_ingest_runs_in_a_spawned_worker_process(home: Path, embedder: Embedder) -> None:
    """What the utility worker does: ingest in another process, results pickled back."""
    import multiprocessing

    memo = make_pdf(home / "worker-memo.pdf", ["Standup moves to 9:30.", "Retro on Friday."])
    service = DocsService(embedder)

    async def attach():
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(1, mp_context=ctx) as pool:
            return await service.attach_many("w", [memo, home / "nope.docx"], executor=pool)

    ok, missing = asyncio.run(attach())
    assert isinstance(ok, IngestResult) and [s.label for s in ok.sections] == ["p.1", "p.2"]
    assert isinstance(missing, DocError) and missing.code == "NOT_FOUND"
    assert "[worker-memo.pdf p.2]" in service.context_for("w", "when is the retro?")


def test_retrieved_facts_feed_memory_rollover(fact_doc, embedder: Embedder) -> None:
    from core.memory import ContextMonitor, ConversationMemory

    result, where = fact_doc
    service = DocsService(embedder)
    service.add_result("m", result)
    memory = ConversationMemory(
        "m",
        ContextMonitor(context_tokens=300),
        lambda messages: "We talked about the handbook.",
        retrieve=lambda q: service.facts_for("m", q, k=2),
    )
    for i in range(8):
        memory.prepare(f"Tell me more about section {i} of the handbook, please, in detail.")
        memory.record_reply("It covers routine matters " * 8)
    plan = memory.prepare(FACTS[7][1])  # this turn crosses the threshold (deterministic)
    marker = plan.marker
    assert marker is not None and marker.facts
    assert all(f.endswith("]") and "[handbook.pdf p." in f for f in marker.facts)
    assert marker.facts[0] == f"{FACTS[7][0]} [handbook.pdf p.{where[7]}]"
    assert any(FACTS[7][0] in m["content"] for m in plan.messages)


def test_extract_is_consistent_with_ingest_sections(home: Path) -> None:
    path = make_pdf(home / "two.pdf", ["one", "two"])
    doc = extract(path)
    assert [c.label for c in chunk_sections("two.pdf", doc.sections)] == ["p.1", "p.2"]


def test_idle_model_unloads_and_reloads_on_demand(embedder: Embedder) -> None:
    embedder.idle_seconds = 0.2
    try:
        loads = embedder.loads
        embedder.encode(["keep me warm"])
        deadline = time.monotonic() + 10
        while embedder.is_loaded and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not embedder.is_loaded
        embedder.encode(["wake up"])
        assert embedder.is_loaded and embedder.loads == loads + 1
    finally:
        embedder.idle_seconds = 0

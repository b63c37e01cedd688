"""Hostile attachments (issue 19): binary data behind a text extension, huge files,
punctuation floods. Each is refused with a sentence, or read in bounded memory."""

from __future__ import annotations

import codecs
import random
import subprocess
import tracemalloc
from pathlib import Path

import pytest

from core.docs.chunking import _TOKEN, chunk_text
from core.docs.errors import DocError
from core.docs.extract import ExtractedDoc, extract

MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMDECK_HOME", str(tmp_path / "home"))


def _peak(fn) -> tuple[object, int]:
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_99_mib_of_nul_bytes_as_txt_is_refused_after_one_block(tmp_path: Path) -> None:
    path = tmp_path / "zeros.txt"
    subprocess.run(["truncate", "-s", "99M", str(path)], check=True)  # the reported file
    err, peak = _peak(lambda: extract(path, max_bytes=200 * MIB))
    assert isinstance(err, DocError) and err.code == "BINARY", err
    assert "zeros.txt is not text" in err.message and "export it as text" in err.message
    assert peak < 8 * MIB, f"read {peak / MIB:.0f} MiB to refuse it"


def test_default_size_limit_refuses_it_first_and_names_the_setting(tmp_path: Path) -> None:
    path = tmp_path / "zeros.txt"
    subprocess.run(["truncate", "-s", "99M", str(path)], check=True)
    err = extract(path)
    assert isinstance(err, DocError) and err.code == "TOO_LARGE"
    assert "99 MB" in err.message and "20 MB" in err.message and "attach_max_mb" in err.message


def test_text_that_turns_binary_part_way_is_refused_where_it_turns(tmp_path: Path) -> None:
    path = tmp_path / "log.md"
    with path.open("wb") as f:
        f.write(b"# A log\n" + b"plain words here\n" * 70_000)  # ~1.1 MiB of text
        f.write(b"\0" * (2 * MIB))
    progress: list[tuple[str, int, int]] = []
    err = extract(path, max_bytes=10 * MIB, progress=lambda *a: progress.append(a))
    assert isinstance(err, DocError) and err.code == "BINARY"
    assert "around byte 1,048,576" in err.message
    assert progress and progress[0] == ("reading", MIB, path.stat().st_size)


@pytest.mark.parametrize(("name", "body"), [
    ("table.csv", b"a,b\n1,2\n" + b"\0" * 50_000 + b"\n3,4\n"),
    ("page.html", b"<html><body><p>hi</p>" + b"\0" * 200_000 + b"</body></html>"),
], ids=["csv", "html"])
def test_converted_text_formats_are_sniffed_before_the_converter(tmp_path: Path, name: str,
                                                                 body: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(body)
    err = extract(path)
    assert isinstance(err, DocError) and err.code == "BINARY", err


def test_utf16_text_is_not_mistaken_for_binary(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(codecs.BOM_UTF16_LE + "Grüße aus Köln.\n".encode("utf-16-le") * 3)
    doc = extract(path)
    assert isinstance(doc, ExtractedDoc) and doc.text.startswith("Grüße aus Köln.")


def test_legacy_encoded_text_is_decoded_not_mangled(tmp_path: Path) -> None:
    path = tmp_path / "old.txt"
    path.write_bytes("Café prices: 3 € each, naïve façade.\n".encode("cp1252") * 200)
    doc = extract(path)
    assert isinstance(doc, ExtractedDoc) and "Café" in doc.text and "façade" in doc.text


def test_plain_text_is_read_block_by_block_with_progress(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    line = "The quick brown fox jumps over the lazy dog. " * 3 + "\n"
    path.write_text(line * (int(2.5 * MIB) // len(line)))
    seen: list[tuple[str, int, int]] = []
    doc = extract(path, max_bytes=10 * MIB, progress=lambda *a: seen.append(a))
    assert isinstance(doc, ExtractedDoc) and doc.text == path.read_text().strip()
    size = path.stat().st_size
    assert [s[1] for s in seen] == [MIB, 2 * MIB, size] and all(s[2] == size for s in seen)


def _reference_chunks(text: str, max_tokens: int, overlap: int) -> list[str]:
    """The windows as first specified (all spans in a list), to pin the streaming one."""
    spans = [m.span() for m in _TOKEN.finditer(text)]
    out, start = [], 0
    while spans:
        end = min(start + max_tokens, len(spans))
        out.append(text[spans[start][0]:spans[end - 1][1]])
        if end == len(spans):
            break
        start += max_tokens - overlap
    return out


def test_streamed_chunking_gives_the_same_windows() -> None:
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randrange(0, 120)
        text = " ".join(rng.choice(["a", "b,", "c.", "dd", "!"]) for _ in range(n))
        size = rng.randrange(2, 30)
        overlap = rng.randrange(0, size)
        got = [c.text for c in chunk_text("d", "", text, size, overlap)]
        assert got == _reference_chunks(text, size, overlap), (text, size, overlap)


def test_a_flood_of_punctuation_chunks_in_memory_of_one_chunk() -> None:
    text = "." * (MIB // 2)  # one token per byte: once a list of 524,288 span tuples (40 MiB)
    chunks, peak = _peak(lambda: chunk_text("d", "", text, 200, 40))
    assert len(chunks) == (MIB // 2 - 40) // 160 + 1
    chunk_bytes = sum(len(c.text) for c in chunks)
    assert peak < chunk_bytes + 8 * MIB, f"peak {peak / MIB:.0f} MiB"


def test_an_office_file_that_unpacks_to_gigabytes_is_refused_before_unpacking(
    tmp_path: Path,
) -> None:
    import zipfile

    path = tmp_path / "bomb.docx"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", b"<w:t>" + b" " * (64 * MIB) + b"</w:t>")
    assert path.stat().st_size < MIB
    err, peak = _peak(lambda: extract(path, max_bytes=4 * MIB))
    assert isinstance(err, DocError) and err.code == "TOO_LARGE", err
    assert "bomb.docx unpacks to 64 MB" in err.message and "4 MB" in err.message
    assert peak < 4 * MIB


def _hostile_bytes(rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    n = rng.choice([0, 1, 7, 300, 5_000, 70_000])
    if kind == 0:  # random binary
        return rng.randbytes(n)
    if kind == 1:  # text with control characters and lone NULs sprinkled in
        pool = "abc déf\t\n\r\x0b\x0c\x1b[31m\u202e\ufeff\x00"
        return "".join(rng.choice(pool) for _ in range(n)).encode("utf-8", "surrogatepass")
    if kind == 2:  # invalid UTF-8 and lone surrogates' bytes
        return bytes(rng.choice([0xC3, 0x28, 0xED, 0xA0, 0x80, 0xFF, 0x61, 0x0A]) for _ in range(n))
    if kind == 3:  # a byte-order mark followed by anything
        return rng.choice([codecs.BOM_UTF16_LE, codecs.BOM_UTF8, codecs.BOM_UTF32_BE]) + rng.randbytes(n)
    if kind == 4:  # markup and CSV punctuation floods
        return rng.choice([b"<", b"<p>", b'"', b",", b"|", b"\n"]) * n
    return b"ok " * (n // 3) + b"\0" * rng.randrange(1, 64)  # text with a NUL tail


def test_seeded_hostile_text_files_never_raise_and_errors_are_sentences(tmp_path: Path) -> None:
    rng = random.Random(19)
    outcomes: dict[str, int] = {}
    for i in range(150):
        path = tmp_path / f"f{i}{rng.choice(['.txt', '.md', '.csv', '.html'])}"
        path.write_bytes(_hostile_bytes(rng))
        result = extract(path, max_bytes=MIB)
        if isinstance(result, DocError):
            assert result.message.endswith(".") and path.name in result.message, result
            outcomes[result.code] = outcomes.get(result.code, 0) + 1
        else:
            assert isinstance(result, ExtractedDoc) and result.text.strip()
            outcomes["read"] = outcomes.get("read", 0) + 1
    assert outcomes.get("read") and outcomes.get("BINARY") and outcomes.get("EMPTY"), outcomes


# -- issue 38: files built to attack the converters, refused before one runs ---------------

def _refused(path: Path, code: str, says: str, max_bytes: int = 20 * MIB) -> DocError:
    err, peak = _peak(lambda: extract(path, max_bytes=max_bytes))
    assert isinstance(err, DocError) and err.code == code, err
    assert says in err.message and err.message.endswith("."), err.message
    assert peak < 8 * MIB, f"{peak / MIB:.0f} MiB to refuse {path.name}"
    return err


def test_a_part_that_lies_about_its_size_is_refused_from_its_actual_bytes(
    tmp_path: Path,
) -> None:
    from tests.fixtures.docs_files import make_lying_docx

    path = make_lying_docx(tmp_path / "lying.docx", unpacked_mb=256)
    assert path.stat().st_size < MIB
    _refused(path, "UNSAFE", "'word/document.xml' unpacks to a size other than the 1,000 "
             "bytes it declares")


def test_bzip2_parts_are_refused_before_zipfile_unpacks_them_whole(tmp_path: Path) -> None:
    from tests.fixtures.docs_files import make_lying_docx

    path = make_lying_docx(tmp_path / "bz.docx", unpacked_mb=16, method="bzip2")
    _refused(path, "UNSAFE", "with a compression Office never uses")


def test_too_many_parts_are_refused_from_the_end_record(tmp_path: Path) -> None:
    from tests.fixtures.docs_files import make_many_entry_docx

    path = make_many_entry_docx(tmp_path / "many.docx", entries=12_000)
    _refused(path, "UNSAFE", "holds 12,001 parts, more than the 10,000")


def test_a_truthful_but_huge_office_file_is_refused_by_its_declared_size(
    tmp_path: Path,
) -> None:
    from tests.fixtures.docs_files import make_huge_docx

    _refused(make_huge_docx(tmp_path / "huge.docx", 64), "TOO_LARGE",
             "huge.docx unpacks to 64 MB, over 10 times the 4 MB", max_bytes=4 * MIB)


def test_more_xml_than_twice_the_limit_is_refused(tmp_path: Path) -> None:
    from tests.fixtures.docs_files import make_docx_of_xml, make_xlsx_of_cells

    err = _refused(make_docx_of_xml(tmp_path / "long.docx", 12), "TOO_LARGE",
                   "MB of XML, over 2 times the 4 MB", max_bytes=4 * MIB)
    assert err.message.startswith("long.docx holds 1")
    _refused(make_xlsx_of_cells(tmp_path / "wide.xlsx", 12), "TOO_LARGE",
             "wide.xlsx holds 12 MB of XML", max_bytes=4 * MIB)


@pytest.mark.parametrize("entity", ["laughs", "external"])
def test_a_dtd_in_an_office_part_is_refused(tmp_path: Path, entity: str) -> None:
    from tests.fixtures.docs_files import make_docx_with_dtd

    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    path = make_docx_with_dtd(tmp_path / "dtd.docx",
                              "laughs" if entity == "laughs" else str(secret))
    err = _refused(path, "UNSAFE", "declares a DTD in its part 'word/document.xml'")
    assert "TOPSECRET" not in err.message


def test_an_encoding_a_dtd_could_hide_in_is_refused(tmp_path: Path) -> None:
    import zipfile

    path = tmp_path / "ebcdic.docx"
    body = b'<?xml version="1.0" encoding="cp037"?>' + "<!DOCTYPE x>".encode("cp037")
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", body)
    _refused(path, "UNSAFE", "in the cp037 text encoding, which Office never uses")


def test_a_pdf_flate_bomb_is_refused_by_counting_not_keeping(tmp_path: Path) -> None:
    from tests.fixtures.docs_files import make_pdf_flate_bomb

    path = make_pdf_flate_bomb(tmp_path / "bomb.pdf", unpacked_mb=256)
    assert path.stat().st_size < MIB
    _refused(path, "TOO_LARGE", "unpacks to more than 40 MB, 10 times the 4 MB",
             max_bytes=4 * MIB)


def test_html_too_deep_or_too_many_elements_is_refused(tmp_path: Path) -> None:
    from tests.fixtures.docs_files import make_deep_html, make_tag_flood_html

    _refused(make_deep_html(tmp_path / "deep.html", 5_000), "UNSAFE",
             "nests its HTML elements more than 1,000 deep")
    _refused(make_tag_flood_html(tmp_path / "flood.html", 2), "TOO_LARGE",
             "more than 200,000 HTML elements")


def test_ordinary_html_with_unclosed_paragraphs_and_scripts_is_read(tmp_path: Path) -> None:
    path = tmp_path / "old.html"
    path.write_text("<html><body>" + "<p>A paragraph never closed" * 1_500
                    + "<script>" + "'<div>' + " * 2_000 + "''</script></body></html>")
    doc = extract(path)
    assert isinstance(doc, ExtractedDoc) and "A paragraph never closed" in doc.text


def test_an_endless_csv_line_is_refused(tmp_path: Path) -> None:
    from tests.fixtures.docs_files import make_endless_csv_line

    _refused(make_endless_csv_line(tmp_path / "endless.csv", 2), "TOO_LARGE",
             "endless.csv has a line over 1 MB long")


def test_text_past_twice_the_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "sparse.csv"
    path.write_text("a" + "," * 60 + "\n" + ("1" + "," * 60 + "\n") * 15_000)  # 930 KB
    err = extract(path, max_bytes=MIB)
    assert isinstance(err, DocError) and err.code == "TOO_LARGE", err
    assert "million characters of text, over 2 times the 1 MB" in err.message


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_a_device_named_txt_is_refused_without_reading(tmp_path: Path,
                                                                 kind: str) -> None:
    import os
    import time

    path = tmp_path / "notes.txt"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    t0 = time.monotonic()
    err = extract(path)
    assert isinstance(err, DocError) and err.code == "UNREADABLE", err
    assert "notes.txt is not a regular file" in err.message
    assert time.monotonic() - t0 < 1

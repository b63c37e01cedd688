"""Image attachments: decoded once, turned upright, scaled, stored on disk; bad files
refused with a sentence; pasted (dragged-in) paths recognised; half-block previews."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from core.vision import StoredImage, load_stored, prepare_image
from tests.fixtures.images import BLUE, GREEN, RED, make_corrupt, make_image
from tui.dropped_paths import dropped_image_paths
from tui.picture_codes import half_block_cells

MB = 1024 * 1024


def close(a, b, tol: int = 40) -> bool:
    return all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


def test_png_is_stored_as_a_file_with_name_size_and_dimensions(tmp_path: Path) -> None:
    src = make_image(tmp_path / "photo.png", 64, 48)
    image = prepare_image(src, max_bytes=MB, folder=tmp_path)
    assert isinstance(image, StoredImage)
    assert (image.width, image.height) == (64, 48)
    assert image.size_bytes == src.stat().st_size
    assert image.label == f"photo.png · {image.size_bytes} B · 64×48"
    with Image.open(image.path) as stored:
        assert stored.size == (64, 48) and stored.format == "PNG"
    assert load_stored(image.path) == image  # the sidecar brings it back as it was
    sidecar = Path(image.path).with_suffix(".json")
    for damaged in ("[1]", "{", '{"path": 5}', json.dumps({**json.loads(sidecar.read_text()),
                                                           "path": 5})):
        sidecar.write_text(damaged, encoding="utf-8")
        assert load_stored(image.path) is None  # shown as gone, never a crash


def test_exif_rotation_is_applied_and_large_images_scaled(tmp_path: Path) -> None:
    # Stored 400x200 with "turn a quarter right": upright it is 200 wide, 400 tall, and
    # the green corner (top-left as stored) ends up top-right.
    src = make_image(tmp_path / "phone.jpg", 400, 200, orientation=6, fmt="JPEG")
    image = prepare_image(src, max_bytes=MB, max_side=100, folder=tmp_path)
    assert (image.width, image.height) == (200, 400)
    assert (image.stored_width, image.stored_height) == (50, 100)
    with Image.open(image.path) as stored:
        px = stored.convert("RGB").load()
        assert close(px[45, 3], GREEN), px[45, 3]
        assert close(px[5, 50], BLUE) and close(px[45, 50], RED)  # red half is now right


def test_webp_reads_and_the_same_picture_is_stored_once(tmp_path: Path) -> None:
    src = make_image(tmp_path / "a.webp", fmt="WEBP")
    first = prepare_image(src, max_bytes=MB, folder=tmp_path)
    first.captions["tiny-vlm"] = "a red and blue flag"
    first.save_sidecar()
    again = prepare_image(tmp_path / "a.webp", max_bytes=MB, folder=tmp_path)
    assert again.path == first.path and again.captions == {"tiny-vlm": "a red and blue flag"}
    assert len(list(tmp_path.glob("*.png"))) == 1


def test_bad_images_are_refused_with_a_sentence(tmp_path: Path) -> None:
    corrupt = prepare_image(make_corrupt(tmp_path / "broken.png"), max_bytes=MB, folder=tmp_path)
    assert corrupt.code == "CORRUPT" and "broken.png could not be read as PNG" in corrupt.message
    big = make_image(tmp_path / "big.png", 300, 300)
    too_big = prepare_image(big, max_bytes=100, folder=tmp_path)
    assert too_big.code == "TOO_LARGE" and "attach_max_mb" in too_big.message
    missing = prepare_image(tmp_path / "nope.jpg", max_bytes=MB, folder=tmp_path)
    assert missing.code == "NOT_FOUND"
    assert list(tmp_path.glob("*.png.tmp")) == [] and len(list(tmp_path.glob("*.json"))) == 0


def test_too_many_pixels_is_refused_before_decoding(tmp_path: Path) -> None:
    # A 12000x10000 one-colour PNG is a few hundred KB on disk and 360 MB decoded.
    src = tmp_path / "bomb.png"
    Image.new("1", (12000, 10000)).save(src)
    refused = prepare_image(src, max_bytes=20 * MB, folder=tmp_path)
    assert refused.code == "TOO_LARGE" and "megapixel" in refused.message


def test_half_block_preview_keeps_layout(tmp_path: Path) -> None:
    src = make_image(tmp_path / "p.png", 64, 48)
    cells = half_block_cells(src, 16, 12)
    assert len(cells[0]) == 16 and len(cells) == 6  # 16x12 pixels, two per cell
    assert close(cells[0][0][0], GREEN) and close(cells[0][15][0], RED)
    assert close(cells[-1][8][1], BLUE)
    tall = half_block_cells(src, 200, 4)
    assert len(tall) == 4 and len(tall[0]) < 200  # fit the height, aspect kept


def test_dropped_paths(tmp_path: Path) -> None:
    a = make_image(tmp_path / "my photo.png")
    b = make_image(tmp_path / "b.jpg", fmt="JPEG")
    assert dropped_image_paths(f"'{a}'") == [str(a)]
    assert dropped_image_paths(str(a).replace(" ", "\\ ") + f" {b}") == [str(a), str(b)]
    assert dropped_image_paths(f"file://{str(a).replace(' ', '%20')}\n") == [str(a)]
    assert dropped_image_paths(f"what is in {b}?") == []
    assert dropped_image_paths(str(tmp_path / "gone.png")) == []
    assert dropped_image_paths("") == []


def test_huge_images_are_scaled_to_the_default_side_and_heic_needs_its_package(
        tmp_path: Path) -> None:
    big = prepare_image(make_image(tmp_path / "wide.png", 3000, 1500), max_bytes=20 * MB,
                        folder=tmp_path)
    assert (big.width, big.height) == (3000, 1500)
    assert (big.stored_width, big.stored_height) == (1024, 512)
    heic = tmp_path / "iphone.heic"
    heic.write_bytes(b"\x00\x00\x00\x18ftypheic" + b"\x00" * 64)
    result = prepare_image(heic, max_bytes=MB, folder=tmp_path)
    try:
        import pillow_heif  # noqa: F401
    except ImportError:  # this machine: HEIC is refused with what to install
        assert result.code == "UNSUPPORTED_TYPE" and "pip install pillow-heif" in result.message
    else:  # with the package a broken HEIC is a corrupt file, not a crash
        assert result.code == "CORRUPT"


def test_a_vision_config_nested_too_deep_is_not_a_vision_model(tmp_path) -> None:
    """A config.json from the Hub nested 100,000 deep: 'not a vision model', no RecursionError."""
    from core.model_files import is_vlm_dir

    (tmp_path / "config.json").write_text('{"vision_config": ' + "[" * 100_000
                                          + "]" * 100_000 + "}")
    assert is_vlm_dir(tmp_path) is False
    (tmp_path / "config.json").write_text('{"vision_config": {"model_type": "siglip"}}')
    assert is_vlm_dir(tmp_path) is True

"""The image card picks the renderer the terminal's graphics call for (LLMDECK_GRAPHICS
forces one in a headless app; unset, a headless app draws half-blocks), keeps the label,
and fills the same box of cells whichever it draws, also after a resize."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.color import ColorSystem
from textual.geometry import Region
from textual.widgets import Static

from tests.fixtures.images import make_image
from tests.snapshots.test_docs_snapshots import command, docs_app, ready, wait_until
from tui.widgets.image_card import ImageCard
from tui.widgets.terminal_picture import KittyPicture, PixelPicture


async def attach(pilot, photo: Path) -> ImageCard:
    main = pilot.app.main
    await command(pilot, f"/attach {photo}")
    await wait_until(pilot, lambda: len(main.query(ImageCard)) == 1)
    card = main.query_one(ImageCard)
    await wait_until(pilot, lambda: str(card.query_one(".image-preview").render()).strip())
    return card


@pytest.mark.parametrize(("graphics", "colours", "kind"), [
    ("kitty", ColorSystem.TRUECOLOR, KittyPicture),
    ("kitty", ColorSystem.EIGHT_BIT, KittyPicture),
    ("kitty", ColorSystem.STANDARD, None),  # placeholders name the picture by colour
    ("sixel", ColorSystem.STANDARD, PixelPicture),
    ("iterm", ColorSystem.STANDARD, PixelPicture),
    (None, ColorSystem.TRUECOLOR, None)])
async def test_the_card_draws_with_the_chosen_protocol(tmp_path: Path, monkeypatch,
                                                       graphics, colours, kind) -> None:
    if graphics:
        monkeypatch.setenv("LLMDECK_GRAPHICS", graphics)
    else:
        monkeypatch.delenv("LLMDECK_GRAPHICS", raising=False)
    photo = make_image(tmp_path / "harbour.png", 96, 64)
    app = docs_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        # A headless console draws 16 colours; a real terminal says what it draws.
        app.console._color_system = colours
        card = await attach(pilot, photo)
        label = str(card.query_one(".image-label", Static).render())
        assert label.startswith("Image: harbour.png") and "96×64" in label
        if kind is None:
            await pilot.pause(0.2)
            assert not card.query(".image-picture")
            preview = str(card.query_one(".image-preview").render())
            assert "▀" in preview
            return
        await wait_until(pilot, lambda: bool(card.query(kind)))
        picture = card.query_one(kind)
        assert len(card.query(".image-preview")) == 1  # it replaced the preview
        # 96x64 in at most 40x12 cells, two pixels a cell: 36 columns by 12 rows.
        assert (picture.size.width, picture.size.height) == (36, 12)
        if kind is KittyPicture:
            rows = str(picture.render()).split("\n")
            assert len(rows) == 12 and all(r.count("\U0010eeee") == 36 for r in rows)
            # The id is the cells' colour: 24-bit in truecolor, a 256-colour index else.
            assert (picture.image_id >= 256) is (colours == ColorSystem.TRUECOLOR)
        else:
            shown = picture.render_lines(Region(0, 0, 36, 12))
            raw = "".join(seg.text for seg in shown[-1])
            intro = "\x1bP0;1;0q" if graphics == "sixel" else "\x1b]1337;File=inline=1;"
            assert intro in raw and "▀" not in "".join(s.text for s in shown[0])
            # Cut by the chat's edge (a crop smaller than the box): the half-block preview.
            cut = picture.render_lines(Region(0, 0, 36, 5))
            assert intro not in "".join(seg.text for line in cut for seg in line)
            assert "▀" in "".join(seg.text for seg in cut[0])
            # Scrolled so the chat's edge cuts the box: not drawn, whatever crop is asked.
            await pilot.resize_terminal(120, 16)
            await pilot.pause(0.2)
            chat = pilot.app.main.chat
            chat.scroll_to(y=chat.scroll_y + picture.region.y - chat.region.y + 4, animate=False)
            await wait_until(pilot, lambda: 0 < chat.scroll_y)
            await pilot.pause(0.1)
            shown = pilot.app.screen.find_widget(picture).visible_region
            assert 0 < shown.height < 12, shown  # partly on screen
            assert picture.whole_box_shown(Region(0, 0, 36, 12)) is None
            assert intro not in "".join(
                seg.text for line in picture.render_lines(Region(0, 0, 36, 12)) for seg in line)
        await pilot.resize_terminal(70, 30)
        await pilot.pause(0.2)
        assert card.query_one(kind).size.width <= 70  # never wider than the chat

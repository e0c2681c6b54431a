"""The headless scene (issue 39): one colour table, one levels function, the scene made from the
display options and the explanations, and its matplotlib figure, without Qt."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch

from dmlviewer.core.display import COLORMAPS, SCALES, SIGNS, DisplayOptions
from dmlviewer.core.explain import explain_pair
from dmlviewer.core.explain.matches import match_shares, match_shares_text, match_totals
from dmlviewer.core.models import build_model, default_config
from dmlviewer.core.scene import RowSource, build_scene, levels, rgb, sign_part
from dmlviewer.core.scene.colormaps import DIVERGING, NAMES, overlay_lut
from dmlviewer.core.scene.draw import figure_bytes, level_text

SVG = "{http://www.w3.org/2000/svg}"


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(default_config(backbone="small_cnn", dim=24, groups=4, image_size=64)).eval()


@pytest.fixture(scope="module")
def pair():
    rng = np.random.default_rng(0)
    q = rng.integers(0, 256, (50, 70, 3), dtype=np.uint8)
    r = rng.integers(0, 256, (90, 40, 3), dtype=np.uint8)
    return (q, r), explain_pair(_model(0), q, r, "cpu"), explain_pair(_model(1), q, r, "cpu")


def test_the_table_holds_every_map_the_app_offers_with_matplotlibs_colours():
    from matplotlib import colormaps

    assert set(COLORMAPS) | {DIVERGING, "viridis (light)"} == set(NAMES)
    for name in ("inferno", "viridis", "turbo", "plasma"):
        expected = np.round(colormaps[name](np.linspace(0, 1, 256))[:, :3] * 255)
        assert np.array_equal(rgb(name), expected), name
    import cv2

    jet = cv2.applyColorMap(np.arange(256, dtype=np.uint8)[:, None], cv2.COLORMAP_JET).reshape(256, 3)[:, ::-1]
    assert np.array_equal(rgb("jet"), jet)
    with pytest.raises(ValueError, match="colormap: 'gray'"):
        rgb("gray")


def test_every_reader_of_a_colour_map_gets_the_tables_colours():
    """The Qt LUT, the Qt colour bar, and the hover renderer's table read
    one table (before: OpenCV's plasma/inferno in the figures, pyqtgraph's on screen, signed
    twilight_shifted in figures and CET-D1 on screen)."""
    from dmlviewer.core.explain.hover import colormap_lut
    from dmlviewer.gui.pair import colormaps as qt

    for name in COLORMAPS + ("viridis (light)",):
        assert np.array_equal(qt.overlay_lut(name)[:, :3], rgb(name))
        assert np.array_equal(colormap_lut(name)[:, :3], rgb(name))
        bar = qt.colorbar_map(name).getLookupTable(0.0, 1.0, 256, alpha=False)
        assert np.abs(bar.astype(int) - rgb(name)).max() <= 1
        assert np.array_equal(qt.overlay_lut(name, signed=True)[:, :3], rgb(DIVERGING))
    lut = overlay_lut("jet")
    assert lut[0, 3] == 0 and lut[128, 3] == 255  # the alpha ramp: opaque from half the range


def test_reading_the_table_or_hovering_imports_no_matplotlib():
    code = ("import sys; import dmlviewer.core.scene.colormaps as c; import dmlviewer.core.explain.hover as h; "
            "import dmlviewer.core.scene, dmlviewer.core.report; h.colormap_lut('plasma'); "
            "c.overlay_lut('jet', True); print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_levels_are_the_grids_cell_values():
    g = np.array([[0.1, -0.4], [0.297, 0.0]], np.float32)
    assert levels(sign_part(g, "positive"), "positive") == (0.0, pytest.approx(0.297))
    assert levels(sign_part(g, "negative"), "negative") == (0.0, pytest.approx(0.4))
    assert levels(g, "signed") == (pytest.approx(-0.4), pytest.approx(0.4))
    assert levels([sign_part(g, "positive"), np.full((3, 3), 0.5)], "positive")[1] == pytest.approx(0.5)
    assert levels(np.zeros((2, 2)), "positive") == (0.0, 1.0)
    assert levels(g, "positive", "pair", pair_value=0.05) == (0.0, 0.05)
    with pytest.raises(ValueError, match="scale: 'row'"):
        levels(g, "positive", "row")


def test_match_shares_are_of_the_positive_total_and_never_pass_100_percent():
    p = np.array([[13.0, -12.49], [0.25, 0.0]])
    matches = [{"score": 13.0}, {"score": 0.25}]
    assert match_totals(p) == (pytest.approx(13.25), pytest.approx(-12.49))
    shares = match_shares(matches, p)
    assert shares == [pytest.approx(13.0 / 13.25), pytest.approx(0.25 / 13.25)] and sum(shares) <= 1
    text = match_shares_text(matches, p, 0.76)
    assert "positive cell-pair total +13.25" in text and "negative -12.49" in text and "98.1%" in text


def _svg_texts(svg: bytes) -> list[str]:
    return [t.text or "" for t in ET.fromstring(svg).iter(f"{SVG}text")]


def _group(svg: bytes, gid: str):
    for g in ET.fromstring(svg).iter(f"{SVG}g"):
        if g.get("id") == gid:
            return g
    return None


def _bar_labels(svg: bytes, gid: str) -> list[str]:
    g = _group(svg, gid)
    assert g is not None, gid
    return [t.text for t in g.iter(f"{SVG}text")]


def _expected_levels(e_list, display, side, row_index, pinned, scene_pane):
    """The levels the data gives, computed here from the explanations directly."""
    method, sign = display.method, display.sign
    if scene_pane.overlay.kind == "overall":
        grids = [sign_part(e.overall_grid(method, side), sign) for e in
                 (e_list if display.shared_scale and len(e_list) > 1 and display.row_b == "model" else
                  [e_list[row_index]])]
        return levels(grids, sign)
    return scene_pane.overlay.levels  # checked against the data below


@pytest.mark.parametrize("seed", range(6))
def test_random_view_states_draw_the_scenes_panes_and_the_datas_levels_at_every_scale(pair, seed):
    """Method, sign, scale mode, colour map, opacity, pinned point, matches, one or two rows:
    the SVG shows the scene's panes, its colour bars end at the grid data's values (never a
    resized map's), and the text is the same at 1x, 2x and 4x."""
    from dmlviewer.core.explain.hover import pair_scale

    rng = np.random.default_rng(seed)
    images, ea, eb = pair
    d = DisplayOptions()
    d.method = str(rng.choice(["decomposition", "decomposition_bias", "gradcam"]))
    d.sign, d.scale = str(rng.choice(SIGNS)), str(rng.choice(SCALES))
    d.colormap, d.opacity = str(rng.choice(COLORMAPS)), float(rng.uniform(0.2, 1.0))
    d.matches, d.match_count = bool(seed % 2), int(rng.integers(1, 6))
    two = seed % 3 != 0
    d.row_b = "difference" if seed == 4 else "model"
    d.shared_scale = seed == 2
    pinned = (int(rng.integers(0, 2)), float(rng.uniform(0, 39)), float(rng.uniform(0, 49))) if seed % 3 else None
    sources = [RowSource("A", ea)] + ([RowSource("B", eb)] if two else [])
    scene = build_scene(d, images, sources, ("Query q.jpg", "Reference r.jpg"), pinned)
    assert [r.name for r in scene.rows] == (["A", "B"] if two else ["A"])
    svgs = {k: figure_bytes(scene, "svg", k) for k in ((1, 2, 4) if seed < 2 else (1, 4))}
    assert len({tuple(_svg_texts(svg)) for svg in svgs.values()}) == 1
    svg = svgs[1]
    explanations = [ea, eb][: len(scene.rows)]
    for k, row in enumerate(scene.rows):
        for j, pane in enumerate(row.panes):
            assert _group(svg, f"pane {row.name} {pane.side}") is not None
            lv = pane.overlay.levels
            if pane.overlay.kind == "overall":
                assert lv == _expected_levels(explanations, d, pane.side, k, pinned, pane)
            elif pane.overlay.kind == "partial":
                side, x, y = pinned
                grid = sign_part(explanations[k].partial_map(("query", "reference")[side], x, y), d.sign)
                if d.scale == "pair":
                    values = [pair_scale(e.point_to_point) for e in explanations]
                    top = max(values) if d.shared_scale and two else pair_scale(explanations[k].point_to_point)
                elif d.shared_scale and two:
                    top = max(levels(sign_part(e.partial_map(("query", "reference")[side], x, y), d.sign),
                                     d.sign)[1] for e in explanations)
                else:
                    top = levels(grid, d.sign)[1]
                assert lv[1] == pytest.approx(top, rel=1e-6)
                assert j != pinned[0]
            labels = _bar_labels(svg, f"colorbar {row.name} {pane.side}")
            assert labels[-1] == pane.overlay.unit
            labels = labels[:-1]
            assert labels[0] == level_text(lv[0]) and labels[-1] == level_text(lv[1])
            assert (pane.point is not None) == (pinned is not None and pinned[0] == j)
            assert (_group(svg, f"pinned {row.name} {pane.side}") is not None) == (pane.point is not None)
        lines = [g for g in ET.fromstring(svg).iter(f"{SVG}g") if (g.get("id") or "").startswith(f"match {row.name} ")]
        assert len(lines) == (len(row.matches) if k == 0 and d.matches else 0)
        assert (k == 0 and d.matches) == bool(row.matches)
    text = " ".join(_svg_texts(svg))
    for row in scene.rows:
        assert row.similarity_line.split(" (")[0].split()[-1] in text


def test_captions_break_only_between_words_in_svg_and_pdf(pair, tmp_path):
    """The old writer cut "011.square_red_ch / ecker" by a guessed glyph width."""
    import io

    from pypdf import PdfReader

    images, ea, _ = pair
    caption = ("Reference 011.square_red_checker/img_0042.png, the second image of a long caption "
               "that must wrap over several lines of the pane")
    scene = build_scene(DisplayOptions(), images, [RowSource("A", ea, label="runs/checkpoint.pt")],
                        ("Query 001.round_blue_dots/img_0001.png", caption))
    words = set(" ".join(p.caption for r in scene.rows for p in r.panes).split())
    svg_lines = [t for t in _svg_texts(figure_bytes(scene, "svg")) if t.strip()]
    caption_words = [w for line in svg_lines for w in line.split() if "·" not in w]
    assert "011.square_red_checker/img_0042.png," in caption_words
    pdf = PdfReader(io.BytesIO(figure_bytes(scene, "pdf"))).pages[0].extract_text()
    for line in pdf.splitlines():
        for word in line.split():
            if word.startswith(("011.", "001.", "(runs")):
                assert word in words or word.rstrip(")") in words or word in {w + ")" for w in words}, word
    assert "011.square_red_checker/img_0042.png," in pdf.split()


def test_orientation_guides_and_the_pin_are_vectors_on_their_panes(pair):
    from dmlviewer.core.scene import Guide
    from dmlviewer.core.scene.draw import draw

    images, ea, eb = pair
    guides = {"reference": [Guide("north: 0°", [20.0, 20.0], [45.0, 0.0], "#e0e0e0"),
                            Guide("true heading: 90°", [20.0, 40.0], [45.0, 45.0], "#ffffff", True)]}
    scene = build_scene(DisplayOptions(), images, [RowSource("A", ea), RowSource("B", eb)], pinned=(0, 5.0, 6.0),
                        guides=guides)
    fig = draw(scene)
    panes = {ax.get_gid(): ax for ax in fig.axes}
    for name in ("A", "B"):  # the pin on every row's query (issue 42 item 5: B's row had none)
        reference = panes[f"pane {name} reference"]
        assert [line.get_label() for line in reference.lines] == ["north: 0°", "true heading: 90°"]
        assert reference.lines[1].get_linestyle() == "--"
        assert [line.get_gid() for line in panes[f"pane {name} query"].lines] == [f"pinned {name} query"]


def test_the_pin_is_the_screens_star_above_the_match_markers(pair):
    """The figure's pinned point is the pane's star (its colour, edged black) drawn above the
    numbered match markers, as on screen (it was white and under a match's marker)."""
    from dmlviewer.core.scene.draw import draw
    from dmlviewer.core.scene.scene import PIN_COLOUR

    images, ea, _ = pair
    display = DisplayOptions()
    display.matches = True
    scene = build_scene(display, images, [RowSource("A", ea)], pinned=(0, 5.0, 6.0))
    assert scene.rows[0].matches
    query = next(ax for ax in draw(scene).axes if ax.get_gid() == "pane A query")
    pin = next(line for line in query.lines if line.get_gid() == "pinned A query")
    assert pin.get_markerfacecolor() == PIN_COLOUR and pin.get_markeredgecolor() == "black"
    markers = [line for line in query.lines if line is not pin]
    assert markers and all(pin.get_zorder() > m.get_zorder() for m in markers)


def test_a_row_with_its_own_reference_is_drawn_on_it_with_its_partial_map(pair):
    """Issue 41: model B's row on its own reference (B's top-1): its reference pane shows that
    photograph and caption, its maps (overall and the pinned query point's partial map) are of
    B's own pair, "Difference" is not drawn across two pairs, and the figure draws it."""
    from dmlviewer.core.scene.draw import draw

    (q, r), ea, _ = pair
    r_b = np.random.default_rng(1).integers(0, 256, (60, 80, 3), dtype=np.uint8)
    eb = explain_pair(_model(1), q, r_b, "cpu")
    sources = [RowSource("A", ea), RowSource("B", eb, reference=r_b, reference_caption="B's top-1")]
    display = DisplayOptions()
    display.row_b = "difference"
    scene = build_scene(display, (q, r), sources, ("Query", "A's top-1"), pinned=(0, 10.0, 12.0))
    a, b = scene.rows
    assert a.panes[1].image is r and b.panes[1].image is r_b and b.panes[0].image is q
    assert "A's top-1" in a.panes[1].caption and "B's top-1" in b.panes[1].caption
    assert b.panes[1].overlay.kind == "partial" and b.panes[0].overlay.kind == "overall"
    np.testing.assert_allclose(b.panes[1].overlay.data, sign_part(eb.partial_map("query", 10.0, 12.0), "positive"),
                               atol=1e-6)
    np.testing.assert_allclose(b.panes[0].overlay.data, sign_part(eb.overall_grid("decomposition", "query"),
                                                                  "positive"), atol=1e-6)
    fig = draw(scene)
    assert {ax.get_gid() for ax in fig.axes} >= {"pane B reference", "pane A reference"}

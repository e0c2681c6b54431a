"""The report's mathematics and figures without a model: failures as evaluate counts them, the
background share of Eq. 3's point-to-point part, and figures drawn at the export resolution."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from dmlviewer.core.evaluate.metrics import retrieval_metrics
from dmlviewer.core.figures import Bars, Figure, Plot, figure_svg
from dmlviewer.core.figures.html import figure_html
from dmlviewer.core.figures.pair import box_share, cell_centres, strongest_points
from dmlviewer.core.figures.svg import dimensions
from dmlviewer.core.report import retrieval_failures


@pytest.mark.parametrize("protocol", ["all", "query_gallery"])
def test_failures_are_the_wrong_top1_queries_that_recall_at_1_counts(protocol):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 8, 300)
    centres = rng.normal(size=(8, 16))
    embeddings = centres[labels] + rng.normal(scale=1.2, size=(300, 16))
    labels[-1] = 99  # a query with no same-class image: not counted by Recall@1, not a failure
    queries = gallery = None
    if protocol == "query_gallery":
        queries, gallery = np.arange(300) % 3 == 0, np.arange(300) % 3 != 0
    metrics = retrieval_metrics(embeddings, labels, (1,), queries=queries, gallery=gallery)
    failures = retrieval_failures(embeddings, labels, queries, gallery)
    assert len(failures) == round((1 - metrics["recall@1"]) * metrics["num_queries"]) > 0
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    for f in failures:
        assert labels[f.wrong] != labels[f.query] and labels[f.same] == labels[f.query] != 99
        assert f.same != f.query and f.wrong != f.query
        assert np.isclose(f.similarity_wrong, unit[f.query] @ unit[f.wrong], atol=1e-5)
        same = [j for j in range(300) if labels[j] == labels[f.query] and j != f.query
                and (gallery is None or gallery[j])]
        assert np.isclose(f.similarity_same, max(unit[f.query] @ unit[j] for j in same), atol=1e-5)
        assert f.margin >= 0  # the wrong top-1 beat every same-class image
    margins = [f.margin for f in failures]
    assert margins == sorted(margins, reverse=True)


def _pair(point_to_point, grid_q=(2, 2), grid_r=(2, 2), shape=(20, 20)):
    return SimpleNamespace(point_to_point=np.asarray(point_to_point, np.float32), grid_query=grid_q,
                           grid_reference=grid_r, image_shape_query=shape, image_shape_reference=shape,
                           similarity=float(np.sum(point_to_point)))


def test_box_share_is_the_share_of_positive_point_to_point_terms_between_both_boxes():
    # 2 x 2 grids over 20 px images: cell centres at 4.5 and 14.5 px; the boxes hold the top left cell
    p = np.zeros((4, 4))
    p[0, 0], p[0, 1], p[3, 3], p[1, 0] = 0.3, 0.1, 0.1, -0.2
    expl = _pair(p)
    box = (0, 0, 10, 10)
    assert box_share(expl, box, box) == pytest.approx(0.3 / 0.5)
    assert box_share(expl, (0, 0, 20, 20), (0, 0, 20, 20)) == pytest.approx(1.0)
    assert box_share(expl, (np.nan,) * 4, box) is None
    assert box_share(_pair(-np.ones((4, 4))), box, box) is None
    assert np.allclose(cell_centres((2, 2), (20, 20)), [[4.5, 4.5], [14.5, 4.5], [4.5, 14.5], [14.5, 14.5]])


def test_strongest_points_rank_the_query_cells_by_their_share_of_the_similarity():
    p = np.array([[0.1, 0.0, 0.0, 0.0], [0.2, 0.2, 0.0, 0.0], [0.0, 0.0, 0.0, 0.05], [0.0, 0.0, 0.0, 0.0]])
    points = strongest_points(_pair(p), 2)
    assert [k for k, *_ in points] == [1, 0]
    assert points[0][1:3] == (14.5, 4.5) and points[0][3] == pytest.approx(0.4 / 0.55)


def _figure(scale: float) -> Figure:
    plot = Plot("curves & <things>", [0.0, 1.0, 2.0], {"decomposition": [1.0, 0.5, float("nan")]})
    return Figure("Query <a> & reference", [[plot]], ["Similarity (cosine) +0.5 = point-to-point +0.4"], scale)


def test_the_svg_keeps_text_as_text_and_is_twice_as_large_at_2x():
    one, two = figure_svg(_figure(1)), figure_svg(_figure(2))
    for svg in (one, two):
        texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
        assert "curves &amp; &lt;things&gt;" in texts and "Query &lt;a&gt; &amp; reference" in texts
        assert "Similarity (cosine) +0.5 = point-to-point +0.4" in texts
        assert "http" not in svg.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
            'xmlns:xlink="http://www.w3.org/1999/xlink"', "")  # nothing to fetch
    (w1, h1), (w2, h2) = dimensions(one), dimensions(two)
    assert abs(w2 - 2 * w1) <= 2 and abs(h2 - 2 * h1) <= 2


def test_the_html_fragment_inlines_the_plot_and_names_no_url():
    fragment = figure_html(_figure(1), "f1")
    assert "http" not in fragment and "<script" not in fragment and "<img" not in fragment
    assert "<svg " in fragment and "curves &amp; &lt;things&gt;" in fragment


def test_a_bar_chart_is_one_rect_per_bar_with_heights_proportional_to_the_values():
    bars = Bars("Orientation error", ["0-5", "5-10", "10-20", "20-45"], [8.0, 4.0, 2.0, 0.0],
                "error (degrees)", "pairs")
    for scale in (1, 2):
        svg = figure_svg(Figure("", [[bars]], [], scale))
        texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
        assert {"Orientation error", "error (degrees)", "pairs", "0-5", "20-45"} <= set(texts)
        # the bars: filled rects (the frame and the background are unfilled or full-size)
        heights = [float(h) for h in re.findall(r'<rect x="[\d.]+" y="[\d.]+" width="[\d.]+" height="([\d.]+)" '
                                                r'fill="#', svg)]
        assert len(heights) == 4
        assert heights[0] > 0 and np.allclose(np.array(heights) / heights[0], [1.0, 0.5, 0.25, 0.0], atol=0.01)
    # negative values go down from 0
    svg = figure_svg(Figure("", [[Bars("signed", ["a", "b"], [1.0, -1.0])]]))
    (ya, ha), (yb, hb) = [tuple(map(float, m)) for m in re.findall(
        r'<rect x="[\d.]+" y="([\d.]+)" width="[\d.]+" height="([\d.]+)" fill="#', svg)]
    assert ha == pytest.approx(hb, abs=0.02) and yb == pytest.approx(ya + ha, abs=0.02)


def test_a_scatter_series_is_drawn_as_points_without_a_line():
    xs, ys = list(range(40)), [float(v % 7) for v in range(40)]
    plot = Plot("embedding", [], {"points": (xs, ys), "curve": ([0.0, 39.0], [0.0, 6.0])}, dots=("points",))
    svg = figure_svg(Figure("", [[plot]]))
    lines = re.findall(r'<polyline points="([^"]+)"', svg)
    assert len(lines) == 1 and len(lines[0].split()) == 2  # the curve's line only
    # 40 points and their legend mark, plus the curve's 2 markers
    assert len(re.findall(r"<circle ", svg)) == 40 + 1 + 2


def test_the_svg_writer_breaks_captions_between_words_only():
    """The report's plots (still laid out by core/figures/svg.py) cut "011.square_red_ch / ecker"."""
    from dmlviewer.core.figures.svg import wrap

    text = "Reference 011.square_red_checker/img_0042.png from runs/a4/checkpoint.pt"
    lines = wrap(text, 60, 12)
    assert len(lines) > 1 and " ".join(lines).split() == text.split()

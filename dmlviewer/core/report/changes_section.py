"""The report's "What changed" section for two models (issue 41): the change table of
:func:`~dmlviewer.core.evaluate.changes.change_table` over the split's embeddings the report
already holds (nothing is embedded again), the classes that gained and lost most Recall@1,
and two galleries, the queries model B broke and those it fixed, the largest change of
margin first.

A gallery entry shows the query with A's top-1 under model A's maps and the query with B's
top-1 under model B's maps (each model's maps on its own pair, the scene rows of the failure
gallery, :func:`~dmlviewer.core.report.gallery.pair_rows`), both
similarities split into point-to-point and bias terms (seed 000 Eq. 3), both margins and,
where the dataset has boxes, the share of each pair's positive point-to-point similarity that
lies between the two objects' boxes (:func:`~dmlviewer.core.figures.pair.box_share`).
"""

from __future__ import annotations

import logging
from typing import Iterator, Sequence

import numpy as np

from dmlviewer.core.figures import html
from dmlviewer.core.figures.pair import box_share
from dmlviewer.core.progress import CancelToken, EtaClock, Progress
from dmlviewer.core.scene import RowSource, similarity_split

from .gallery import PairEntry, entry_html, pair_rows

log = logging.getLogger(__name__)

DEFAULT_CHANGES = 5
#: classes listed among the largest gains and among the largest losses
CLASSES_SHOWN = 5


def common_rows(indices_a: np.ndarray, indices_b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dataset indices both models embedded, their rows in A's, their rows in B's)``."""
    common = np.intersect1d(indices_a, indices_b)
    rows = []
    for indices in (indices_a, indices_b):
        row_of = {int(i): k for k, i in enumerate(indices)}
        rows.append(np.array([row_of[int(i)] for i in common], dtype=np.int64))
    return common, rows[0], rows[1]


def _counts_table(changes: dict, names: Sequence[str]) -> str:
    a, b = names
    return html.table_html(
        ["", f"{b} right", f"{b} wrong", "total"],
        [[f"{a} right", changes["both_right"], changes["a_only"], changes["both_right"] + changes["a_only"]],
         [f"{a} wrong", changes["b_only"], changes["both_wrong"], changes["b_only"] + changes["both_wrong"]],
         ["total", changes["both_right"] + changes["b_only"], changes["a_only"] + changes["both_wrong"],
          changes["num_queries"]]])


def _classes_table(changes: dict, names: Sequence[str]) -> str:
    gained = [c for c in changes["classes"] if c["change"] > 0][:CLASSES_SHOWN]
    lost = [c for c in changes["classes"][::-1] if c["change"] < 0][:CLASSES_SHOWN]
    if not gained and not lost:
        return '<p class="muted">No class changed its Recall@1.</p>'
    rows = [[c["name"], c["num_queries"], c["recall@1"][0], c["recall@1"][1], f"{c['change']:+.3f}"]
            for c in gained + lost]
    return html.table_html(["class", "queries", f"Recall@1 {names[0]}", f"Recall@1 {names[1]}", "change"], rows)


def _caption(dataset, index: int) -> str:
    return f"{dataset.paths[index]} ({dataset.class_names[int(dataset.labels[index])]})"


def change_figure(entry: dict, kind: str, rank: int, models: Sequence, dataset, device, images: dict) -> PairEntry:
    """One gallery entry (module docstring); ``entry`` is one of the change table's ``broken``
    or ``fixed`` queries (dataset indices), ``models`` the report's two."""
    from dmlviewer.core.explain.pair import explain_pair

    q = entry["index"]
    rows, notes = [], []
    for m, top, margin in zip(models, entry["top1"], entry["margin"]):
        r = top["index"]
        expl = explain_pair(m.model, images[q], images[r], device)
        verdict = "right" if top["label"] == entry["label"] else "wrong"
        rows += pair_rows((images[q], images[r]), [RowSource(m.name, expl)],
                          (f"{m.name}: query", f"{m.name}: top-1 ({verdict})"), f"Model {m.name}")
        note = (f"Model {m.name}: top-1 {_caption(dataset, r)}, {verdict}; margin {margin:+.3f} (most similar "
                f"image of another class minus the most similar of the query's class); {similarity_split(expl)}")
        share = box_share(expl, dataset.boxes[q], dataset.boxes[r])
        if share is not None:
            note += f" Boxes: {share:.1%} of the positive point-to-point similarity lies between the objects' boxes."
        notes.append(note)
    title = (f"{kind} #{rank} · query {_caption(dataset, q)} · margin {entry['margin'][0]:+.3f} → "
             f"{entry['margin'][1]:+.3f} (change {entry['margin_change']:+.3f})")
    return PairEntry(title, rows, notes)


def changes_section(models: Sequence, embedded: dict, dataset, split: str, count: int, device, figures: list,
                    images: dict, load, cancel: CancelToken | None = None) -> Iterator[Progress]:
    """Generator: returns ``(HTML parts, summary)``, the summary the change table's counts and
    overlap; adds its figures to ``figures`` as ``(name, PairEntry)``. ``embedded[name]`` holds
    each model's ``embeddings`` and ``rows`` (dataset indices); ``load(indices)`` loads images
    into ``images`` (False when one cannot be read: that entry is left out)."""
    from dmlviewer.core.evaluate.changes import change_table
    from dmlviewer.core.evaluate.evaluation import query_gallery

    a, b = models
    ea, eb = embedded[a.name], embedded[b.name]
    common, rows_a, rows_b = common_rows(ea.rows, eb.rows)
    queries, gallery = query_gallery(dataset, common)
    changes = None
    for event in change_table(ea.embeddings[rows_a], eb.embeddings[rows_b], dataset.labels[common],
                              [dataset.paths[i] for i in common], common, queries, gallery, dataset.class_names,
                              device, cancel=cancel):
        if event.kind == "done":
            changes = event.data["result"]
        else:
            yield event
    names = (a.name, b.name)
    overlap = ", ".join(f"top-{k} {v:.3f}" for k, v in changes["overlap"].items())
    parts = ["<h2>What changed</h2>",
             f'<p class="muted">Each of the {changes["num_queries"]} queries of the {split} split (the queries '
             f"Recall@1 counts) by whether its top-1 is of its class under model {a.name} and under model {b.name}. "
             f"Neighbour overlap (mean share of common images in both models' top-k): {overlap}.</p>",
             _counts_table(changes, names),
             "<h3>Classes that gained and lost most Recall@1</h3>", _classes_table(changes, names)]
    shown = {"broken": changes["broken"][:count], "fixed": changes["fixed"][:count]}
    total = sum(len(v) for v in shown.values())
    clock = EtaClock(max(1, total))
    done = 0
    for kind, title, what in (("broken", "Broken", f"right under {a.name}, wrong under {b.name}"),
                              ("fixed", "Fixed", f"wrong under {a.name}, right under {b.name}")):
        parts.append(f"<h3>{title}: {what}</h3>")
        parts.append(f'<p class="muted">{len(changes[kind])} queries; shown: {len(shown[kind])}, the largest change '
                     "of the margin first. Each model's maps on its own pair: the query and that model's top-1 "
                     "(positive part of Decomposition, each on its own colour bar).</p>")
        if not shown[kind]:
            parts.append('<p class="muted">None.</p>')
        for rank, entry in enumerate(shown[kind], start=1):
            if cancel is not None:
                cancel.raise_if_cancelled()
            if load([entry["index"]] + [t["index"] for t in entry["top1"]]):
                figure = change_figure(entry, title, rank, models, dataset, device, images)
                name = f"{kind}-{rank:02d}"
                figures.append((name, figure))
                parts.append(entry_html(figure, name))
            done += 1
            yield Progress("step", done, total, "explaining what changed", eta_s=clock.eta(done))
    summary = {k: changes[k] for k in ("num_queries", "both_right", "a_only", "b_only", "both_wrong", "overlap")}
    return parts, summary

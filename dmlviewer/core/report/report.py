"""The report (issue 33): one self-contained HTML file on why a model retrieves wrong images.

:func:`build_report` is a progress generator (:mod:`dmlviewer.core.progress`); its result is the
report's summary. Steps:

1. **Embeddings of the split** per model: from the feature file when one matches (the same
   ``checkpoint_sha256`` and every image of the split; nothing is re-extracted), else extracted
   once, into that file when a path was given (written as ``evaluate`` writes it, metrics as its
   attributes) or in memory.
2. **Metrics** as ``evaluate`` computes them (:func:`~dmlviewer.core.evaluate.metrics.compute_metrics`,
   the dataset's query/gallery protocol).
3. **The failure gallery** (:mod:`.failures`): the ``failures`` most confident wrong top-1s,
   each explained against its wrong top-1 and its best same-class image (two
   :func:`~dmlviewer.core.explain.pair.explain_pair` calls: only the pairs shown are explained):
   both overall maps with the top matches and the partial map of the query's strongest point,
   drawn as scenes (:mod:`.gallery`: the pair view's scene function, drawn by matplotlib), the
   split of the similarity into point-to-point and bias terms (seed 000 Eq. 3) and, where the
   dataset has boxes, the share of the point-to-point similarity between the two objects' boxes
   (the rest is the background's). ``pairs``: explain these ``(query, reference)`` dataset
   indices instead.
4. **Two models**: what changed from A to B (:mod:`.changes_section`: the change table over
   the embeddings of step 1, the classes that gained and lost most, the ``changes`` most
   changed broken and fixed queries, each drawn for both models), the diagnosis of
   :func:`~dmlviewer.core.explain.compare.compare_models` (its table and its most disagreeing
   pairs, drawn for both models) and the sanity-check curves of
   :func:`~dmlviewer.core.explain.randomization.randomization_check` for each model.

The HTML (:mod:`dmlviewer.core.figures.html`) is written to a temporary file and renamed, so a
cancelled or failed run leaves no half file; ``figures_dir`` also gets every figure as SVG.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

from dmlviewer.core.explain.methods import label as method_label
from dmlviewer.core.figures import html
from dmlviewer.core.figures.figure import Figure, Plot
from dmlviewer.core.figures.pair import box_share
from dmlviewer.core.figures.svg import figure_svg
from dmlviewer.core.progress import CancelToken, EtaClock, Progress
from dmlviewer.core.scene import RowSource, similarity_split

from .changes_section import DEFAULT_CHANGES, changes_section
from .failures import Failure, retrieval_failures
from .gallery import PairEntry, entry_html, entry_svg, pair_rows

log = logging.getLogger(__name__)

DEFAULT_FAILURES = 20
#: same-class pairs of the two-model diagnosis, and how many of the most disagreeing are drawn
COMPARE_PAIRS = 20
DISAGREEING_SHOWN = 3
#: the sanity check: pairs, randomized depths and methods (seed 000's sanity checks)
SANITY_PAIRS = 3
SANITY_DEPTHS = 5
SANITY_METHODS = ("decomposition", "decomposition_bias", "gradcam")
METRIC_KEYS = ("map@r", "r_precision", "num_queries")


@dataclass
class ReportModel:
    """A model of the report: its name in the report, where it came from, and the model."""

    name: str
    source: str
    model: torch.nn.Module
    sha256: str = ""
    features: str | Path | None = None  # its feature file (used when it matches, else written)


@dataclass
class _Embedded:
    embeddings: np.ndarray
    rows: np.ndarray  # dataset indices of the embedding rows
    metrics: dict
    from_file: bool
    extra: dict = field(default_factory=dict)


def read_pairs(path: str | Path, dataset) -> list[tuple[int, int]]:
    """``(query, reference)`` dataset indices from a text file: one pair a line, the two image
    paths (relative to the dataset root, as ``compare --json`` prints them) separated by a comma,
    a tab or spaces; empty lines and lines starting with ``#`` are skipped. ``ValueError`` names
    the first line that does not name two images of the dataset."""
    from dmlviewer.core.files import read_regular

    index = {p: i for i, p in enumerate(dataset.paths)}
    text = read_regular(path, 16 << 20).decode("utf-8", "replace")
    pairs = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in (line.split(",") if "," in line else line.split("\t") if "\t" in line
                                     else line.split())]
        parts = [p for p in parts if p]
        if len(parts) != 2 or any(p not in index for p in parts):
            # the line itself is not echoed: the file may be any file, a secret one included
            raise ValueError(f"{path}: line {number} does not name two images of the dataset "
                             "(one pair a line: query path, reference path)")
        pairs.append((index[parts[0]], index[parts[1]]))
    if not pairs:
        raise ValueError(f"{path}: no pairs (one pair a line: query path, reference path)")
    return pairs


def _embed(entry: ReportModel, dataset, split: str, device, batch_size: int, num_workers, ks,
           cancel) -> Iterator[Progress]:
    """Embeddings of ``split`` for one model (module docstring, step 1:
    :func:`~dmlviewer.core.evaluate.embed_split.model_split`, a file that does not fit logged
    and the model run) and its metrics."""
    from dmlviewer.core.evaluate.embed_split import model_split
    from dmlviewer.core.evaluate.evaluation import query_gallery
    from dmlviewer.core.evaluate.metrics import compute_metrics

    part = yield from model_split(entry.model, dataset, split, device,
                                  Path(entry.features) if entry.features else None, entry.sha256, entry.name,
                                  num_workers, cancel, batch_size, strict=False, write=True, ks=ks)
    indices = part["indices"]
    labels = dataset.labels[indices]
    queries, gallery = query_gallery(dataset, indices)
    # the retrieval metrics of evaluate (the report shows no clustering figure: k-means is skipped)
    metrics = compute_metrics(part["embeddings"], labels, ks, device, clustering=False, queries=queries,
                              gallery=gallery)
    return _Embedded(part["embeddings"], indices, metrics, part["from_file"],
                     {"queries": queries, "gallery": gallery, "labels": labels})


def _caption(dataset, index: int) -> str:
    return f"{dataset.paths[index]} ({dataset.class_names[int(dataset.labels[index])]})"


def _box_note(dataset, expl, query: int, reference: int) -> str | None:
    share = box_share(expl, dataset.boxes[query], dataset.boxes[reference])
    if share is None:
        return None
    return (f"Boxes: {share:.1%} of the wrong top-1's positive point-to-point contributions lie between cells "
            f"inside both objects' boxes; the background share (a cell outside its box) is {1 - share:.1%}.")


def failure_figure(model: torch.nn.Module, dataset, failure: Failure, rank: int, name: str, device,
                   images: dict) -> PairEntry:
    """One gallery entry (module docstring, step 3); ``failure`` holds dataset indices."""
    from dmlviewer.core.explain.pair import explain_pair

    q, w, s = failure.query, failure.wrong, failure.same
    wrong = explain_pair(model, images[q], images[w], device)
    same = explain_pair(model, images[q], images[s], device)
    title = (f"#{rank} · model {name} · query {_caption(dataset, q)}: wrong top-1 {_caption(dataset, w)} "
             f"(similarity {failure.similarity_wrong:.3f}) over the best same-class image {_caption(dataset, s)} "
             f"({failure.similarity_same:.3f}); margin {failure.margin:.3f}")
    notes = [f"Wrong top-1: {similarity_split(wrong)}", f"Best same class: {similarity_split(same)}"]
    box = _box_note(dataset, wrong, q, w)
    if box:
        notes.append(box)
    rows = (pair_rows((images[q], images[w]), [RowSource(name, wrong)], ("Query", "Wrong top-1"), "Wrong top-1")
            + pair_rows((images[q], images[s]), [RowSource(name, same)], ("Query", "Best same class"),
                        "Best same class"))
    return PairEntry(title, rows, notes)


def pair_figure(model: torch.nn.Module, dataset, query: int, reference: int, rank: int, name: str, device,
                images: dict) -> PairEntry:
    """A gallery entry for a pair given with ``--pairs``."""
    from dmlviewer.core.explain.pair import explain_pair

    expl = explain_pair(model, images[query], images[reference], device)
    notes = [similarity_split(expl)]
    box = _box_note(dataset, expl, query, reference)
    if box:
        notes.append(box.replace("the wrong top-1's", "the pair's"))
    title = f"#{rank} · model {name} · query {_caption(dataset, query)}, reference {_caption(dataset, reference)}"
    return PairEntry(title, pair_rows((images[query], images[reference]), [RowSource(name, expl)],
                                      ("Query", "Reference")), notes)


def _load(dataset, indices, images: dict, skipped: dict) -> bool:
    from dmlviewer.core.data.images import load_or_skip

    for i in indices:
        if i not in images:
            image = load_or_skip(dataset, int(i), skipped)
            if image is None:
                return False
            images[i] = image
    return True


def sanity_plot(check: dict, name: str) -> Plot:
    """The randomization check's curves: each method's mean Spearman correlation with the
    trained model's maps, by randomized depth (a method that passes falls towards 0)."""
    depths = check["depths"]
    series = {method_label(m): [d["methods"][m]["overall_map_spearman"]["mean"] for d in depths]
              for m in check["methods"]}
    return Plot(f"Sanity check, model {name}", [float(d["depth"]) for d in depths], series,
                x_label="layers re-initialized from the top (depth)",
                y_label="Spearman with the trained maps", y_range=(-0.2, 1.0))


def _metrics_table(models: Sequence[ReportModel], embedded: dict, ks: Sequence[int]) -> str:
    keys = [f"recall@{k}" for k in ks] + list(METRIC_KEYS)
    header = ["model", "source", "features"] + [k.replace("recall@", "Recall@").replace("map@r", "MAP@R")
                                                 .replace("r_precision", "R-precision")
                                                 .replace("num_queries", "queries") for k in keys]
    rows = []
    for m in models:
        e = embedded[m.name]
        rows.append([m.name, m.source, "feature file" if e.from_file else "extracted"]
                    + [e.metrics.get(k, float("nan")) for k in keys])
    return html.table_html(header, rows)


def _diagnosis_table(result: dict) -> str:
    header = ["model", "Recall@1", "MAP@R", "localization (best, Decomposition)", "localization (best, +Bias)"]
    rows = []
    for m in result["models"]:
        loc = m.get("localization") or {}
        rows.append([m["name"], m["recall@1"], m["map@r"],
                     *(loc[k]["best_accuracy"] if k in loc else "no boxes"
                       for k in ("decomposition", "decomposition_bias"))])
    a = result["agreement"]
    agreement = html.table_html(
        ["agreement of the maps over the pairs", "mean"],
        [["Spearman of the overall maps", a["overall_map_spearman"]["mean"]],
         ["IoU of the hot regions", a["iou"]["mean"]],
         ["peak distance (share of the diagonal)", a["peak_distance"]["mean"]],
         ["Spearman of the point-to-point maps", a["point_to_point_spearman"]["mean"]]])
    return html.table_html(header, rows) + agreement


def build_report(models: Sequence[ReportModel], dataset, out: str | Path, split: str = "test",
                 failures: int = DEFAULT_FAILURES, pairs: Sequence[tuple[int, int]] | None = None,
                 figures_dir: str | Path | None = None, device: str | torch.device = "cpu", batch_size: int = 64,
                 num_workers: int | None = 0, ks: Sequence[int] = (1, 2, 4, 8), dataset_label: str = "",
                 changes: int = DEFAULT_CHANGES, cancel: CancelToken | None = None) -> Iterator[Progress]:
    """Write the report of one or two ``models`` on ``split`` of ``dataset`` to ``out`` (module
    docstring). Result: ``{"path", "figures", "models": {name: {"metrics", "failures",
    "num_failures", "from_file"}}}`` and, with two models, ``changes`` (the change table's
    counts and overlap); ``failures`` is the number shown, ``num_failures`` every wrong top-1 of
    the split; ``changes``: broken and fixed queries shown, each."""
    from dmlviewer.core.files import write_text_atomic

    if not 1 <= len(models) <= 2:
        raise ValueError(f"a report is of one or two models, got {len(models)}")
    if len(dataset.indices(split)) < 2:
        raise ValueError(f"the dataset has fewer than two {split!r} images")
    if failures < 0:
        raise ValueError(f"the number of failures must not be negative, got {failures}")
    if changes < 0:
        raise ValueError(f"the number of changed queries must not be negative, got {changes}")
    ks = sorted({1, *ks})
    figures: list[tuple[str, Figure | PairEntry]] = []
    embedded: dict[str, _Embedded] = {}
    found: dict[str, list[Failure]] = {}
    for m in models:
        m.model.eval()
        embedded[m.name] = e = yield from _embed(m, dataset, split, device, batch_size, num_workers, ks, cancel)
        wrong = retrieval_failures(e.embeddings, e.extra["labels"], e.extra["queries"], e.extra["gallery"], device)
        found[m.name] = [Failure(int(e.rows[f.query]), int(e.rows[f.wrong]), int(e.rows[f.same]),
                                 f.similarity_wrong, f.similarity_same) for f in wrong]  # dataset indices
    if pairs is None and not any(found.values()):
        raise ValueError(f"no failures: every query of the {split} split has a nearest neighbour of its class; "
                         "nothing to show (explain chosen pairs instead)")

    images: dict[int, np.ndarray] = {}
    skipped: dict = {}
    gallery_html: list[str] = []
    total = sum(min(failures, len(found[m.name])) for m in models) if pairs is None else len(pairs) * len(models)
    clock = EtaClock(max(total, 1))
    done = 0
    for m in models:
        heading = (f"Retrieval failures · model {m.name}" if pairs is None else f"Pairs · model {m.name}")
        gallery_html.append(f"<h2>{heading}</h2>")
        if pairs is None:
            shown = found[m.name][:failures]
            num = embedded[m.name].metrics["num_queries"]
            gallery_html.append(
                f'<p class="muted">{len(found[m.name])} of the {num} queries of the {split} split have a nearest '
                f"neighbour of another class (1 − Recall@1 = {1 - embedded[m.name].metrics['recall@1']:.4f}); "
                f"shown: the {len(shown)} most confident, ranked by the margin of the wrong top-1's similarity "
                "over the best same-class image's. Maps: positive part of Decomposition (seed 000 Eq. 3), each on "
                "its own colour bar; matches: the strongest cell pairs of the point-to-point tensor; then the "
                "query's strongest point pinned, its partial map on the other image.</p>")
            if not shown:
                gallery_html.append('<p class="muted">No failure to show.</p>')
            jobs = [(f.query, f) for f in shown]
        else:
            jobs = [(q, (q, r)) for q, r in pairs]
        for rank, (_, item) in enumerate(jobs, start=1):
            if cancel is not None:
                cancel.raise_if_cancelled()
            wanted = (item.query, item.wrong, item.same) if isinstance(item, Failure) else item
            if _load(dataset, wanted, images, skipped):
                if isinstance(item, Failure):
                    figure = failure_figure(m.model, dataset, item, rank, m.name, device, images)
                else:
                    figure = pair_figure(m.model, dataset, item[0], item[1], rank, m.name, device, images)
                name = f"{'failure' if pairs is None else 'pair'}-{m.name}-{rank:02d}"
                figures.append((name, figure))
                gallery_html.append(entry_html(figure, name))
            done += 1
            yield Progress("step", done, total, "explaining the gallery", eta_s=clock.eta(done))

    compare_html: list[str] = []
    change_summary = None
    if len(models) == 2:
        compare_html, change_summary = yield from changes_section(
            models, embedded, dataset, split, changes, device, figures, images,
            lambda wanted: _load(dataset, wanted, images, skipped), cancel)
        compare_html += yield from _two_models(models, dataset, split, device, figures, images, skipped, cancel)

    header = _header(models, dataset, split, embedded, ks, dataset_label)
    title = f"dmlviewer report: {', '.join(m.source for m in models)}"
    document = html.page(title, header + gallery_html + compare_html)
    if figures_dir is not None:
        folder = Path(figures_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for name, figure in figures:
            svg = entry_svg(figure) if isinstance(figure, PairEntry) else figure_svg(figure)
            write_text_atomic(folder / f"{name}.svg", svg)
    write_text_atomic(out, document)
    result = {"path": str(out), "figures": [name for name, _ in figures],
              "models": {m.name: {"metrics": embedded[m.name].metrics, "num_failures": len(found[m.name]),
                                  "failures": min(failures, len(found[m.name])) if pairs is None else 0,
                                  "from_file": embedded[m.name].from_file} for m in models}}
    if change_summary is not None:
        result["changes"] = change_summary
    yield Progress("done", total, total, data={"result": result})
    return result


def _header(models, dataset, split, embedded, ks, dataset_label) -> list[str]:
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    names = " and ".join(f"{m.name}: {m.source}" for m in models)
    return ["<h1>Why does the model retrieve the wrong image?</h1>",
            f'<p class="muted">Model{"s" if len(models) > 1 else ""} {html.escape(names)} · dataset '
            f"{html.escape(dataset_label or str(dataset.root))} ({html.escape(str(dataset.format))}), {split} split, "
            f"{len(dataset.indices(split))} images · {when} · dmlviewer report</p>",
            "<h2>Metrics</h2>", _metrics_table(models, embedded, ks),
            '<p class="muted">Computed as <code>dmlviewer evaluate</code> computes them: every image of the split '
            "a query against all the others (the dataset's query/gallery protocol where it has one).</p>"]


def _two_models(models, dataset, split, device, figures, images, skipped, cancel) -> Iterator[Progress]:
    """The two-model section (module docstring, step 4) as HTML parts; adds its figures."""
    from dmlviewer.core.explain.compare import _relay, compare_models
    from dmlviewer.core.explain.pair import explain_pair
    from dmlviewer.core.explain.randomization import randomization_check

    a, b = models
    result = yield from _relay(compare_models(a.model, b.model, dataset, split, COMPARE_PAIRS, device,
                                              names=(a.name, b.name), cancel=cancel), "comparing the models")
    parts = ["<h2>Two models: diagnosis</h2>", _diagnosis_table(result),
             f'<p class="muted">Over {result["num_pairs"]} same-class pairs of the {split} split; '
             f"{len(result['retrieval_disagreements'])} queries where exactly one model's nearest neighbour is of "
             "the query's class.</p>",
             "<h2>Pairs where the two models' maps disagree most</h2>"]
    for row in result["pairs"][:DISAGREEING_SHOWN]:
        q, r = row["query"], row["reference"]
        if not _load(dataset, (q, r), images, skipped):
            continue
        ea, eb = (explain_pair(m.model, images[q], images[r], device) for m in models)
        figure = PairEntry(
            f"#{row['rank']} · {_caption(dataset, q)} / {_caption(dataset, r)} · Spearman of the overall maps "
            f"{row['overall_map_spearman']:.3f}",
            pair_rows((images[q], images[r]), [RowSource(a.name, ea), RowSource(b.name, eb)], ("Query", "Reference")),
            [f"Model {a.name}: {similarity_split(ea)}", f"Model {b.name}: {similarity_split(eb)}"])
        name = f"disagreement-{row['rank']:02d}"
        figures.append((name, figure))
        parts.append(entry_html(figure, name))
    parts.append("<h2>Sanity check</h2>")
    parts.append('<p class="muted">Cascading randomization (seed 000): the layers are re-initialized from the top '
                 "down; a map that explains the model changes with it, so its correlation with the trained model's "
                 "maps falls.</p>")
    plots = []
    for m in models:
        check = yield from _relay(randomization_check(m.model, dataset, SANITY_PAIRS, SANITY_METHODS, split, device,
                                                      SANITY_DEPTHS, cancel=cancel), f"sanity check {m.name}")
        plots.append(sanity_plot(check, m.name))
    figure = Figure("Sanity check: Spearman correlation of the randomized models' maps with the trained model's",
                    [plots])
    figures.append(("sanity-check", figure))
    parts.append(html.figure_html(figure, "sanity-check"))
    return parts

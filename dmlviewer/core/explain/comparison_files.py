"""The app's comparison results as files (issue 31 item 10): what Tools > Compare Models shows,
written as the command line writes it.

- :func:`comparison_document`: a :func:`~.compare.compare_models` result as ``compare --json``
  prints it (each model entry with its ``source``: the name the app gives the model);
- :func:`check_document`: a :func:`~.randomization.randomization_check` result as ``compare
  --randomize --json`` prints its ``agreement``, ``pairs`` and ``num_pairs`` (the app's check
  has no model figures: ``models`` holds each model's ``name`` and ``source``); the checks of two
  models are ``{"checks": [document A, document B]}``;
- :func:`comparison_tables` and :func:`check_table`: the same as rows for CSV files
  (:func:`csv_text`), one table per list the window shows;
- ``json_text``: strict JSON (a non-finite number is ``null``), the command line's style
  (:mod:`dmlviewer.core.json_style`, re-exported here).

Files are written whole or not at all (:func:`~dmlviewer.core.files.write_text_atomic`).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from dmlviewer.core.json_style import json_text, strict  # noqa: F401 - json_text re-exported


def _public(result: dict) -> dict:
    return {k: v for k, v in result.items() if not str(k).startswith("_")}


def comparison_document(result: dict, sources: dict[str, str]) -> dict:
    """``result`` of ``compare_models`` as ``compare --json`` prints it; ``sources``: each model's
    name (``"A"``, ``"B"``) -> what it is (the app's name for it)."""
    out = _public(result)
    out["models"] = [{"name": m.get("name"), "source": sources.get(str(m.get("name")), str(m.get("name"))),
                      **{k: v for k, v in m.items() if k != "name"}} for m in result.get("models") or []]
    return out


def check_document(result: dict, name: str, source: str, split: str | None = None) -> dict:
    """One model's ``randomization_check`` result as ``compare --randomize --json`` prints it."""
    return {"split": split, "models": [{"name": name, "source": source}],
            "agreement": {"methods": result.get("methods"), "depths": [_public(d) for d in result.get("depths") or []]},
            "pairs": result.get("pairs"), "num_pairs": result.get("num_pairs")}


def checks_document(checks: dict[str, tuple[dict, str]], split: str | None = None) -> dict:
    """The checks of one or two models (``{"A": (result, source), ...}``): one model's document,
    or ``{"checks": [...]}`` for several."""
    documents = [check_document(result, name, source, split) for name, (result, source) in sorted(checks.items())]
    return documents[0] if len(documents) == 1 else {"checks": documents}


def comparison_tables(result: dict, sources: dict[str, str]) -> dict[str, list[dict]]:
    """The window's tables as rows: ``diagnosis`` (per model and split its figures), ``pairs``
    (ranked by disagreement) and ``retrieval`` (the retrieval disagreements)."""
    diagnosis = []
    for m in result.get("models") or []:
        by_split = m.get("by_split") or {str(result.get("split")): m}
        for split, figures in by_split.items():
            row = {"model": m.get("name"), "source": sources.get(str(m.get("name")), ""), "split": split,
                   "recall@1": figures.get("recall@1"), "map@r": figures.get("map@r")}
            for method, loc in sorted((figures.get("localization") or {}).items()):
                row[f"localization {method}"] = (loc or {}).get("best_accuracy")
            diagnosis.append(row)
    pairs = []
    for row in result.get("pairs") or []:
        sims = list(row.get("similarity") or [None, None]) + [None, None]
        right = list(row.get("nearest_same_class") or [None, None]) + [None, None]
        pairs.append({"rank": row.get("rank"), "query": row.get("query"), "reference": row.get("reference"),
                      "query_path": row.get("query_path"), "reference_path": row.get("reference_path"),
                      "similarity A": sims[0], "similarity B": sims[1],
                      **{key: row.get(key) for key in ("disagreement", "overall_map_spearman", "iou", "peak_distance",
                                                       "point_to_point_spearman")},
                      "nearest same class A": right[0], "nearest same class B": right[1]})
    retrieval = []
    for entry in result.get("retrieval_disagreements") or []:
        nearest = list(entry.get("nearest") or [None, None]) + [None, None]
        flags = list(entry.get("nearest_same_class") or [None, None]) + [None, None]
        retrieval.append({"query": entry.get("index"), "query_path": entry.get("path"), "split": entry.get("split"),
                          "nearest A": nearest[0], "A right": flags[0], "nearest B": nearest[1], "B right": flags[1]})
    return {"diagnosis": diagnosis, "pairs": pairs, "retrieval": retrieval}


def check_table(checks: dict[str, tuple[dict, str]]) -> list[dict]:
    """The sanity-check curves as rows: per model, depth and method the mean of each agreement
    measure (depth 0, the trained model, has Spearman 1)."""
    rows = []
    for name, (result, source) in sorted(checks.items()):
        for method in result.get("methods") or []:
            rows.append({"model": name, "source": source, "depth": 0, "name": "trained", "label": "", "method": method,
                         "overall_map_spearman": 1.0, "iou": 1.0, "peak_distance": 0.0})
            for d in result.get("depths") or []:
                figures = d["methods"][method]
                rows.append({"model": name, "source": source, "depth": d["depth"], "name": d.get("name", ""),
                             "label": d["label"], "method": method,
                             **{key: (figures.get(key) or {}).get("mean")
                                for key in ("overall_map_spearman", "iou", "peak_distance")}})
    return rows


def csv_text(rows: list[dict]) -> str:
    """``rows`` as CSV (the union of their keys as the header, in first-seen order; None empty)."""
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in strict(row).items()})
    return out.getvalue()


def write_files(path: str | Path, texts: dict[str, str]) -> list[Path]:
    """Write ``texts`` (suffix -> text: ``""`` is ``path`` itself, ``"-retrieval"`` goes to
    ``NAME-retrieval.csv`` beside it), each whole or not at all; returns the paths written."""
    from dmlviewer.core.files import write_text_atomic

    path = Path(path)
    written = []
    for suffix, text in texts.items():
        target = path if not suffix else path.with_name(f"{path.stem}{suffix}{path.suffix}")
        write_text_atomic(target, text)
        written.append(target)
    return written

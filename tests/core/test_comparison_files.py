"""The Compare Models window's results as files (issue 31 item 10) and the sanity check's
readable depth names (item 8)."""

from __future__ import annotations

import csv
import io
import json

from dmlviewer.core.explain.comparison_files import (check_table, checks_document, comparison_document,
                                                     comparison_tables, csv_text, json_text, write_files)
from dmlviewer.core.explain.randomization import readable_name

RESULT = {
    "split": "test", "num_pairs": 1,
    "models": [{"name": "A", "recall@1": 0.5, "map@r": 0.25, "localization": {"decomposition": {"best_accuracy": 0.4}}},
               {"name": "B", "recall@1": float("nan"), "map@r": 0.2, "localization": None}],
    "agreement": {"overall_map_spearman": {"mean": 0.3, "per_pair": [0.3]}},
    "pairs": [{"rank": 1, "query": 3, "reference": 4, "query_path": "a/3.jpg", "reference_path": "a/4.jpg",
               "similarity": [0.9, 0.8], "disagreement": 0.7, "overall_map_spearman": 0.3, "iou": 0.5,
               "peak_distance": 0.1, "point_to_point_spearman": 0.2, "nearest_same_class": [True, False]}],
    "retrieval_disagreements": [{"index": 3, "path": "a/3.jpg", "split": "test", "nearest": [4, 9],
                                 "nearest_same_class": [True, False]}],
}
CHECK = {"methods": ["decomposition"], "num_pairs": 2, "pairs": [],
         "depths": [{"depth": 1, "label": "head", "name": "head", "modules": ["head.fc"], "similarity": 0.1,
                     "methods": {"decomposition": {"overall_map_spearman": {"mean": 0.2, "per_pair": [0.1, 0.3]},
                                                   "iou": {"mean": 0.5, "per_pair": [0.5, 0.5]},
                                                   "peak_distance": {"mean": 0.1, "per_pair": [0.1, 0.1]}}}}]}


def test_the_comparison_is_the_command_lines_json_with_the_models_names():
    document = json.loads(json_text(comparison_document(RESULT, {"A": "ms-96px/checkpoint.pt · MS", "B": "other"})))
    assert [m["source"] for m in document["models"]] == ["ms-96px/checkpoint.pt · MS", "other"]
    assert document["models"][1]["recall@1"] is None  # strict JSON: NaN is null
    assert document["pairs"] == RESULT["pairs"] and document["split"] == "test"


def test_the_tables_as_csv(tmp_path):
    tables = comparison_tables(RESULT, {"A": "a", "B": "b"})
    written = write_files(tmp_path / "cmp.csv", {"": csv_text(tables["pairs"]),
                                                  "-diagnosis": csv_text(tables["diagnosis"])})
    assert [p.name for p in written] == ["cmp.csv", "cmp-diagnosis.csv"]
    pairs = list(csv.DictReader(io.StringIO((tmp_path / "cmp.csv").read_text())))
    assert pairs[0]["query_path"] == "a/3.jpg" and float(pairs[0]["similarity B"]) == 0.8
    diagnosis = list(csv.DictReader(io.StringIO((tmp_path / "cmp-diagnosis.csv").read_text())))
    assert [row["model"] for row in diagnosis] == ["A", "B"] and diagnosis[1]["recall@1"] == ""
    assert diagnosis[0]["localization decomposition"] == "0.4"
    assert tables["retrieval"][0]["nearest B"] == 9


def test_the_sanity_checks_as_json_and_csv():
    one = checks_document({"A": (CHECK, "a")}, "test")
    assert one["models"] == [{"name": "A", "source": "a"}] and one["agreement"]["depths"][0]["name"] == "head"
    both = checks_document({"A": (CHECK, "a"), "B": (CHECK, "b")}, "test")
    assert [d["models"][0]["name"] for d in both["checks"]] == ["A", "B"]
    rows = check_table({"A": (CHECK, "a"), "B": (CHECK, "b")})
    assert [(r["model"], r["depth"], r["overall_map_spearman"]) for r in rows] == [
        ("A", 0, 1.0), ("A", 1, 0.2), ("B", 0, 1.0), ("B", 1, 0.2)]


def test_a_randomized_depth_is_named_as_the_readme_names_it():
    assert readable_name("backbone.stages.3") == "stage 4"
    assert readable_name("backbone.stages.0") == "stage 1"
    assert readable_name("head.projection.out") == "head"
    assert readable_name("backbone.layer4") == "layer 4"
    assert readable_name("backbone.net.stages.1 .. backbone.net.stages.0") == "stage 2 - stage 1"
    assert readable_name("backbone.net.stages.2 (both branches)") == "stage 3 (both branches)"

"""Two-branch (cross-view) models in feature extraction, evaluation and retrieval (issue 25):
each image through its own branch at its own input shape, street queries searching aerial
images only, and ``evaluate``'s metrics equal to training's ``cross_view_recall``.

Data: a tiny synthetic CVUSA-layout set (``make_cross_view_data``); model: a two-branch
small_cnn with random weights. Expected embeddings come from running each branch directly on
its preprocessed image, not through the extraction code."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tiny_two_branch import tiny_two_branch

from dmlviewer.core.data import load_dataset_image, open_dataset
from dmlviewer.core.data.cross_view import cross_view_pairs, make_cross_view_data
from dmlviewer.core.progress import run_to_end

PANORAMA, AERIAL = (32, 128), 48
PAIRS = 8  # 4 train, 4 test


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return make_cross_view_data(tmp_path_factory.mktemp("cv") / "data", pairs=PAIRS, seed=0, aerial_size=AERIAL,
                                panorama_shape=PANORAMA, test_fraction=0.5)


@pytest.fixture(scope="module")
def model():
    return tiny_two_branch(PANORAMA, AERIAL)


@pytest.fixture(scope="module")
def checkpoint(model, tmp_path_factory):
    from dmlviewer.core.models import save_checkpoint

    path = tmp_path_factory.mktemp("ckpt") / "two.pt"
    save_checkpoint(path, model)
    return path


@torch.no_grad()
def branch_embedding(model, side: str, image: np.ndarray) -> np.ndarray:
    x = model.preprocess_of(side)(image)[None]
    return model.branch(side)(x).embedding[0].numpy()


@pytest.fixture(scope="module")
def features(model, root, tmp_path_factory):
    from dmlviewer.core.evaluate import extract_features, read_features

    dataset = open_dataset(root)
    out = tmp_path_factory.mktemp("feat") / "f.h5"
    run_to_end(extract_features(model, dataset, out, batch_size=3, num_workers=0, checkpoint_sha256="ab" * 32))
    return dataset, read_features(out)


def test_the_cvusa_reader_names_each_images_branch_and_subsets_keep_it(root):
    ds = open_dataset(root)
    assert [ds.image_branch(i) for i in range(4)] == ["query", "reference", "query", "reference"]
    assert all(ds.paths[i].startswith("streetview/") == (ds.image_branch(i) == "query") for i in range(len(ds)))
    test = ds.select_split("test")
    assert len(test) == 8 and list(test.branches) == ["query", "reference"] * 4
    assert ds.subset([1]).image_branch(0) == "reference"


def test_each_image_is_embedded_by_its_own_branch_at_its_own_shape(model, features):
    dataset, feats = features
    # mixed batches of 3 (odd size, so batches start on either branch), listing order kept
    assert feats.paths == dataset.paths
    assert feats.extra["branch"].tolist() == [0, 1] * PAIRS
    for i in range(len(dataset)):
        image = load_dataset_image(dataset, i)
        side = dataset.image_branch(i)
        other = "reference" if side == "query" else "query"
        np.testing.assert_allclose(feats.embeddings[i], branch_embedding(model, side, image), atol=1e-5)
        assert not np.allclose(feats.embeddings[i], branch_embedding(model, other, image), atol=1e-3)


def test_two_branch_models_decode_in_the_workers_whatever_decode_says(model, features, tmp_path):
    from dmlviewer.core.evaluate import extract_features, read_features

    dataset, feats = features
    out = tmp_path / "device.h5"
    run_to_end(extract_features(model, dataset, out, batch_size=3, num_workers=0, decode="device"))
    again = read_features(out)
    assert again.paths == feats.paths and np.array_equal(again.embeddings, feats.embeddings)
    assert again.attrs["image_decoder"] == feats.attrs["image_decoder"] == "opencv"


def test_one_branch_models_write_no_branch_column(root, tmp_path):
    from dmlviewer.core.evaluate import extract_features, read_features
    from dmlviewer.core.models import build_model
    from dmlviewer.core.models.model import default_config

    torch.manual_seed(0)
    single = build_model(default_config(backbone="small_cnn", dim=16, image_size=32), "cpu").eval()
    ds = open_dataset(root).select_split("test")
    out = tmp_path / "one.h5"
    run_to_end(extract_features(single, ds, out, batch_size=3, num_workers=0))
    feats = read_features(out)
    assert "branch" not in feats.extra
    with torch.no_grad():
        expected = single(single.preprocess(load_dataset_image(ds, 1))[None]).embedding[0].numpy()
    np.testing.assert_allclose(feats.embeddings[1], expected, atol=1e-5)


def test_a_street_query_searches_the_aerial_images_of_its_split_and_an_aerial_query_the_streets(features, tmp_path):
    from dmlviewer.core.evaluate import open_features, retrieve

    dataset, feats = features
    test_rows = dataset.indices("test")
    street = int(test_rows[0])
    assert dataset.image_branch(street) == "query"
    for source in (feats, open_features(feats.path)):  # eager and lazy readers alike
        results = retrieve(source, street, k=50)
        found = [r["index"] for r in results]
        assert sorted(found) == [int(r) for r in test_rows if dataset.image_branch(r) == "reference"]
        sims = feats.embeddings[found] @ feats.embeddings[street]
        np.testing.assert_allclose([r["similarity"] for r in results], sims, atol=1e-5)
        assert sims.tolist() == sorted(sims.tolist(), reverse=True)
    aerial = int(np.flatnonzero((dataset.split == "train") & (dataset.branches == "reference"))[0])
    found = [r["index"] for r in retrieve(feats, aerial, k=50)]
    assert sorted(found) == [int(r) for r in dataset.indices("train") if dataset.image_branch(r) == "query"]


def test_region_retrieval_uses_the_querys_branch_and_searches_its_gallery(model, features):
    from dmlviewer.core.evaluate.region_retrieval import region_retrieve
    from dmlviewer.core.explain.decomposition import forward_decomposed

    dataset, feats = features
    for row in (int(dataset.indices("test")[0]), int(dataset.indices("train")[1])):  # a street, then an aerial
        side = dataset.image_branch(row)
        image = load_dataset_image(dataset, row)
        h, w = image.shape[:2]
        results = region_retrieve(model, image, (0, 0, h, w), feats, k=50, query_row=row)
        split = dataset.split[row]
        gallery = [i for i in range(len(dataset)) if dataset.split[i] == split and dataset.image_branch(i) != side]
        assert sorted(r["index"] for r in results) == gallery
        # the whole image's partial feature is E - B of the query's own branch at its own shape (Eq. 3)
        with torch.no_grad():
            out, lin = forward_decomposed(model.branch(side), model.preprocess_of(side)(image)[None])
        partial = (out.embedding_raw[0] - lin.bias[0]).detach().numpy()
        partial /= np.linalg.norm(partial)
        for r in results:
            assert r["similarity"] == pytest.approx(float(feats.embeddings[r["index"]] @ partial), abs=1e-4)


def test_evaluate_reports_street_to_aerial_recall_equal_to_cross_view_recall(model, root, checkpoint, tmp_path):
    from dmlviewer.core.evaluate import evaluate
    from dmlviewer.core.train.cross_view import cross_view_recall, embed_pairs

    metrics = run_to_end(evaluate(str(checkpoint), root, split="test", out=tmp_path / "f.h5", num_workers=0))
    dataset = open_dataset(root)
    pairs = cross_view_pairs(dataset)
    test = np.flatnonzero(pairs.split == "test")
    streets = [load_dataset_image(dataset, int(i)) for i in pairs.street[test]]
    aerials = [load_dataset_image(dataset, int(i)) for i in pairs.aerial[test]]
    expected = cross_view_recall(*embed_pairs(model, streets, aerials, "cpu"))
    for key in ("recall@1", "recall@5", "recall@1%", "num_queries"):
        assert metrics[key] == expected[key], key
    assert metrics["num_queries"] == 4 and metrics["num_gallery"] == 4
    assert not {"nmi", "f1", "knn_acc"} & set(metrics)
    from dmlviewer.core.evaluate import read_features

    stored = read_features(tmp_path / "f.h5")
    assert stored.attrs["recall@1"] == expected["recall@1"]
    assert json.loads(stored.attrs["model_config"])["input_shapes"] == {"query": list(PANORAMA),
                                                                        "reference": [AERIAL, AERIAL]}


def test_cross_view_metrics_rank_each_street_against_every_aerial():
    from dmlviewer.core.evaluate.evaluation import cross_view_metrics

    # unit vectors at angles (degrees): aerials of pairs 0..2 at 0, 120, 240 and an aerial with no
    # street (label 3) at 60; streets at 10 (own aerial first), 70 (the extra aerial, 10 deg away, before
    # its own at 50 deg) and 200 (own aerial 40 deg away, first)
    def at(*degrees):
        r = np.radians(degrees)
        return np.stack([np.cos(r), np.sin(r)], 1)

    embeddings = np.concatenate([at(10, 70, 200), at(0, 120, 240, 60)]).astype(np.float32)
    labels = np.array([0, 1, 2, 0, 1, 2, 3])
    branches = np.array(["query"] * 3 + ["reference"] * 4, dtype=object)
    metrics = cross_view_metrics(embeddings, labels, branches)
    assert metrics["recall@1"] == pytest.approx(2 / 3) and metrics["recall@1%"] == pytest.approx(2 / 3)
    assert metrics["recall@2"] == 1.0 and metrics["recall@5"] == 1.0
    assert metrics["num_queries"] == 3 and metrics["num_gallery"] == 4


def test_a_two_branch_model_on_a_dataset_without_branches_is_refused_in_one_line(checkpoint, root, tmp_path):
    import cv2

    from dmlviewer.core.evaluate import evaluate

    folder = tmp_path / "folder"
    for k, name in enumerate(("a", "b")):
        (folder / name).mkdir(parents=True)
        for j in range(2):
            cv2.imwrite(str(folder / name / f"{j}.png"), np.full((40, 40, 3), 60 * k + 20 * j, np.uint8))
    with pytest.raises(ValueError, match="cross-view data") as info:
        run_to_end(evaluate(str(checkpoint), folder, split="all", out=None, num_workers=0))
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------------ the CLI


def test_the_evaluate_and_retrieve_commands_do_street_to_aerial_retrieval(checkpoint, root, tmp_path, capsys):
    from dmlviewer.cli import main

    out = tmp_path / "f.h5"
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--dataset", str(root), "--out", str(out), "--json",
                 "--num-workers", "0"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert {"recall@1", "recall@5", "recall@1%", "map@r"} <= set(metrics) and metrics["num_queries"] == 4
    from dmlviewer.core.evaluate import read_features

    feats = read_features(out)
    street = feats.paths.index(next(p for p in feats.paths if p.startswith("streetview/")))
    assert main(["retrieve", "--features", str(out), "--query", str(street), "-k", "10", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["results"]
    assert len(found) == 4 and all(r["path"].startswith("bingmap/") for r in found)
    assert main(["retrieve", "--features", str(out), "--query", str(street), "-k", "10", "--json",
                 "--region", "0,0,16,64", "--checkpoint", str(checkpoint)]) == 0
    found = json.loads(capsys.readouterr().out)["results"]
    assert len(found) == 4 and all(r["path"].startswith("bingmap/") for r in found)


def test_the_evaluate_command_refuses_a_two_branch_model_on_other_data_in_one_line(checkpoint, tmp_path, capsys):
    import cv2

    from dmlviewer.cli import main

    folder = tmp_path / "folder"
    for name in ("a", "b"):
        (folder / name).mkdir(parents=True)
        for j in range(2):
            cv2.imwrite(str(folder / name / f"{j}.png"), np.full((40, 40, 3), 40 * j, np.uint8))
    code = main(["evaluate", "--checkpoint", str(checkpoint), "--dataset", str(folder), "--split", "all",
                 "--out", str(tmp_path / "f.h5"), "--num-workers", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "cross-view data" in err[0]
    assert not (tmp_path / "f.h5").exists()


def test_evaluations_recall_is_trainings_cross_view_recall():
    from dmlviewer.core.evaluate.metrics import one_match_recall
    from dmlviewer.core.train.cross_view import cross_view_recall

    rng = np.random.default_rng(0)
    for n_query, n_ref, dim in ((7, 7, 4), (30, 250, 3), (5, 9, 2)):
        query = rng.normal(size=(n_query, dim))
        reference = np.round(rng.normal(size=(n_ref, dim)), 1)  # rounding makes ties
        reference[1] = reference[0]
        assert one_match_recall(query, reference) == cross_view_recall(query, reference)


@pytest.mark.parametrize("split", ["train", "test"])
def test_compare_figures_of_a_two_branch_model_are_street_to_aerial_in_either_split(model, root, split):
    """The Compare window's figures (core.explain.compare.retrieval_figures): Recall@1 over the
    split's streets against its aerial images, also in the training split, where CVUSA names no
    queries (it read nan), and each image's nearest is one of the other side."""
    from dmlviewer.core.evaluate.evaluation import cross_view_metrics
    from dmlviewer.core.evaluate.extract import embed_dataset
    from dmlviewer.core.explain.compare import retrieval_figures

    dataset = open_dataset(root)
    figures = run_to_end(retrieval_figures(model, dataset, split))
    subset = dataset.select_split(split)
    embedded = run_to_end(embed_dataset(model, subset, 64, "cpu", 0))
    rows = embedded["rows"]
    want = cross_view_metrics(embedded["embeddings"], subset.labels[rows], subset.branches[rows], (1,))
    assert figures["recall@1"] == pytest.approx(want["recall@1"]) and figures["num_queries"] == PAIRS // 2
    indices = dataset.indices(split)
    assert set(figures["nearest"]) == set(indices.tolist())
    for image, nearest in figures["nearest"].items():
        assert dataset.image_branch(image) != dataset.image_branch(nearest)
        assert figures["same_class"][image] == (dataset.labels[image] == dataset.labels[nearest])

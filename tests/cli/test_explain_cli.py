"""``dmlviewer explain``, ``localize`` and ``correspond`` end to end on the tiny parts dataset."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dmlviewer.cli import main
from dmlviewer.core.data import open_dataset
from dmlviewer.core.evaluate import read_features, write_features
from dmlviewer.core.explain.localization import embed_images
from dmlviewer.core.models import build_model, default_config, save_checkpoint

NPZ_KEYS = {"similarity", "point_to_point", "bias_query", "bias_reference", "bias_both",
            "overall_query", "overall_reference", "overall_query_grid", "overall_reference_grid", "grid_query", "grid_reference", "method", "rule", "rule_detail"}


@pytest.fixture(scope="module")
def setup(tiny_demo_root, tmp_path_factory):
    folder = tmp_path_factory.mktemp("explain_cli")
    torch.manual_seed(0)
    model = build_model(default_config(backbone="small_cnn", pooling="gmp", hidden=32, dim=16, image_size=64))
    checkpoint = save_checkpoint(folder / "model.pt", model)
    dataset = open_dataset(tiny_demo_root)
    return {"root": tiny_demo_root, "checkpoint": str(checkpoint), "dataset": dataset, "folder": folder, "model": model}


def _image(setup, i):
    return str(setup["dataset"].abspath(i))


@pytest.mark.parametrize("method", ["decomposition", "decomposition_bias", "gradcam", "rgradcam"])
def test_explain_npz_satisfies_completeness(setup, method):
    out = setup["folder"] / f"{method}.npz"
    rc = main(["explain", "--checkpoint", setup["checkpoint"], "--query", _image(setup, 0),
               "--reference", _image(setup, 5), "--method", method, "--out", str(out), "--device", "cpu"])
    assert rc == 0
    z = np.load(out)
    assert set(z.files) == NPZ_KEYS
    assert str(z["rule"]) == "exact" and str(z["rule_detail"]) == "exact (max positions, ReLU masks frozen at this input)"
    assert str(z["method"]) == method
    total = float(z["point_to_point"].astype(np.float64).sum() + z["bias_query"] + z["bias_reference"] + z["bias_both"])
    assert total == pytest.approx(float(z["similarity"]), abs=1e-5)
    assert z["point_to_point"].shape == (4, 4, 4, 4)
    assert list(z["grid_query"]) == [4, 4] and list(z["grid_reference"]) == [4, 4]
    assert z["overall_query"].shape == (64, 64) and z["overall_reference"].shape == (64, 64)
    assert z["overall_query_grid"].shape == (4, 4) and z["overall_reference_grid"].shape == (4, 4)
    if method == "decomposition":  # the overall map is the tensor summed over the other image
        grid = z["point_to_point"].sum(axis=(2, 3))
        assert float(z["overall_query"].mean()) == pytest.approx(float(grid.mean()), rel=0.05, abs=1e-6)


def _svg_texts(path) -> list[str]:
    import xml.etree.ElementTree as ET

    return [t.text or "" for t in ET.parse(path).iter("{http://www.w3.org/2000/svg}text")]


def _bar_labels(path, gid: str) -> list[str]:
    import xml.etree.ElementTree as ET

    group = next(g for g in ET.parse(path).iter("{http://www.w3.org/2000/svg}g") if g.get("id") == gid)
    return [t.text for t in group.iter("{http://www.w3.org/2000/svg}text")]


@pytest.mark.parametrize("sign", ["positive", "signed"])
def test_explain_figure_text_is_the_same_at_every_scale_and_its_bar_ends_at_the_largest_cell(setup, sign):
    """Issue 39: ``--figure`` at 1x and 4x writes SVGs with identical text; the query colour
    bar's top label is the largest cell of ``overall_query_grid`` (its positive part, or its
    largest |value| when signed), not a statistic of a resized map."""
    written = {}
    for k in (1, 4):
        out, figure = setup["folder"] / f"fig{k}.npz", setup["folder"] / f"fig{k}_{sign}.svg"
        rc = main(["explain", "--checkpoint", setup["checkpoint"], "--query", _image(setup, 0),
                   "--reference", _image(setup, 5), "--out", str(out), "--device", "cpu", "--figure", str(figure),
                   "--figure-scale", str(k), "--sign", sign, "--colormap", "plasma", "--opacity", "0.8",
                   "--point", "20,30", "--matches", "3"])
        assert rc == 0
        written[k] = figure
    assert _svg_texts(written[1]) == _svg_texts(written[4])
    grid = np.load(setup["folder"] / "fig1.npz")["overall_query_grid"]
    top = float(np.abs(grid).max()) if sign == "signed" else float(np.maximum(grid, 0).max())
    labels = _bar_labels(written[1], "colorbar A query")
    assert labels[-1] == "similarity share per cell" and labels[-2] == f"{top:.3g}"
    if sign == "signed":
        assert labels[0] == f"{-top:.3g}"
    text = " ".join(_svg_texts(written[1]))
    assert "partial map of the pinned query point" in text and "Top 3 matches" in text


def test_explain_figure_source_redraws_the_figure_with_matplotlib(setup, tmp_path):
    """``--figure-source``: FILE.npz holds the figure's arrays (the grid maps and their levels)
    and FILE.py redraws it with matplotlib alone, in a fresh interpreter."""
    import subprocess
    import sys

    figure = tmp_path / "pair.pdf"
    assert main(["explain", "--checkpoint", setup["checkpoint"], "--query", _image(setup, 0), "--reference",
                 _image(setup, 5), "--out", str(tmp_path / "pair.npz.out"), "--device", "cpu", "--figure",
                 str(figure), "--figure-source", "--sign", "negative", "--point", "10,12", "--matches", "2"]) == 0
    source = np.load(tmp_path / "pair.npz")
    explained = np.load(tmp_path / "pair.npz.out.npz")
    grid = np.maximum(-explained["overall_query_grid"], 0)
    assert np.allclose(source["r0_query_overlay"], grid) and source["r0_query_levels"][1] == pytest.approx(grid.max())
    assert source["r0_matches"].shape == (2, 5) and np.isfinite(source["r0_query_point"]).all()
    done = subprocess.run([sys.executable, str(tmp_path / "pair.py"), str(tmp_path / "redrawn.png")],
                          capture_output=True, text=True, timeout=300, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "redrawn.png").stat().st_size > 1000


def test_explain_figure_png_has_the_scales_pixels(setup):
    from PIL import Image

    sizes = []
    for k in (1, 2):
        figure = setup["folder"] / f"px{k}.png"
        assert main(["explain", "--checkpoint", setup["checkpoint"], "--query", _image(setup, 0),
                     "--reference", _image(setup, 5), "--out", str(setup["folder"] / "px.npz"), "--device", "cpu",
                     "--figure", str(figure), "--figure-scale", str(k)]) == 0
        sizes.append(Image.open(figure).size)
    assert sizes[1] == (2 * sizes[0][0], 2 * sizes[0][1])


@pytest.mark.parametrize("bad, says", [
    (["--figure", "x.gif"], "--figure x.gif: give a .png, .svg or .pdf file"),
    (["--figure", "x.svg", "--sign", "both"], "--sign: 'both' is not one of positive, negative, signed"),
    (["--figure", "x.svg", "--opacity", "2"], "--opacity: 2.0 is outside 0 to 1"),
    (["--figure", "x.svg", "--colormap", "gray"], "--colormap: 'gray' is not one of"),
    (["--figure", "x.svg", "--scale", "row"], "--scale: 'row' is not one of map, pair"),
    (["--figure", "x.svg", "--figure-scale", "5"], "must be an integer from 1 to 4"),
    (["--figure", "x.svg", "--point", "a,b"], "--point: 'a,b' is not X,Y"),
    (["--figure", "x.svg", "--point", "500,3"], "--point: (500, 3) is outside the query image (64 x 64 pixels)"),
    (["--figure", "o.svg", "--figure-source"], "--figure-source would write"),
    (["--point", "3,3"], "--point, --matches and --figure-source draw on the figure: give --figure FILE too"),
])
def test_explain_figure_bad_values_exit_2_in_one_line(setup, bad, says, capsys, tmp_path):
    bad = [str(tmp_path / b) if b.startswith(("x.", "o.")) else b for b in bad]
    rc = main(["explain", "--checkpoint", setup["checkpoint"], "--query", _image(setup, 0), "--reference",
               _image(setup, 5), "--out", str(tmp_path / "o.npz"), "--device", "cpu", *bad])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert says.replace("x.gif", str(tmp_path / "x.gif")) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a refused command writes nothing"


def test_explain_grad_transfer_leaves_the_feature_file_alone_unless_asked(setup):
    dataset = setup["dataset"]
    train = dataset.indices("train")
    emb = embed_images(setup["model"], dataset, train)
    features = setup["folder"] / "train.h5"
    write_features(features, {
        "embeddings_raw": emb, "labels": dataset.labels[train], "paths": [dataset.paths[i] for i in train],
        "split": "train",
    }, {"dataset_root": str(setup["root"]), "dataset_format": dataset.format})
    before = features.read_bytes()
    out = setup["folder"] / "transfer.npz"
    argv = ["explain", "--checkpoint", setup["checkpoint"], "--query", _image(setup, int(dataset.indices("test")[0])),
            "--reference", _image(setup, 0), "--method", "grad_transfer", "--features", str(features), "--out", str(out)]
    assert main(argv) == 0
    assert features.read_bytes() == before  # computed for this run only: the user's file is untouched
    first = np.load(out)["overall_query"]
    assert main(argv + ["--save-grad-weights"]) == 0  # asked for: stored in the file
    stored = read_features(features).extra["grad_weights"]
    assert stored.shape == (len(train), 128) and np.isfinite(stored).all()
    np.testing.assert_allclose(np.load(out)["overall_query"], first, rtol=1e-5, atol=1e-8)
    assert main(argv) == 0  # a later run reads the stored weights
    np.testing.assert_allclose(np.load(out)["overall_query"], first, rtol=1e-5, atol=1e-8)


def test_explain_bad_arguments_exit_2(setup, capsys):
    out = str(setup["folder"] / "x.npz")
    base = ["explain", "--checkpoint", setup["checkpoint"], "--query", _image(setup, 0), "--out", out]
    assert main(base + ["--reference", str(setup["folder"] / "missing.png")]) == 2
    assert "missing.png" in capsys.readouterr().err
    assert main(["explain", "--checkpoint", str(setup["folder"] / "nope.pt"), "--query", _image(setup, 0),
                 "--reference", _image(setup, 1), "--out", out]) == 2
    assert "nope.pt" in capsys.readouterr().err
    assert main(base + ["--reference", _image(setup, 1), "--method", "grad_transfer"]) == 2
    err = capsys.readouterr().err
    assert "--features" in err and len(err.strip().splitlines()) == 1
    assert main(base + ["--reference", _image(setup, 1), "--method", "nonsense"]) == 2


def test_localize_json(setup, capsys):
    rc = main(["localize", "--checkpoint", setup["checkpoint"], "--dataset", str(setup["root"]),
               "--method", "decomposition,rgradcam", "--method", "gradcam_nonorm",
               "--thresholds", "0.2:0.6:0.2", "--pairing", "same-class", "--json", "--device", "cpu"])
    assert rc == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["method"] for r in results] == ["decomposition", "rgradcam", "gradcam_nonorm"]
    for r in results:
        assert r["pairing"] == "same-class" and r["thresholds"] == [0.2, 0.4, 0.6]
        assert len(r["accuracy"]) == 3 and r["num_images"] == len(setup["dataset"].indices("test"))
        assert r["best_accuracy"] == max(r["accuracy"])


@pytest.mark.parametrize("bad", [["--thresholds", "0.5:0.1:0.1"], ["--method", "magic"], ["--split", "nowhere"]])
def test_localize_bad_arguments_exit_2(setup, bad, capsys):
    argv = ["localize", "--checkpoint", setup["checkpoint"], "--dataset", str(setup["root"]), "--json"]
    if "--method" not in bad:
        argv += ["--method", "decomposition"]
    assert main(argv + bad) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_correspond_json(setup, capsys, tmp_path):
    rc = main(["correspond", "--checkpoint", setup["checkpoint"], "--dataset", str(setup["root"]),
               "--pairs", "4", "--json", "--device", "cpu"])
    assert rc == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"partial_map_accuracy", "overall_map_accuracy", "num_pairs", "num_parts",
                           "chance_accuracy", "matches_on_object", "matches_same_part", "matches_score_on_object",
                           "group_diversity"}
    assert result["num_pairs"] == 4 and result["num_parts"] == 12
    # a folder dataset has no part masks: one clear line, status 2
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    import shutil

    for k, cls in enumerate("ab"):
        for j in range(2):
            shutil.copy(_image(setup, 4 * k + j), tmp_path / cls / f"{j}.jpg")
    assert main(["correspond", "--checkpoint", setup["checkpoint"], "--dataset", str(tmp_path), "--json"]) == 2
    assert "part masks" in capsys.readouterr().err


def test_command_choices_match_the_core():
    """``explain --method`` offers the registry's methods, each of which the core explains; the
    localize command repeats the pairing names (its parser must not import torch)."""
    from dmlviewer.cli import build_parser
    from dmlviewer.commands import localize as localize_command
    from dmlviewer.core import explain as core
    from dmlviewer.core.explain import methods as registry

    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices and "explain" in a.choices)
    method = next(a for a in sub.choices["explain"]._actions if a.dest == "method")
    assert tuple(method.choices) == registry.methods("explain") == (
        "decomposition", "decomposition_bias", "gradcam", "gradcam_nonorm", "rgradcam", "grad_transfer")
    assert localize_command.PAIRINGS == core.PAIRINGS

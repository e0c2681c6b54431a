"""Two-branch (cross-view) models through the file doors (issue 25): ``import-model`` of a street
and an aerial encoder's weights files into one two-branch checkpoint, and the code-and-weights
door (``--model`` returning a ``(query, reference)`` pair of modules, ``--weights`` /
``--reference-weights``, ``--input-shapes``) on the commands, the app's source and its settings.
Random-weight modules built as a user builds them; each branch must reproduce its source module."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from PIL import Image
from tiny_two_branch import save_encoders
from torch import nn

from dmlviewer.cli import main
from dmlviewer.core.explain import explain_pair
from dmlviewer.core.models import ModelError, load_checkpoint, open_model
from dmlviewer.core.models.code_door import open_code_model
from dmlviewer.core.models.source import ModelSource
from dmlviewer.core.models.two_branch import TwoBranchModel, parse_input_shape, parse_input_shapes

PANORAMA, AERIAL = (32, 128), (64, 64)  # a 1:4 street panorama against a square aerial image


def _images(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (50, 200, 3), dtype=np.uint8), rng.integers(0, 256, (70, 70, 3), dtype=np.uint8))


def _branch_outputs(model: TwoBranchModel, side: str, module: nn.Module, rgb: np.ndarray):
    """(dmlviewer's raw embedding, the source module's output) of one image at the branch's input."""
    x = model.preprocess_of(side)(rgb)[None]
    assert tuple(x.shape[-2:]) == model.input_shapes[side]
    with torch.no_grad():
        return model.branch(side)(x).embedding_raw[0], module(x)[0]


def _complete(e) -> float:
    total = float(e.point_to_point.sum(dtype=np.float64)) + e.bias_query + e.bias_reference + e.bias_both
    return abs(total - e.similarity)


# ------------------------------------------------------------------------------ import-model

@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    """A street and an aerial resnet18 (16-d embeddings) and a 10-d aerial one, as state dicts."""
    folder = tmp_path_factory.mktemp("two_branch_import")
    return folder, save_encoders(folder)


def _import(folder, *extra) -> list[str]:
    return ["import-model", str(folder / "street.pth"), "--image-size", "32x128",
            "--reference-weights", str(folder / "aerial.pth"), "--reference-image-size", "64", *extra]


def test_import_two_weights_files_gives_a_two_branch_checkpoint(encoders, tmp_path, capsys):
    folder, nets = encoders
    out = tmp_path / "cross.pt"
    assert main(_import(folder, "--out", str(out))) == 0
    report = capsys.readouterr().out
    assert "query branch:" in report and "reference branch:" in report
    assert report.count("ASSUMED") == 2  # what was assumed, per branch
    assert "input: 32x128 px" in report and "input: 64x64 px" in report
    assert "query resnet18 at 32x128 px, reference resnet18 at 64x64 px" in report
    model, info = load_checkpoint(out)
    assert isinstance(model, TwoBranchModel)
    assert model.input_shapes == {"query": PANORAMA, "reference": AERIAL}
    assert set(info["extra"]["import"]["branches"]) == {"query", "reference"}
    q, r = _images()
    for side, net, rgb in (("query", nets["street"], q), ("reference", nets["aerial"], r)):
        ours, theirs = _branch_outputs(model, side, net, rgb)
        assert float((ours - theirs).abs().max()) <= 1e-5
    # opens wherever a checkpoint does, and decomposes exactly between the two grids
    opened, _ = open_model(str(out))
    e = explain_pair(opened, q, r)
    assert e.rule == "exact" and _complete(e) < 1e-5
    assert e.grid_query[1] == 4 * e.grid_query[0] and e.grid_reference[0] == e.grid_reference[1]


def test_import_refuses_branches_of_different_dims(encoders, tmp_path, capsys):
    folder, _ = encoders
    out = tmp_path / "bad.pt"
    argv = ["import-model", str(folder / "street.pth"), "--reference-weights", str(folder / "aerial10.pth"),
            "--out", str(out)]
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and "one space" in err[0] and "16" in err[0] and "10" in err[0]
    assert not out.exists()


def test_import_check_against_is_per_branch(encoders, tmp_path, capsys):
    folder, nets = encoders
    gen = torch.Generator().manual_seed(3)
    xq, xr = torch.randn(2, 3, *PANORAMA, generator=gen), torch.randn(2, 3, *AERIAL, generator=gen)
    with torch.no_grad():
        np.savez(tmp_path / "q.npz", images=xq.numpy(), embeddings=nets["street"](xq).numpy())
        np.savez(tmp_path / "r.npz", images=xr.numpy(), embeddings=nets["aerial"](xr).numpy())
        np.savez(tmp_path / "wrong.npz", images=xr.numpy(), embeddings=nets["street"](xr).numpy())  # not aerial
    out = tmp_path / "checked.pt"
    assert main(_import(folder, "--check-against", str(tmp_path / "q.npz"), "--reference-check-against",
                        str(tmp_path / "r.npz"), "--out", str(out))) == 0
    text = capsys.readouterr().out
    assert "query branch: embeddings vs. q.npz" in text and "reference branch: embeddings vs. r.npz" in text
    assert text.count("they match") == 2
    refused = tmp_path / "refused.pt"
    assert main(_import(folder, "--reference-check-against", str(tmp_path / "wrong.npz"), "--out",
                        str(refused))) == 2
    err = capsys.readouterr().err
    assert "--reference-check-against" in err and "DIFFER" in err and not refused.exists()


@pytest.mark.parametrize("argv, message", [
    (["--reference-arch", "resnet18"], "--reference-weights"),
    (["--reference-check-against", "x.npz"], "--reference-weights"),
    (["--image-size", "32x128"], "two-branch"),
    (["--image-size", "16x128"], "--image-size"),
    (["--image-size", "axb"], "--image-size"),
])
def test_bad_two_branch_options_exit_2(encoders, tmp_path, capsys, argv, message):
    folder, _ = encoders
    assert main(["import-model", str(folder / "street.pth"), *argv, "--out", str(tmp_path / "m.pt")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m.pt").exists()


def test_shape_parsing():
    assert parse_input_shape("64x256") == (64, 256) and parse_input_shape(" 128 ") == (128, 128)
    assert parse_input_shapes("64x256,128") == ((64, 256), (128, 128))
    for bad in ("", "0", "4x9999", "64x256x3", "1e3", "-8", "²"):
        with pytest.raises(ValueError):
            parse_input_shape(bad)
    with pytest.raises(ValueError, match="QUERY,REFERENCE"):
        parse_input_shapes("64x256")


# ------------------------------------------------------------------------------ the code door

USER_MODELS = '''
import torch
from torch import nn


def encoder(width, dim):
    return nn.Sequential(nn.Conv2d(3, width, 3, 2, 1), nn.BatchNorm2d(width), nn.ReLU(),
                         nn.Conv2d(width, width, 3, 2, 1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, dim))


def build_pair(dim=12):
    """A street encoder and an aerial encoder (different widths) into one space."""
    return encoder(8, dim), encoder(16, dim)


def build_one(dim=12):
    return encoder(8, dim)


def build_mismatched():
    return encoder(8, 12), encoder(8, 5)
'''


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """The user's model file, their trained modules and their weights files (three layouts)."""
    folder = tmp_path_factory.mktemp("two_branch_code")
    (folder / "cross_models.py").write_text(textwrap.dedent(USER_MODELS))
    namespace: dict = {}
    exec(compile(textwrap.dedent(USER_MODELS), "cross_models", "exec"), namespace)  # the user's own script
    torch.manual_seed(0)
    q, r = namespace["build_pair"]()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in (q[1], r[1]):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.3)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
    q.eval(), r.eval()
    torch.save(q.state_dict(), folder / "street.pth")
    torch.save(r.state_dict(), folder / "aerial.pth")
    both = {**{f"model.query.{k}": v for k, v in q.state_dict().items()},
            **{f"model.reference.{k}": v for k, v in r.state_dict().items()}}
    torch.save({"epoch": 3, "state_dict": both}, folder / "both.ckpt")  # Lightning-style, both branches
    q_img, r_img = _images(1)
    Image.fromarray(q_img).save(folder / "street.png")
    Image.fromarray(r_img).save(folder / "aerial.png")
    return {"folder": folder, "entry": f"{folder}/cross_models.py:build_pair", "q": q, "r": r}


def _check_branches(model, q_net, r_net) -> None:
    q, r = _images(2)
    for side, net, rgb in (("query", q_net, q), ("reference", r_net, r)):
        ours, theirs = _branch_outputs(model, side, net, rgb)
        assert float((ours - theirs).abs().max()) <= 1e-5
    e = explain_pair(model, q, r)
    assert e.rule == "exact" and _complete(e) < 1e-5


@pytest.mark.parametrize("layout", ["one_file", "two_files"])
def test_code_door_opens_a_pair_of_modules_as_two_branches(user, layout):
    folder = user["folder"]
    weights = ({"weights": str(folder / "both.ckpt")} if layout == "one_file"
               else {"weights": str(folder / "street.pth"), "reference_weights": str(folder / "aerial.pth")})
    model, info = open_code_model(user["entry"], feature_layer="3", input_shapes=[[32, 128], 64], **weights)
    assert isinstance(model, TwoBranchModel) and info["source"] == "code"
    assert model.input_shapes == {"query": PANORAMA, "reference": AERIAL}
    _check_branches(model, user["q"], user["r"])


def test_code_door_feature_layer_per_branch(user):
    """``"QUERY_LAYER,REFERENCE_LAYER"``: each branch explained at its own layer (grids differ)."""
    folder = user["folder"]
    kwargs = {"weights": str(folder / "street.pth"), "reference_weights": str(folder / "aerial.pth"),
              "input_shapes": [[32, 128], 64]}
    same, _ = open_code_model(user["entry"], feature_layer="4", **kwargs)
    split, _ = open_code_model(user["entry"], feature_layer="4,2", **kwargs)
    q, r = _images(3)
    a, b = explain_pair(same, q, r), explain_pair(split, q, r)
    assert a.grid_reference == (16, 16) and b.grid_reference == (32, 32) and b.grid_query == a.grid_query
    assert b.similarity == pytest.approx(a.similarity, abs=1e-5) and _complete(b) < 1e-4


def test_code_door_two_branch_refusals(user):
    folder = user["folder"]
    with pytest.raises(ModelError, match="two-branch"):
        open_code_model(f"{folder}/cross_models.py:build_one", reference_weights=str(folder / "aerial.pth"))
    with pytest.raises(ModelError, match="two-branch"):
        open_code_model(f"{folder}/cross_models.py:build_one", input_shapes=[64, 64])
    with pytest.raises(Exception, match="query. and reference."):  # one file of the query branch alone
        open_code_model(user["entry"], weights=str(folder / "street.pth"))
    with pytest.raises(ModelError, match="one space"):
        open_code_model(f"{folder}/cross_models.py:build_mismatched")


def test_model_source_round_trips_the_two_branch_fields(user):
    folder = user["folder"]
    source = ModelSource("code", entry=user["entry"], weights=str(folder / "street.pth"),
                         reference_weights=str(folder / "aerial.pth"),
                         options={"input_shapes": [[32, 128], [64, 64]], "feature_layer": "3"})
    back = ModelSource.from_dict(json.loads(source.to_json()))
    assert back == source and "aerial.pth" in back.display()
    model, _ = back.open("cpu")
    _check_branches(model, user["q"], user["r"])
    gone = ModelSource("code", entry=user["entry"], reference_weights=str(folder / "no_such.pth"))
    assert "reference weights file not found" in gone.missing()
    for bad in ([[32, 128]], [[4, 128], 64], [True, 64], "64x256,128", [[32, 128, 3], 64]):
        with pytest.raises(ModelError, match="input_shapes"):
            ModelSource.from_dict({**source.to_dict(), "options": {"input_shapes": bad}})


def test_two_branch_code_model_on_the_command_line(user, tmp_path, capsys):
    """In process: --input-shapes and --reference-weights on explain, and refused without --model."""
    folder = user["folder"]
    base = ["--model", user["entry"], "--weights", str(folder / "street.pth"), "--reference-weights",
            str(folder / "aerial.pth"), "--input-shapes", "32x128,64", "--device", "cpu"]
    out = tmp_path / "pair.npz"
    assert main(["explain", *base, "--query", str(folder / "street.png"), "--reference",
                 str(folder / "aerial.png"), "--out", str(out)]) == 0
    z = np.load(out)
    assert tuple(z["grid_query"]) == (8, 32) and tuple(z["grid_reference"]) == (16, 16)
    # --feature-layer Q,R: each branch at its own layer, as the Python door's feature_layer="4,2"
    assert main(["explain", *base, "--feature-layer", "4,2", "--query", str(folder / "street.png"), "--reference",
                 str(folder / "aerial.png"), "--out", str(tmp_path / "split.npz")]) == 0
    split = np.load(tmp_path / "split.npz")
    assert tuple(split["grid_query"]) == (8, 32) and tuple(split["grid_reference"]) == (32, 32)
    assert float(split["similarity"]) == pytest.approx(float(z["similarity"]), abs=1e-5)
    assert main(["explain", "--checkpoint", "x.pt", "--reference-weights", str(folder / "aerial.pth"),
                 "--query", "a.png", "--reference", "b.png", "--out", str(tmp_path / "o.npz")]) == 2
    assert "--reference-weights is only used with --model" in capsys.readouterr().err
    assert main(["explain", *base[:-4], "--input-shapes", "32x128", "--query", "a.png", "--reference", "b.png",
                 "--out", str(tmp_path / "o.npz")]) == 2
    assert "--input-shapes" in capsys.readouterr().err


def test_two_branch_code_model_through_a_real_process(user, tmp_path):
    """The model door for two branches as a user runs it: a subprocess, exit 0, an exact npz whose
    similarity is the source modules' (each image through its own encoder at its own shape)."""
    folder = user["folder"]
    out = tmp_path / "pair.npz"
    proc = subprocess.run([sys.executable, "-m", "dmlviewer", "explain", "--model", user["entry"],
                           "--weights", str(folder / "both.ckpt"), "--input-shapes", "32x128,64",
                           "--query", str(folder / "street.png"), "--reference", str(folder / "aerial.png"),
                           "--out", str(out), "--device", "cpu"],
                          check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    z = np.load(out)
    total = float(z["point_to_point"].astype(np.float64).sum() + z["bias_query"] + z["bias_reference"]
                  + z["bias_both"])
    assert total == pytest.approx(float(z["similarity"]), abs=1e-5)
    from dmlviewer.core.data.transforms import Preprocess

    q_img, r_img = (np.asarray(Image.open(folder / n).convert("RGB")) for n in ("street.png", "aerial.png"))
    with torch.no_grad():
        eq = nn.functional.normalize(user["q"](Preprocess(128, shape=PANORAMA)(q_img)[None]), dim=1)[0]
        er = nn.functional.normalize(user["r"](Preprocess(64)(r_img)[None]), dim=1)[0]
    assert float(z["similarity"]) == pytest.approx(float(eq @ er), abs=1e-5)
    bad = subprocess.run([sys.executable, "-m", "dmlviewer", "explain", "--model",
                          f"{folder}/cross_models.py:build_one", "--reference-weights", str(folder / "aerial.pth"),
                          "--query", str(folder / "street.png"), "--reference", str(folder / "aerial.png"),
                          "--out", str(tmp_path / "x.npz"), "--device", "cpu"],
                         check=False, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "two-branch" in bad.stderr.strip().splitlines()[-1]

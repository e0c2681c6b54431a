"""torchvision families recognized through timm's equivalent layouts (issue 22.2): RegNet X/Y
state dicts with an embedding layer are renamed to timm's RegNet keys, which compute the same
function; the embeddings equal the source module's."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from dmlviewer.core.models import load_checkpoint
from dmlviewer.core.models.importing import analyze, write_checkpoint
from dmlviewer.core.progress import run_to_end

pytest.importorskip("timm")
SIZE = 64


@pytest.mark.parametrize("name, fc, arch, dim, hidden", [
    ("regnet_y_400mf", lambda: nn.Linear(440, 128), "timm:regnety_004", 128, 0),
    ("regnet_x_400mf", lambda: nn.Sequential(nn.Linear(400, 256), nn.ReLU(), nn.Linear(256, 64)),
     "timm:regnetx_004_tv", 64, 256),
])
def test_torchvision_regnet_with_an_embedding_layer(tmp_path, randomize, name, fc, arch, dim, hidden):
    torch.manual_seed(0)
    source = torchvision.models.get_model(name, weights=None)
    source.fc = fc()
    source = randomize(source).eval()
    torch.save(source.state_dict(), tmp_path / f"{name}.pth")
    plan = run_to_end(analyze([str(tmp_path / f"{name}.pth")], image_size=SIZE))
    assert plan.arch == arch and plan.config["dim"] == dim and plan.config["hidden"] == hidden
    assert plan.config["mean"] == pytest.approx([0.485, 0.456, 0.406])
    assert "ImageNet's (torchvision's)" in plan.assumption_line()
    path, _ = write_checkpoint(plan, tmp_path / "imported.pt")
    model, _ = load_checkpoint(path)
    x = torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model(x).embedding_raw, source(x)
    assert float((ours - theirs).abs().max() / theirs.abs().max()) <= 1e-5

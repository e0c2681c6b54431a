"""timm Hugging Face folders (issue 22.2): ``config.json`` + ``model.safetensors`` as timm's own
``save_for_hf`` writes them; the architecture, pooling, input size and normalization are read
from the config (not assumed), and the embeddings equal the source module's."""

from __future__ import annotations

import json

import pytest
import torch

from dmlviewer.core.models import load_checkpoint
from dmlviewer.core.models.importing import LayoutError, analyze, write_checkpoint
from dmlviewer.core.progress import run_to_end

timm = pytest.importorskip("timm")
pytest.importorskip("safetensors")
save_for_hf = pytest.importorskip("timm.models._hub").save_for_hf


def _relative(path, source, size: int) -> float:
    model, _ = load_checkpoint(path)
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours, theirs = model(x).embedding_raw, source(x)
    return float((ours - theirs).abs().max() / theirs.abs().max())


def test_vit_folder(tmp_path):
    torch.manual_seed(0)
    source = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64, num_classes=0).eval()
    save_for_hf(source, str(tmp_path / "hf"), model_args={"img_size": 64}, safe_serialization=True)
    plan = run_to_end(analyze([str(tmp_path / "hf")]))
    assert plan.arch == "timm:vit_tiny_patch16_224" and plan.config["pooling"] == "token"
    assert plan.config["image_size"] == 64 and plan.config["mean"] == pytest.approx([0.5, 0.5, 0.5])
    line = plan.assumption_line()
    assert "pooling" not in line and "input" not in line  # read from config.json, not assumed
    path, _ = write_checkpoint(plan, tmp_path / "vit.pt")
    assert _relative(path, source, 64) <= 1e-5


def test_cnn_folder_with_max_pooling(tmp_path, randomize):
    torch.manual_seed(1)
    source = randomize(timm.create_model("resnet18", pretrained=False, num_classes=24, global_pool="max")).eval()
    save_for_hf(source, str(tmp_path / "hf"), safe_serialization=True)
    plan = run_to_end(analyze([str(tmp_path / "hf")], image_size=64))
    assert plan.arch == "timm:resnet18" and plan.config["pooling"] == "gmp" and plan.config["dim"] == 24
    assert "pooling" not in plan.assumption_line()
    path, _ = write_checkpoint(plan, tmp_path / "r18.pt")
    assert _relative(path, source, 64) <= 1e-5


def test_folders_that_cannot_be_built_by_name_are_refused(tmp_path):
    source = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, num_classes=0)
    save_for_hf(source, str(tmp_path / "hf"), model_args={"img_size": 32, "reg_tokens": 2},
                safe_serialization=True)
    with pytest.raises(LayoutError, match="model_args reg_tokens change"):
        run_to_end(analyze([str(tmp_path / "hf")]))
    (tmp_path / "empty").mkdir()
    with pytest.raises(LayoutError, match="not a timm Hugging Face folder"):
        run_to_end(analyze([str(tmp_path / "empty")]))
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    config["model_args"] = {"global_pool": "avgmax"}
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    with pytest.raises(LayoutError, match="global_pool 'avgmax'"):
        run_to_end(analyze([str(tmp_path / "hf")]))

"""timm CNNs as backbones (``timm:NAME``, core/models/timm_backbones.py): features, metadata,
local weights only, and nothing reaching the network."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from dmlviewer.core.models import (BACKBONES, CheckpointError, build_model, default_config, load_checkpoint,
                                   save_checkpoint)

timm = pytest.importorskip("timm")


@pytest.mark.parametrize("name", ["resnet18", "efficientnet_b0"])
def test_features_are_timms_last_map_with_its_metadata(name, randomize):
    model = build_model(default_config(backbone=f"timm:{name}", dim=16, image_size=96)).eval()
    randomize(model)
    reference = timm.create_model(name).eval()
    missing, unexpected = reference.load_state_dict(model.backbone.net.state_dict(), strict=False)
    assert not unexpected and all(k.startswith(reference.pretrained_cfg["classifier"]) for k in missing)
    x = torch.randn(2, 3, 96, 96)
    with torch.no_grad():
        out = model(x)
        expected = reference.forward_features(x)
    assert torch.equal(out.feature_map, expected)
    assert model.backbone.channels == reference.num_features == expected.shape[1]
    assert model.backbone.stride == reference.feature_info[-1]["reduction"] == 32
    assert not any(k.startswith(("backbone.net.fc.", "backbone.net.classifier.")) for k in model.state_dict())


def test_checkpoint_round_trip_and_pretrained_file(tmp_path, randomize):
    save_file = pytest.importorskip("safetensors.torch").save_file

    source = randomize(timm.create_model("resnet18", num_classes=10)).eval()
    save_file(source.state_dict(), str(tmp_path / "model.safetensors"))
    model = build_model(default_config(backbone="timm:resnet18", pretrained=str(tmp_path / "model.safetensors"),
                                       dim=8, image_size=64)).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(model(x).feature_map, source.forward_features(x))
    save_checkpoint(tmp_path / "ckpt.pt", model)
    loaded, info = load_checkpoint(tmp_path / "ckpt.pt")
    assert info["config"]["backbone"] == "timm:resnet18"
    with torch.no_grad():
        assert torch.equal(loaded(x).embedding_raw, model(x).embedding_raw)
    torch.save(timm.create_model("resnet34").state_dict(), tmp_path / "other.pth")
    with pytest.raises(CheckpointError, match="does not match backbone timm:resnet18"):
        build_model(default_config(backbone="timm:resnet18", pretrained=str(tmp_path / "other.pth")))


def test_names_that_are_not_timm_cnns():
    with pytest.raises(ValueError, match="not a convolutional network"):  # core/models/vit.py's
        BACKBONES["timm:vit_tiny_patch16_224"]
    assert "timm:vit_tiny_patch16_224" not in BACKBONES
    with pytest.raises(ValueError, match="timm has no model 'no_such_net'"):
        BACKBONES["timm:no_such_net"]
    with pytest.raises(ValueError, match="unknown backbone 'timm:no_such_net'"):
        build_model(default_config(backbone="timm:no_such_net"))
    assert "resnet18" in BACKBONES and "timm:resnet18" in BACKBONES and "elsewhere:resnet18" not in BACKBONES
    assert not any(name.startswith("timm:") for name in BACKBONES)  # listings show the fixed ones only
    with pytest.raises(ValueError, match="has no map"):  # intermediate maps: only "last"
        build_model(default_config(backbone="timm:resnet18", multilayer=["layer3"]))


@pytest.mark.slow
def test_nothing_reaches_the_network(tmp_path):
    """Build, load local weights, look for ImageNet weights and recognize a file with every socket
    call refused: nothing may even try (HF_HUB_OFFLINE is set by us, not by the environment)."""
    torch.save(timm.create_model("mobilenetv2_100", num_classes=8).state_dict(), tmp_path / "w.pth")
    code = textwrap.dedent(f"""
        import os, socket
        tried = []
        def refuse(*args, **kwargs):
            tried.append(args)
            raise OSError("network is unreachable (test)")
        socket.socket.connect = socket.socket.connect_ex = refuse
        socket.create_connection = socket.getaddrinfo = refuse
        from dmlviewer.core.models import build_model, default_config
        from dmlviewer.core.models.importing import analyze
        from dmlviewer.core.progress import run_to_end
        model = build_model(default_config(backbone="timm:mobilenetv2_100", pretrained={str(tmp_path / 'w.pth')!r},
                                           image_size=64))
        try:
            build_model(default_config(backbone="timm:mobilenetv2_100", pretrained="imagenet"))
            raise SystemExit("imagenet weights found in an empty cache")
        except FileNotFoundError as exc:
            print("MISSING", exc)
        plan = run_to_end(analyze([{str(tmp_path / 'w.pth')!r}]))
        print("ARCH", plan.arch, "OFFLINE", os.environ.get("HF_HUB_OFFLINE"), "TRIED", len(tried))
    """)
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("HF_")}
    env["HF_HOME"] = str(tmp_path / "hf")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "ARCH timm:mobilenetv2_100 OFFLINE 1 TRIED 0" in run.stdout
    assert "timm/mobilenetv2_100" in run.stdout and str(tmp_path / "hf") in run.stdout

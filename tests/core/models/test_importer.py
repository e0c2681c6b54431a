"""Importing weights files trained elsewhere (core/models/importer.py): each source module is
built the other library's way, saved as that library saves it, imported, and the dmlviewer
model's embeddings are compared with the source module's (max |difference| <= 1e-5)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision
from torch import nn

from dmlviewer.core.explain import explain_pair
from dmlviewer.core.models import CheckpointError, load_checkpoint
from dmlviewer.core.models.importing import (TIMM_SHORTLIST, LayoutError, analyze, candidate, read_sources,
                                            write_checkpoint)
from dmlviewer.core.progress import run_to_end

SIZE = 64


class PmlMLP(nn.Module):
    """pytorch-metric-learning's example embedder (its docs and notebooks): a ReLU before every
    Linear but the last; ``last_linear`` aliases the last Linear, so it is saved twice."""

    def __init__(self, layer_sizes: list[int], final_relu: bool = False) -> None:
        super().__init__()
        layers = []
        num_layers = len(layer_sizes) - 1
        final_relu_layer = num_layers if final_relu else num_layers - 1
        for i in range(num_layers):
            if i < final_relu_layer:
                layers.append(nn.ReLU(inplace=False))
            layers.append(nn.Linear(layer_sizes[i], layer_sizes[i + 1]))
        self.net = nn.Sequential(*layers)
        self.last_linear = self.net[-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _import(tmp_path, files, **kwargs):
    plan = run_to_end(analyze([str(f) for f in files], image_size=SIZE, **kwargs))
    path, diff = write_checkpoint(plan, tmp_path / "imported.pt")
    model, info = load_checkpoint(path)
    return plan, model, info, diff


def _max_diff(model, reference, seed: int = 0) -> float:
    """Max |embedding_raw - source output|, relative to the output's scale where that exceeds 1
    (folded layers round differently in float32); the normalized embeddings agree to 1e-5."""
    x = torch.randn(4, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        ours = model(x)
        theirs = reference(x)
    normalized = float((ours.embedding - nn.functional.normalize(theirs, dim=1)).abs().max())
    assert normalized <= 1e-5
    raw = float((ours.embedding_raw - theirs).abs().max())
    return raw / max(1.0, float(theirs.abs().max()))


def _completeness(model) -> float:
    rng = np.random.default_rng(0)
    q, r = (rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8) for _ in range(2))
    e = explain_pair(model, q, r)
    total = float(e.point_to_point.astype(np.float64).sum()) + e.bias_query + e.bias_reference + e.bias_both
    return abs(total - e.similarity)


def _resnet18_fc(randomize):
    torch.manual_seed(0)
    net = torchvision.models.resnet18()
    net.fc = nn.Linear(512, 128)
    return randomize(net).eval()


def test_torchvision_resnet18_with_fc_state_dict(tmp_path, randomize):
    source = _resnet18_fc(randomize)
    torch.save(source.state_dict(), tmp_path / "model.pth")
    plan, model, info, diff = _import(tmp_path, [tmp_path / "model.pth"])
    assert plan.arch == "resnet18" and plan.head_spec == "fc" and plan.head_auto
    assert plan.config["dim"] == 128 and plan.config["hidden"] == 0 and not plan.config["bn"]
    assert plan.unmatched == {}
    assert plan.head_mapping == {"fc.weight": "head.projection.out.weight", "fc.bias": "head.projection.out.bias"}
    assert len(plan.backbone_mapping) == 120
    assert _max_diff(model, source) <= 1e-5
    assert _completeness(model) <= 1e-5
    assert info["extra"]["import"]["arch"] == "resnet18" and diff == 0.0


@pytest.mark.parametrize("sizes", [[512, 64], [512, 256, 64]])
def test_pml_trunk_and_embedder_files(tmp_path, randomize, sizes):
    torch.manual_seed(1)
    trunk = torchvision.models.resnet18()
    trunk.fc = nn.Identity()  # as pytorch-metric-learning's examples do
    randomize(trunk).eval()
    embedder = PmlMLP(sizes).eval()
    # pytorch_metric_learning.utils.common_functions.save_model: torch.save(model.state_dict(), path)
    torch.save(trunk.state_dict(), tmp_path / "trunk_best7.pth")
    torch.save(embedder.state_dict(), tmp_path / "embedder_best7.pth")
    # given in the "wrong" order: the backbone's file is put first
    plan, model, _, _ = _import(tmp_path, [tmp_path / "embedder_best7.pth", tmp_path / "trunk_best7.pth"])
    assert plan.arch == "resnet18"
    assert set(plan.unmatched) == {"last_linear.weight", "last_linear.bias"}  # the alias
    if len(sizes) == 3:  # ReLU (index 0, no weights), Linear, Linear: folded into one Linear
        assert plan.head_spec == "relu,net.1,net.2"
        assert any("assumed for net.0" in n for n in plan.notes)
        assert plan.config["hidden"] == 0 and plan.config["dim"] == 64
    else:
        assert plan.head_spec == "net.0"
    diff = _max_diff(model, lambda x: embedder(trunk(x)))
    assert diff <= 1e-5
    assert _completeness(model) <= 1e-5


def test_ddp_module_prefix_inside_a_wrapper(tmp_path, randomize):
    source = _resnet18_fc(randomize)
    state = {f"module.{k}": v for k, v in source.state_dict().items()}
    torch.save({"epoch": 12, "state_dict": state, "best_recall": 0.61}, tmp_path / "ddp.pth.tar")
    plan, model, _, _ = _import(tmp_path, [tmp_path / "ddp.pth.tar"])
    assert plan.arch == "resnet18" and plan.head_spec == "fc"
    assert any("stripped the prefix 'module.'" in n for n in plan.notes)
    assert set(plan.unmatched) == {"ddp.pth.tar['epoch']", "ddp.pth.tar['best_recall']"}
    assert _max_diff(model, source) <= 1e-5


def test_head_with_batchnorms_relu_and_dropout_folds_exactly(tmp_path, randomize):
    torch.manual_seed(2)
    source = torchvision.models.resnet18()
    source.fc = nn.Sequential(nn.BatchNorm1d(512), nn.Linear(512, 96), nn.BatchNorm1d(96), nn.ReLU(),
                              nn.Dropout(0.3), nn.Linear(96, 32), nn.BatchNorm1d(32))
    randomize(source).eval()
    torch.save(source.state_dict(), tmp_path / "bn.pth")
    plan, model, _, _ = _import(tmp_path, [tmp_path / "bn.pth"])
    assert plan.head_spec == "fc.0,fc.1,fc.2,relu,fc.5,fc.6"
    assert (plan.config["bn"], plan.config["hidden"], plan.config["dim"]) == (True, 96, 32)
    assert plan.head_mapping["fc.0.running_var"] == "head.projection.bn.running_var"
    assert plan.head_mapping["fc.2.weight"] == "folded into head.projection.hidden"
    assert _max_diff(model, source) <= 1e-5
    assert _completeness(model) <= 1e-5


def test_gem_pooling_and_bare_trunk(tmp_path, randomize):
    class GeM(nn.Module):  # as in cirtorch: clamp(min=1e-6), p a parameter of shape [1]
        def __init__(self) -> None:
            super().__init__()
            self.p = nn.Parameter(torch.ones(1) * 3.5)

        def forward(self, x):
            return x.clamp(min=1e-6).pow(self.p).mean((-2, -1), keepdim=True).pow(1.0 / self.p)

    torch.manual_seed(3)
    source = torchvision.models.resnet18()
    source.avgpool = GeM()
    source.fc = nn.Linear(512, 32)
    randomize(source).eval()
    torch.save(source.state_dict(), tmp_path / "gem.pth")
    plan, model, _, _ = _import(tmp_path, [tmp_path / "gem.pth"])
    assert plan.head_spec == "gem=avgpool,fc"
    assert plan.config["pooling"] == "gem" and plan.config["gem_p"] == pytest.approx(3.5)
    assert _max_diff(model, source) <= 1e-5

    trunk = randomize(torchvision.models.resnet18()).eval()
    trunk.fc = nn.Identity()
    torch.save(trunk.state_dict(), tmp_path / "trunk.pth")
    plan, model, _, _ = _import(tmp_path, [tmp_path / "trunk.pth"])
    assert plan.head_spec == "none" and plan.config["dim"] == 0
    assert _max_diff(model, trunk) <= 1e-5


def test_head_spec_overrides_and_refusals(tmp_path, randomize):
    torch.manual_seed(4)
    source = torchvision.models.resnet18()
    source.fc = nn.Sequential(nn.Linear(512, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8))
    randomize(source).eval()
    torch.save(source.state_dict(), tmp_path / "deep.pth")
    with pytest.raises(LayoutError, match="2 ReLU layers"):
        run_to_end(analyze([str(tmp_path / "deep.pth")]))
    # the user keeps the first two layers only (the rest is e.g. a classifier)
    plan = run_to_end(analyze([str(tmp_path / "deep.pth")], head="fc.0,relu,fc.2", image_size=SIZE))
    assert set(plan.unmatched) == {"fc.4.weight", "fc.4.bias"}
    _, diff = write_checkpoint(plan, tmp_path / "two.pt")
    model, _ = load_checkpoint(tmp_path / "two.pt")
    assert _max_diff(model, lambda x: source.fc[:3](torch.flatten(source.avgpool(_trunk(source, x)), 1))) <= 1e-5
    with pytest.raises(LayoutError, match="ends with a ReLU"):
        run_to_end(analyze([str(tmp_path / "deep.pth")], head="fc.0,relu"))
    with pytest.raises(LayoutError, match="no module 'fc.9'"):
        run_to_end(analyze([str(tmp_path / "deep.pth")], head="fc.0,fc.9"))
    with pytest.raises(LayoutError, match="takes 64 inputs but receives 512"):
        run_to_end(analyze([str(tmp_path / "deep.pth")], head="fc.2"))


def _trunk(net, x):
    x = net.maxpool(net.relu(net.bn1(net.conv1(x))))
    return net.layer4(net.layer3(net.layer2(net.layer1(x))))


def test_unknown_layout_lists_unmatched_keys_and_closest_layouts(tmp_path):
    torch.save({"encoder.stem.weight": torch.randn(8, 3, 3, 3), "encoder.proj": torch.randn(4, 8)},
               tmp_path / "odd.pth")
    with pytest.raises(LayoutError, match="unknown layout") as err:
        run_to_end(analyze([str(tmp_path / "odd.pth")]))
    assert "encoder.proj" in str(err.value) and "encoder.stem.weight" in str(err.value)
    assert set(err.value.unmatched) == {"encoder.stem.weight", "encoder.proj"}
    assert "\n" not in str(err.value)

    state = torchvision.models.resnet34().state_dict()
    del state["layer3.2.conv1.weight"]  # a damaged resnet34: it still holds all of resnet18's keys
    torch.save(state, tmp_path / "r34.pth")
    with pytest.raises(LayoutError, match="fit resnet18 but hold more layers") as err:
        run_to_end(analyze([str(tmp_path / "r34.pth")]))
    assert err.value.ranking[0][:3] == ("resnet34", 215, 216)  # ranked: the closest first
    assert "missing layer3.2.conv1.weight" in str(err.value)


def test_nonlinear_heads_of_known_architectures_are_kept_or_refused_when_skipped(tmp_path):
    net = torchvision.models.mobilenet_v3_large(num_classes=64)
    torch.save(net.state_dict(), tmp_path / "mbv3.pth")
    # kept layer by layer (first-order rule; test_importer_families.py checks the embeddings)
    kept = run_to_end(analyze([str(tmp_path / "mbv3.pth")]))
    assert kept.config["head_layers"] == ["linear:1280", "hardswish", "linear:64"]
    # a given head that leaves the Hardswish out would compute something else: refused
    with pytest.raises(LayoutError, match=r"classifier.1 \(Hardswish\)"):
        run_to_end(analyze([str(tmp_path / "mbv3.pth")], head="classifier.0,classifier.3"))
    # the pooled feature alone is fine
    plan = run_to_end(analyze([str(tmp_path / "mbv3.pth")], head="none"))
    assert plan.arch == "mobilenet_v3_large" and plan.config["dim"] == 0
    assert len(plan.unmatched) == 4


def test_two_copies_need_a_prefix(tmp_path, randomize):
    student = randomize(torchvision.models.resnet18(), seed=1).eval()
    teacher = randomize(torchvision.models.resnet18(), seed=2).eval()
    student.fc = teacher.fc = nn.Identity()
    torch.save({"student": {f"backbone.{k}": v for k, v in student.state_dict().items()},
                "teacher": {f"backbone.{k}": v for k, v in teacher.state_dict().items()}, "epoch": 3},
               tmp_path / "ssl.pth")
    with pytest.raises(LayoutError, match="several prefixes"):
        run_to_end(analyze([str(tmp_path / "ssl.pth")]))
    plan, model, _, _ = _import(tmp_path, [tmp_path / "ssl.pth"], prefix="teacher.backbone.")
    assert sum("another copy" in why for why in plan.unmatched.values()) == 120
    assert _max_diff(model, teacher) <= 1e-5


def test_pickled_modules_and_checkpoints_are_refused(tmp_path):
    torch.save(nn.Linear(2, 2), tmp_path / "module.pth")  # a pickled module, not a state dict
    with pytest.raises(CheckpointError, match="weights_only|refus"):  # backbones.read_weights_file words it
        read_sources([tmp_path / "module.pth"])
    with pytest.raises(CheckpointError, match="both hold the keys"):
        torch.save({"a.weight": torch.ones(1)}, tmp_path / "x.pth")
        read_sources([tmp_path / "x.pth", tmp_path / "x.pth"])


def test_safetensors_input(tmp_path, randomize):
    save_file = pytest.importorskip("safetensors.torch").save_file

    source = _resnet18_fc(randomize)
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(tmp_path / "model.safetensors"))
    plan, model, _, _ = _import(tmp_path, [tmp_path / "model.safetensors"])
    assert plan.arch == "resnet18"
    assert _max_diff(model, source) <= 1e-5


# --------------------------------------------------------------------------- timm

def test_timm_cnn_recognized_from_its_state_dict(tmp_path, randomize):
    timm = pytest.importorskip("timm")
    torch.manual_seed(5)
    source = randomize(timm.create_model("mobilenetv2_100", num_classes=48)).eval()
    torch.save(source.state_dict(), tmp_path / "mnv2.pth")
    plan, model, _, _ = _import(tmp_path, [tmp_path / "mnv2.pth"])
    assert plan.arch == "timm:mobilenetv2_100" and plan.head_spec == "classifier"
    assert plan.config["mean"] == pytest.approx(list(source.pretrained_cfg["mean"]))
    assert _max_diff(model, source) <= 1e-5
    assert _completeness(model) <= 1e-5


def test_timm_twins_need_arch_and_negative_features_keep_a_leading_relu(tmp_path, randomize):
    timm = pytest.importorskip("timm")
    torch.manual_seed(6)
    trunk = randomize(timm.create_model("efficientnet_b0", num_classes=0)).eval()
    embedder = PmlMLP([1280, 96, 24]).eval()  # ReLU first: efficientnet's features end in SiLU
    torch.save(trunk.state_dict(), tmp_path / "trunk.pth")
    torch.save(embedder.state_dict(), tmp_path / "embedder.pth")
    files = [str(tmp_path / "trunk.pth"), str(tmp_path / "embedder.pth")]
    with pytest.raises(LayoutError, match="timm:efficientnet_b0 and timm:tf_efficientnet_b0"):
        run_to_end(analyze(files))  # same keys, different padding: the file cannot tell
    plan, model, _, _ = _import(tmp_path, files, arch="timm:efficientnet_b0")
    assert plan.config["hidden"] == 1280  # the ReLU kept exactly as an identity hidden layer
    diff = _max_diff(model, lambda x: embedder(trunk(x)))
    assert diff <= 1e-5
    assert _completeness(model) <= 1e-5


def test_a_per_feature_affine_layer_the_architecture_does_not_define_is_refused(tmp_path):
    """A LayerNorm is taken only where the architecture's own head defines one (ConvNeXt's
    head.norm, test_importer_families.py); a 1-D weight and bias elsewhere cannot be told apart."""
    state = torchvision.models.resnet18().state_dict()
    del state["fc.weight"], state["fc.bias"]
    state.update({"norm.weight": torch.ones(512), "norm.bias": torch.zeros(512), "fc.weight": torch.randn(16, 512)})
    torch.save(state, tmp_path / "r18.pth")
    with pytest.raises(LayoutError, match="cannot tell what norm"):
        run_to_end(analyze([str(tmp_path / "r18.pth")]))


def test_timm_resnets_equal_torchvision_ones():
    """Why timm's resnet18/34/50/101 are not in the shortlist: same keys, same function."""
    timm = pytest.importorskip("timm")
    for name in ("resnet18", "resnet50"):
        tv = torchvision.models.get_model(name).eval()
        tm = timm.create_model(name).eval()
        tm.load_state_dict(tv.state_dict())
        x = torch.randn(2, 3, SIZE, SIZE)
        with torch.no_grad():
            assert torch.allclose(tv(x), tm(x), atol=1e-5)


@pytest.mark.slow
def test_shortlist_never_holds_every_key_of_a_builtin_backbone():
    """The timm shortlist is tried only when no built-in backbone fits: sound because no
    shortlist model holds all keys (with their shapes) of a built-in one."""
    pytest.importorskip("timm")
    from dmlviewer.core.models import BACKBONES

    builtins = {n: candidate(n).keys for n in BACKBONES}
    for name in TIMM_SHORTLIST:
        keys = candidate(f"timm:{name}").keys
        for b, bkeys in builtins.items():
            assert not all(keys.get(k) == s for k, s in bkeys.items()), (name, b)

"""Never a silently different embedding (issues 22.3 and 26.2): an embedding layer followed by a
classifier stops at the embedding, a head that skips a layer of the architecture is refused,
what a weights file cannot tell is stated as an assumption, a reference file of the user's own
embeddings is compared with, and NaN weights are refused. Each source is built the other
library's way with random weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision
from torch import nn

from dmlviewer.core.models import CheckpointError, load_checkpoint
from dmlviewer.core.models.importing import LayoutError, analyze, write_checkpoint
from dmlviewer.core.progress import run_to_end

SIZE = 64


def _plan(files, **kwargs):
    return run_to_end(analyze([str(f) for f in files], image_size=SIZE, **kwargs))


def _embeddings(module, x):
    with torch.no_grad():
        return module(x)


def _imported_embeddings(path, x):
    model, info = load_checkpoint(path)
    with torch.no_grad():
        return model(x).embedding_raw, info


def _relative(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max())


class SoftmaxFamilyNet(nn.Module):
    """The usual layout of ArcFace/Softmax-family DML code: a trunk, an ``embed`` Linear (and
    optionally a BatchNorm), and a classifier to the classes used only by the training loss; the
    embedding is the output before the classifier."""

    def __init__(self, classifier: str, bias: bool, bn: bool) -> None:
        super().__init__()
        self.backbone = torchvision.models.resnet18()
        self.backbone.fc = nn.Identity()
        self.embed = nn.Linear(512, 128)
        self.bn = nn.BatchNorm1d(128) if bn else None
        setattr(self, classifier, nn.Linear(128, 100, bias=bias))

    def forward(self, x):
        z = self.embed(self.backbone(x))
        return self.bn(z) if self.bn is not None else z


@pytest.mark.parametrize("classifier, bias, bn", [
    ("classifier", True, False),   # Softmax / NormFace layout
    ("classifier", True, True),    # embed -> BN -> classifier (BNNeck-like)
    ("arcface", False, False),     # an ArcFace weight matrix named as such
    ("head", False, False),        # a bias-free class-proxy matrix under a neutral name
])
def test_embedding_followed_by_a_classifier_imports_the_embedding(tmp_path, randomize, classifier, bias, bn):
    torch.manual_seed(0)
    source = randomize(SoftmaxFamilyNet(classifier, bias, bn)).eval()
    torch.save(source.state_dict(), tmp_path / "model.pth")
    plan = _plan([tmp_path / "model.pth"])
    assert plan.config["dim"] == 128 and plan.arch == "resnet18"
    assert plan.head_spec == ("embed,bn" if bn else "embed")
    line = plan.assumption_line()
    assert f"classifier {classifier} (Linear 128->100" in line and "left out" in line
    assert f"{classifier}.weight" in plan.unmatched
    path, _ = write_checkpoint(plan, tmp_path / "imported.pt")
    x = torch.randn(3, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    ours, info = _imported_embeddings(path, x)
    assert _relative(ours, _embeddings(source, x)) <= 1e-5
    assert any("left out" in a for a in info["extra"]["import"]["assumptions"])


def test_a_two_layer_embedder_is_not_taken_for_a_classifier(tmp_path, randomize):
    """pytorch-metric-learning's MLP (ReLU between Linears, biases, neutral names) stays whole."""
    torch.manual_seed(1)
    trunk = torchvision.models.resnet18()
    trunk.fc = nn.Sequential(nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 64))
    torch.save(randomize(trunk).state_dict(), tmp_path / "m.pth")
    plan = _plan([tmp_path / "m.pth"])
    assert plan.config["dim"] == 64 and plan.config["hidden"] == 256
    assert "left out" not in plan.assumption_line()


def test_convnext_head_fc_includes_its_layernorm_and_a_skipped_hardswish_is_refused_or_forced_loudly(tmp_path):
    timm = pytest.importorskip("timm")
    torch.manual_seed(2)
    source = timm.create_model("convnext_tiny", num_classes=16).eval()
    torch.save(source.state_dict(), tmp_path / "cnx.pth")
    plan = _plan([tmp_path / "cnx.pth"], head="head.fc")  # head.norm is not silently dropped
    assert [la.module for la in plan.layers] == ["head.norm", "head.fc"]
    assert any("head.norm (LayerNorm, eps 1e-06) included" in n for n in plan.notes)
    torch.save(torchvision.models.mobilenet_v3_large(num_classes=16).state_dict(), tmp_path / "mbv3.pth")
    with pytest.raises(LayoutError, match=r"runs classifier\.1 \(Hardswish\) between the pooling and classifier\.3"):
        _plan([tmp_path / "mbv3.pth"], head="classifier.0,classifier.3")
    plan = _plan([tmp_path / "mbv3.pth"], head="classifier.0,classifier.3", force=True)
    assert "LEFT OUT classifier.1 (Hardswish" in plan.assumption_line()


class OmlGEM(nn.Module):
    """OML's ``GEM``: the exponent is a plain float, not a tensor of the state dict."""

    def __init__(self, p: float, eps: float = 1e-6) -> None:
        super().__init__()
        self.p, self.eps = p, eps

    def forward(self, x):
        x = x.clamp(min=self.eps).pow(self.p)
        return nn.functional.adaptive_avg_pool2d(x, 1).pow(1.0 / self.p).flatten(1)


class OmlResnetExtractor(nn.Module):
    """OML's ``ResnetExtractor`` (gem_p=3, remove_fc=True): a torchvision resnet under ``model``."""

    def __init__(self, gem_p: float) -> None:
        super().__init__()
        self.model = torchvision.models.resnet18()
        self.model.avgpool = OmlGEM(gem_p)
        self.model.fc = nn.Identity()

    def forward(self, x):
        return self.model(x)


@pytest.fixture
def oml_gem(tmp_path, randomize):
    torch.manual_seed(3)
    source = randomize(OmlResnetExtractor(3.0)).eval()
    torch.save(source.state_dict(), tmp_path / "oml.pth")
    images = torch.randn(4, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(4))
    np.savez(tmp_path / "reference.npz", images=images.numpy(), embeddings=_embeddings(source, images).numpy())
    return source, tmp_path / "oml.pth", tmp_path / "reference.npz"


def test_pooling_the_file_cannot_tell_is_an_assumption_and_a_reference_refuses_gap(tmp_path, oml_gem):
    source, weights, reference = oml_gem
    plan = _plan([weights])
    assert plan.config["pooling"] == "gap"
    assert plan.assumption_line().startswith("ASSUMED") and "pooling gap" in plan.assumption_line()
    assert plan.report().splitlines()[-1] == plan.assumption_line()
    with pytest.raises(LayoutError, match="DIFFER.*not written"):
        write_checkpoint(plan, tmp_path / "gap.pt", check_against=reference)
    assert not (tmp_path / "gap.pt").exists()
    path, _ = write_checkpoint(plan, tmp_path / "forced.pt", check_against=reference, force=True)
    check = load_checkpoint(path)[1]["extra"]["import"]["reference_check"]
    assert check["forced"] and check["relative_diff"] > 1e-3


def test_stated_gem_pooling_matches_the_reference(tmp_path, oml_gem):
    source, weights, reference = oml_gem
    plan = _plan([weights], pooling="gem", gem_p=3.0)
    assert "pooling" not in plan.assumption_line().split(":", 1)[1].split(";")[0]
    path, _ = write_checkpoint(plan, tmp_path / "gem.pt", check_against=reference)
    assert plan.reference_check["passed"] and plan.reference_check["relative_diff"] <= 1e-5
    x = torch.randn(2, 3, SIZE, SIZE)
    ours, _ = _imported_embeddings(path, x)
    assert _relative(ours, _embeddings(source, x)) <= 1e-5


def test_pooling_options_are_checked(oml_gem):
    _, weights, _ = oml_gem
    with pytest.raises(LayoutError, match="gem_p needs pooling gem"):
        _plan([weights], gem_p=3.0)
    with pytest.raises(LayoutError, match="needs gem_p"):
        _plan([weights], pooling="gem")
    with pytest.raises(LayoutError, match="given twice"):
        _plan([weights], pooling="gmp", head="gap")


def test_bad_reference_files_are_one_line(tmp_path, oml_gem):
    _, weights, _ = oml_gem
    plan = _plan([weights])
    torch.save({"images": torch.randn(2, 3, SIZE, SIZE), "embeddings": torch.randn(3, 512)}, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match="same N"):
        write_checkpoint(plan, tmp_path / "x.pt", check_against=tmp_path / "bad.pt")
    torch.save({"images": torch.randn(2, 3, SIZE, SIZE), "embeddings": torch.randn(2, 7)}, tmp_path / "dim.pt")
    with pytest.raises(CheckpointError, match="7 dimensions"):
        write_checkpoint(plan, tmp_path / "x.pt", check_against=tmp_path / "dim.pt")
    assert not (tmp_path / "x.pt").exists()


def test_nan_weights_are_refused_naming_the_tensor(tmp_path):
    state = torchvision.models.resnet18().state_dict()
    state["layer3.0.conv2.weight"][0, 0, 0, 0] = float("nan")
    torch.save(state, tmp_path / "nan.pth")
    with pytest.raises(CheckpointError, match=r"layer3\.0\.conv2\.weight holds 1 NaN or infinite"):
        _plan([tmp_path / "nan.pth"])


class CirtorchGeM(nn.Module):
    """cnnimageretrieval-pytorch's GeM: ``p`` is a parameter of shape (1,)."""

    def __init__(self, p: float = 3.0, eps: float = 1e-6) -> None:
        super().__init__()
        self.p, self.eps = nn.Parameter(torch.ones(1) * p), eps

    def forward(self, x):
        return nn.functional.avg_pool2d(x.clamp(min=self.eps).pow(self.p), x.shape[-2:]).pow(1.0 / self.p)


class ImageRetrievalNet(nn.Module):
    """cnnimageretrieval-pytorch's ``ImageRetrievalNet`` for a ResNet: ``features`` holds the
    resnet's children but avgpool and fc, L2N after the pooling and after ``whiten``; the output
    is D x N (descriptors as columns)."""

    def __init__(self, p: float | None, whiten: bool) -> None:
        super().__init__()
        self.features = nn.Sequential(*list(torchvision.models.resnet18().children())[:-2])
        self.pool = CirtorchGeM(p) if p is not None else nn.AdaptiveMaxPool2d(1)  # None: MAC
        self.whiten = nn.Linear(512, 512, bias=True) if whiten else None

    def forward(self, x):
        o = nn.functional.normalize(self.pool(self.features(x)), dim=1).squeeze(-1).squeeze(-1)
        if self.whiten is not None:
            o = nn.functional.normalize(self.whiten(o), dim=1)
        return o.permute(1, 0)


def test_cnnimageretrieval_gem_resnet(tmp_path, randomize):
    torch.manual_seed(8)
    source = randomize(ImageRetrievalNet(2.5, whiten=False)).eval()
    meta = {"architecture": "resnet18", "pooling": "gem", "whitening": False, "outputdim": 512}
    torch.save({"epoch": 3, "meta": meta, "state_dict": source.state_dict()}, tmp_path / "cirtorch.pth")
    plan = _plan([tmp_path / "cirtorch.pth"])
    assert plan.arch == "resnet18" and plan.config["pooling"] == "gem"
    assert plan.config["gem_p"] == pytest.approx(2.5) and "pooling" not in plan.assumption_line()
    path, _ = write_checkpoint(plan, tmp_path / "c.pt")
    model, _ = load_checkpoint(path)
    x = torch.randn(2, 3, SIZE, SIZE)
    with torch.no_grad():
        assert float((model(x).embedding - source(x).T).abs().max()) <= 1e-5


def test_cnnimageretrieval_meta_gives_pooling_and_normalization(tmp_path, randomize):
    """cnnimageretrieval saves its pooling and input normalization in ``meta``, not in the
    weights: a MAC model with its own mean/std imports with both, with no assumption about them."""
    torch.manual_seed(10)
    source = randomize(ImageRetrievalNet(None, whiten=False)).eval()
    meta = {"architecture": "resnet18", "local_whitening": False, "pooling": "mac", "regional": False,
            "whitening": False, "mean": [0.5, 0.4, 0.3], "std": [0.2, 0.25, 0.3], "outputdim": 512}
    torch.save({"epoch": 1, "meta": meta, "state_dict": source.state_dict()}, tmp_path / "mac.pth")
    plan = _plan([tmp_path / "mac.pth"])
    assert plan.config["pooling"] == "gmp"
    assert plan.config["mean"] == pytest.approx(meta["mean"]) and plan.config["std"] == pytest.approx(meta["std"])
    assert "pooling" not in plan.assumption_line() and "normalization" not in plan.assumption_line()
    model, _ = load_checkpoint(write_checkpoint(plan, tmp_path / "c.pt")[0])
    x = torch.randn(2, 3, SIZE, SIZE)
    with torch.no_grad():
        assert float((model(x).embedding - source(x).T).abs().max()) <= 1e-5
    given = _plan([tmp_path / "mac.pth"], mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), pooling="gap")
    assert given.config["mean"] == pytest.approx([0.485, 0.456, 0.406]) and given.config["pooling"] == "gap"
    for change, message in (({"regional": True}, "regional pooling"), ({"local_whitening": True}, "local whitening"),
                            ({"pooling": "rmac"}, "'rmac'")):
        torch.save({"meta": {**meta, **change}, "state_dict": source.state_dict()}, tmp_path / "other.pth")
        with pytest.raises(LayoutError, match=message):
            _plan([tmp_path / "other.pth"])


def test_cnnimageretrieval_whitening_after_normalization_is_refused(tmp_path, randomize):
    torch.manual_seed(9)
    source = randomize(ImageRetrievalNet(3.0, whiten=True)).eval()
    torch.save({"state_dict": source.state_dict()}, tmp_path / "cirtorch_w.pth")
    with pytest.raises(LayoutError, match="runs on the L2-normalized pooled vector"):
        _plan([tmp_path / "cirtorch_w.pth"])
    plan = _plan([tmp_path / "cirtorch_w.pth"], head="gem=pool")  # the descriptor before whitening
    path, _ = write_checkpoint(plan, tmp_path / "c.pt")
    model, _ = load_checkpoint(path)
    x = torch.randn(2, 3, SIZE, SIZE)
    with torch.no_grad():
        before = nn.functional.normalize(source.pool(source.features(x)).flatten(1), dim=1)
        assert float((model(x).embedding - before).abs().max()) <= 1e-5


def test_a_hostile_reference_file_is_one_line_and_nothing_is_allocated_or_run(tmp_path):
    """``--check-against`` (and the dialog's Check against) reads files we did not write: a text
    file, an .npz whose header claims 12 GB, an object array and a pickle that would run code
    are refused in one line, before anything is allocated or run."""
    import os
    import zipfile

    from dmlviewer.core.models.importing import read_reference

    (tmp_path / "text.npz").write_text("hello")
    with zipfile.ZipFile(tmp_path / "huge.npz", "w") as archive:  # a header only: no data behind it
        with archive.open("images.npy", "w") as member:
            header = np.lib.format.header_data_from_array_1_0(np.zeros(1, np.float32))
            np.lib.format.write_array_header_1_0(member, {**header, "shape": (20000, 3, 224, 224)})
    np.savez(tmp_path / "objects.npz", images=np.array([{"a": 1}], dtype=object), embeddings=np.zeros((1, 4)))

    class RunsCode:
        def __reduce__(self):
            return (os.mkdir, (str(tmp_path / "ran"),))

    torch.save({"images": RunsCode()}, tmp_path / "payload.pt")
    for name, message in (("text.npz", "not a .npz archive"), ("huge.npz", r"\[20000, 3, 224, 224\].*at most 2 GiB"),
                          ("objects.npz", "object"), ("payload.pt", "nothing in it was run")):
        with pytest.raises(CheckpointError, match=message) as caught:
            read_reference(tmp_path / name)
        assert "\n" not in str(caught.value)
    assert not (tmp_path / "ran").exists()

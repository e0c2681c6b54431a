"""``dmlviewer.view`` (issue 11): the app on a live module and a list of images, not blocking."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision
from PySide6.QtCore import QPointF
from PySide6.QtTest import QTest

import dmlviewer
from dmlviewer.core.session import Session
from dmlviewer.gui.pair.hover_link import QUERY

pytestmark = pytest.mark.gui


def test_view_opens_a_live_module_on_a_list_of_images(qtbot, dialogs, wait_ready):
    torch.manual_seed(0)
    net = torchvision.models.resnet18(num_classes=16).eval()
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (72 + 8 * i, 80, 3), dtype=np.uint8) for i in range(6)]
    session = dmlviewer.view(net, images, feature_layer="layer4", labels=["a", "a", "a", "b", "b", "b"],
                             size=96, block=False)
    window = session.window  # view returns the session, as napari's view_image returns its viewer
    qtbot.addWidget(window)
    try:
        assert isinstance(session, Session) and window.session is session and session.model is window.model
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

        # A notebook sets a display option and the pair on the session: the open window follows.
        session.display.sign = "signed"
        assert window.pair_view.sign_combo.currentData() == "signed" and window.pair_view.sign == "signed"
        session.set_pair(4, 1)
        assert window.pair_view.images.query.shape == images[4].shape
        assert window.pair_view.images.reference.shape == images[1].shape
        wait_ready(window.pair_view)
        session.set_pinned((QUERY, 20.0, 24.0))  # a point pinned from the notebook is pinned on the panes
        assert window.pair_view.link.pinned == (QUERY, 20.0, 24.0) and q.pin is not None
        assert window.pair_view.explanation.similarity == pytest.approx(
            dmlviewer.explain(net, images[4], images[1], feature_layer="layer4", size=96).similarity, abs=1e-4)
        assert dialogs == []
        # A device the model cannot go to, set from the notebook: said once, the previous one back.
        session.set_device("nonsense")
        assert [title for title, _, _ in dialogs] == ["Cannot use device"]
        assert session.device == "cpu" and window.device_combo.currentData() == "cpu"
        assert next(window.model.parameters()).device.type == "cpu"
        window.close()  # the session outlives its window: setting it later reaches no deleted widget
        session.display.sign = "negative"
        session.set_pair(2, 3)
        assert window.pair_view.images.query.shape == images[4].shape  # the closed window no longer follows
        assert window.pair_view.sign_combo.currentData() == "signed"
    finally:
        window.shutdown()

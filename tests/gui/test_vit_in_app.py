"""Vision transformers in the app (issue 22, "Done when"): a timm ViT-S/16 and a DINOv2 with
registers, saved as their libraries save them, imported with ``import-model``, opened from File >
Open Checkpoint and from the last session; hovering the query draws the model's own partial map.

Random weights and small inputs (a 4 x 4 token grid) keep it fast; the 16 x 16 and 37 x 37 grids
are timed by ``dmlviewer bench hover`` (rows ``vit_s16_256`` and ``dinov2_reg4_518``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PySide6.QtWidgets import QFileDialog

from _mouse import hover

from dmlviewer.gui.window import settings

timm = pytest.importorskip("timm")

CASES = {  # name: (timm model, input size giving a 4 x 4 grid)
    "vit_s16": ("vit_small_patch16_224", 64),
    "dinov2_reg4": ("vit_small_patch14_reg4_dinov2", 56),
}


def _imported(tmp_path, name: str, size: int):
    """``(checkpoint, source module)``: the timm model's state dict written by torch.save and
    imported as a user would (``import-model FILE --arch timm:NAME --image-size S``)."""
    from dmlviewer.core.models.importing import analyze, write_checkpoint

    torch.manual_seed(0)
    net = timm.create_model(name, pretrained=False, num_classes=0, img_size=size).eval()
    with torch.no_grad():  # timm starts LayerScale near 1e-5: make the blocks matter
        for key, value in net.state_dict().items():
            if key.endswith(".gamma") or key.endswith("cls_token") or key.endswith("reg_token"):
                value.normal_(0, 0.5)
    weights = tmp_path / f"{name}.pth"
    torch.save(net.state_dict(), weights)
    plan = None
    for event in analyze([weights], arch=f"timm:{name}", image_size=size):
        if event.kind == "done":
            plan = event.data["result"]
    out, _ = write_checkpoint(plan, tmp_path / f"{name}-imported.pt")
    return out, net


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_transformer_opens_from_the_file_menu_and_the_last_session_and_hovers(
        case, qtbot, dialogs, demo_root, tmp_path, monkeypatch, wait_ready):
    from dmlviewer.core.data import load_dataset_image
    from dmlviewer.gui.window.main_window import MainWindow

    name, size = CASES[case]
    checkpoint, net = _imported(tmp_path, name, size)
    window = MainWindow()
    qtbot.addWidget(window)
    window.resize(1366, 768)
    window.show()
    assert window.open_dataset(demo_root)
    monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(lambda *a, **k: (str(checkpoint), "")))
    window.model_menus.open_checkpoint_action.trigger()  # File > Open Checkpoint
    assert dialogs == [] and window.model is not None
    window.set_pair(0, 1)
    wait_ready(window.pair_view, timeout=120000)
    expl = window.pair_view.explanation
    assert tuple(expl.grid_query) == (4, 4)

    # The embedding is the source module's own (the app never computes another one silently).
    image = load_dataset_image(window.dataset, 0)
    with torch.no_grad():
        x = window.model.preprocess(image)
        x = x if x.dim() == 4 else x[None]
        ours = window.model(x).embedding
        theirs = net(x)
    assert torch.allclose(torch.nn.functional.normalize(ours, dim=1), torch.nn.functional.normalize(theirs, dim=1),
                          atol=1e-5)

    # A real mouse move over the query draws that point's partial map on the reference.
    view = window.pair_view
    query, reference = view.panes
    h, w = expl.image_shape_query
    hover(query, view.link, w * 0.2, h * 0.2)  # a move needs a cursor somewhere else first
    assert hover(query, view.link, w * 0.6, h * 0.4) is not None
    assert reference.overlay_shown
    drawn = reference.overlay_image()
    assert drawn.size and np.ptp(drawn[..., :3]) > 0  # a map with structure, not a flat colour
    sha = window.checkpoint_info["sha256"]
    window.close()

    second = MainWindow()
    qtbot.addWidget(second)
    second.show()
    second.open_in_background(last_session=settings.session_values())
    qtbot.waitUntil(lambda: not second.loading, timeout=120000)
    assert dialogs == []
    assert second.checkpoint_info["sha256"] == sha and second.model_source.kind == "checkpoint"
    wait_ready(second.pair_view, timeout=120000)
    assert tuple(second.pair_view.explanation.grid_query) == (4, 4)
    second.shutdown()

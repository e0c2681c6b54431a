"""File > Import Model for a two-branch (cross-view) model (issue 25): the query branch's weights
file in the files list, the reference branch's in the "Reference branch" field, each with its own
input size typed into the dialog; "Import and Open" writes one two-branch checkpoint whose
branches reproduce the source modules, and the app opens it as its model. Branches of different
embedding widths are refused in the dialog and nothing is written."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from tiny_two_branch import save_encoders

QUERY_SHAPE, REFERENCE_SHAPE = (32, 128), (64, 64)  # a 1:4 street panorama, a square aerial image


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    """A street and an aerial resnet18 (16-d) and a 10-d aerial one, saved as state dicts."""
    folder = tmp_path_factory.mktemp("two_branch_dialog")
    return folder, save_encoders(folder)


def _fill(dialog, qtbot, folder, reference: str, out) -> None:
    """Type the two-branch fields as a user does (the query's file comes in through the files list)."""
    QTest.keyClicks(dialog.image_size, "32x128")
    QTest.keyClicks(dialog.reference.edit, str(folder / reference))
    QTest.keyClicks(dialog.reference_size, "64")
    dialog.out.setText("")
    QTest.keyClicks(dialog.out.edit, str(out))


def test_two_branch_import_and_open(window, qtbot, tmp_path, demo_root, wait_ready, encoders):
    from dmlviewer.core.models import load_checkpoint
    from dmlviewer.core.models.two_branch import TwoBranchModel
    from dmlviewer.gui.doors.import_dialog import ImportDialog

    folder, nets = encoders
    assert window.open_dataset(demo_root)
    dialog = ImportDialog(window, [str(folder / "street.pth")])
    qtbot.addWidget(dialog)
    dialog.show()
    out = tmp_path / "cross.pt"
    _fill(dialog, qtbot, folder, "aerial.pth", out)
    qtbot.waitUntil(lambda: dialog.two_branch is not None, timeout=120000)
    status, report = dialog.status.text(), dialog.summary.toPlainText()
    assert "Two-branch model, one space of 16 dimensions" in status
    assert "query <b>resnet18</b> at 32x128 px" in status and "reference <b>resnet18</b> at 64x64 px" in status
    assert "query branch:" in report and "reference branch:" in report and report.count("ASSUMED") == 2
    assert "input: 32x128 px" in report and "input: 64x64 px" in report
    shown = {dialog.mapping.item(r, 1).text() for r in range(dialog.mapping.rowCount())}
    assert dialog.import_button.isEnabled()
    # the reference branch is checked against the aerial encoder's own embeddings, the query is not
    aerial_images = torch.randn(3, 3, *REFERENCE_SHAPE)
    with torch.no_grad():
        np.savez(tmp_path / "aerial_ref.npz", images=aerial_images.numpy(),
                 embeddings=nets["aerial"].eval()(aerial_images).numpy())
    assert dialog.reference_check.isEnabled()
    dialog.reference_check.setText(str(tmp_path / "aerial_ref.npz"))
    qtbot.mouseClick(dialog.import_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: window.model is not None and window.checkpoint_path == str(out), timeout=120000)
    assert not dialog.isVisible() and "two branches" in dialog.status.text()
    said = window.statusBar().currentMessage()
    assert "reference branch: embeddings vs. aerial_ref.npz (3 images)" in said and "they match within" in said
    assert "query branch: embeddings NOT compared with your model" in said

    written = torch.load(out, weights_only=True)["state_dict"]
    assert shown and shown <= set(written)  # the Mapping tab names the written checkpoint's keys
    assert any(k.startswith("query.") for k in shown) and any(k.startswith("reference.") for k in shown)
    model, _ = load_checkpoint(out)
    assert isinstance(model, TwoBranchModel) and isinstance(window.model, TwoBranchModel)
    assert model.input_shapes == window.model.input_shapes == {"query": QUERY_SHAPE, "reference": REFERENCE_SHAPE}
    rng = np.random.default_rng(0)
    for side, net in (("query", nets["street"]), ("reference", nets["aerial"])):
        x = model.preprocess_of(side)(rng.integers(0, 256, (70, 90, 3), dtype=np.uint8))[None]
        assert tuple(x.shape[-2:]) == model.input_shapes[side]
        with torch.no_grad():
            ours, theirs = model.branch(side)(x).embedding_raw[0], net(x)[0]
        assert float((ours - theirs).abs().max()) <= 1e-5
    wait_ready(window.pair_view)  # the pair view explains with the imported pair, each at its own shape
    e = window.pair_view.explanation
    assert e.grid_query == (1, 4) and e.grid_reference == (2, 2)
    assert window.dialogs == []


def test_branches_of_different_widths_are_refused_and_nothing_written(window, qtbot, tmp_path, encoders):
    from dmlviewer.gui.doors.import_dialog import ImportDialog

    folder, _ = encoders
    dialog = ImportDialog(window, [str(folder / "street.pth")])
    qtbot.addWidget(dialog)
    dialog.show()
    out = tmp_path / "mismatch.pt"
    _fill(dialog, qtbot, folder, "aerial10.pth", out)
    qtbot.waitUntil(lambda: "one space" in dialog.status.text(), timeout=120000)
    text = dialog.status.text()
    assert "16 dimensions" in text and "10" in text and "Head field" in text and "color: #c0392b" in dialog.status.styleSheet()
    assert dialog.plan is None and dialog.two_branch is None and not dialog.import_button.isEnabled()
    qtbot.mouseClick(dialog.import_button, Qt.LeftButton)
    dialog.write()
    qtbot.wait(200)
    assert not out.exists() and window.checkpoint_path != str(out)


def test_size_fields_refuse_in_plain_words(window, qtbot, encoders):
    """A non-square input without a reference branch, a reference size without its file, a bad size."""
    from dmlviewer.gui.doors.import_dialog import ImportDialog

    folder, _ = encoders
    dialog = ImportDialog(window, [str(folder / "street.pth")])
    qtbot.addWidget(dialog)
    for query, reference, message in (("32x128", "", "non-square input is for the query branch"),
                                      ("", "64", "give a Reference branch weights file"),
                                      ("16", "", "at least 32 pixels"),
                                      ("axb", "", "Input size: input shape must be")):
        dialog.image_size.setText(query)
        dialog.reference_size.setText(reference)
        dialog.analyze()
        assert message in dialog.status.text() and dialog.plan is None and not dialog.import_button.isEnabled()

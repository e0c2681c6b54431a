"""File > Import Model: the dialog recognizes the files, shows head, mapping and unmatched keys,
and "Import and Open" writes the checkpoint and opens it in the main window."""

from __future__ import annotations

import torch
import torchvision
from PySide6.QtCore import Qt
from torch import nn


def _weights(tmp_path):
    torch.manual_seed(0)
    trunk = torchvision.models.resnet18()
    trunk.fc = nn.Identity()
    torch.save(trunk.state_dict(), tmp_path / "trunk_best2.pth")
    embedder = nn.Sequential(nn.ReLU(), nn.Linear(512, 64), nn.Linear(64, 16))  # PML's MLP([512, 64, 16])
    state = {f"net.{k}": v for k, v in embedder.state_dict().items()}
    state.update({"last_linear.weight": state["net.2.weight"], "last_linear.bias": state["net.2.bias"]})
    torch.save(state, tmp_path / "embedder_best2.pth")
    return [str(tmp_path / "trunk_best2.pth"), str(tmp_path / "embedder_best2.pth")]


def test_menu_action_opens_the_dialog(window, qtbot):
    from dmlviewer.gui.doors.import_dialog import ImportDialog

    action = next(a for a in window.menuBar().actions()[0].menu().actions() if a.text() == "&Import Model…")
    action.trigger()
    qtbot.waitUntil(lambda: any(isinstance(w, ImportDialog) and w.isVisible() for w in window.findChildren(ImportDialog)))
    dialog = window.findChildren(ImportDialog)[0]
    dialog.reject()


def test_import_and_open(window, qtbot, tmp_path, demo_root, wait_ready):
    from dmlviewer.gui.doors.import_dialog import ImportDialog

    assert window.open_dataset(demo_root)
    dialog = ImportDialog(window, _weights(tmp_path))
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(lambda: dialog.plan is not None, timeout=120000)
    assert "resnet18" in dialog.status.text() and "relu,net.1,net.2" in dialog.status.text()
    assert dialog.unmatched.rowCount() == 2  # last_linear aliases net.2
    assert dialog.mapping.rowCount() == 120 + 4
    assert dialog.out.text() == str(tmp_path / "trunk_best2_dmlviewer.pt")  # proposed beside the weights
    # override the head: stop after the first layer
    dialog.head.setText("relu,net.1")
    qtbot.waitUntil(lambda: dialog.plan is not None and dialog.plan.head_spec == "relu,net.1", timeout=60000)
    assert dialog.plan.config["dim"] == 64 and dialog.unmatched.rowCount() == 4
    out = tmp_path / "folder" / "imported.pt"
    dialog.out.setText(str(out))
    dialog.image_size.setText("64")
    qtbot.waitUntil(lambda: dialog.plan is not None and dialog.plan.config["image_size"] == 64, timeout=60000)
    assert dialog.import_button.isEnabled()
    qtbot.mouseClick(dialog.import_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: window.model is not None and window.checkpoint_path == str(out), timeout=120000)
    assert out.is_file() and window.model.dim == 64 and not dialog.isVisible()
    wait_ready(window.pair_view)  # the imported model explains the pair in the app
    assert window.pair_view.explanation.grid_query == (2, 2)
    assert window.dialogs == []


def test_unknown_layout_shows_closest_layouts_and_cannot_import(window, qtbot, tmp_path):
    from dmlviewer.gui.doors.import_dialog import ImportDialog

    state = torchvision.models.resnet34().state_dict()
    del state["layer3.2.conv1.weight"]  # resnet18 has no layer3.2: its keys all fit
    torch.save(state, tmp_path / "damaged.pth")
    dialog = ImportDialog(window, [str(tmp_path / "damaged.pth")])
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(lambda: "resnet34" in dialog.status.text(), timeout=120000)
    assert "fit resnet18 but hold more layers" in dialog.status.text()
    assert dialog.plan is None and not dialog.import_button.isEnabled()
    assert dialog.ranking.item(0, 0).text() == "resnet34"
    assert dialog.tabs.currentWidget() is dialog.ranking
    assert window.dialogs == []


def test_check_against_compares_the_embeddings_before_writing(window, qtbot, tmp_path):
    """The Check against field compares the model to be written with the user's own embeddings:
    a match is said in the main window's status bar once it opens; a mismatch writes nothing
    and is said in the dialog's words (no command-line options)."""
    import numpy as np

    from dmlviewer.gui.doors.import_dialog import ImportDialog

    files = _weights(tmp_path)
    trunk = torchvision.models.resnet18()
    trunk.fc = nn.Identity()
    trunk.load_state_dict(torch.load(files[0], weights_only=True))
    embedder = nn.Sequential(nn.ReLU(), nn.Linear(512, 64), nn.Linear(64, 16))
    embedder.load_state_dict({k[4:]: v for k, v in torch.load(files[1], weights_only=True).items()
                              if k.startswith("net.")})
    images = torch.randn(4, 3, 64, 64)
    with torch.no_grad():
        embeddings = embedder(trunk.eval()(images))
    np.savez(tmp_path / "mine.npz", images=images.numpy(), embeddings=embeddings.numpy())
    np.savez(tmp_path / "other.npz", images=images.numpy(), embeddings=embeddings.numpy()[::-1].copy())

    dialog = ImportDialog(window, files)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.image_size.setText("64")
    qtbot.waitUntil(lambda: dialog.plan is not None and dialog.plan.config["image_size"] == 64, timeout=120000)
    assert not dialog.reference_check.isEnabled()  # no reference branch
    bad = tmp_path / "bad.pt"
    dialog.out.setText(str(bad))
    dialog.check.setText(str(tmp_path / "other.npz"))
    qtbot.mouseClick(dialog.import_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: "not written" in dialog.status.text(), timeout=120000)
    text = dialog.status.text()
    assert "they DIFFER" in text and "--" not in text and "Check the Head field" in text
    assert not bad.exists() and dialog.isVisible() and dialog.import_button.isEnabled()

    good = tmp_path / "good.pt"
    dialog.out.setText(str(good))
    dialog.check.setText(str(tmp_path / "mine.npz"))
    qtbot.mouseClick(dialog.import_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: window.checkpoint_path == str(good), timeout=120000)
    said = window.statusBar().currentMessage()
    assert "embeddings vs. mine.npz (4 images)" in said and "they match within" in said, said
    saved = torch.load(good, weights_only=True)["extra"]["import"]["reference_check"]
    assert saved["passed"] and saved["images"] == 4


def test_an_error_names_the_dialogs_fields_not_options(window, qtbot, tmp_path):
    """The importer names its inputs by field; the dialog words them as its labels (issue 30 item 6)."""
    from dmlviewer.core.models.importing import FIELDS
    from dmlviewer.gui.doors.import_dialog import FIELD_LABELS, ImportDialog

    assert set(FIELD_LABELS) == set(FIELDS)
    dialog = ImportDialog(window, _weights(tmp_path))
    qtbot.addWidget(dialog)
    dialog.head.setText("relu,nonsense")
    dialog.analyze()
    qtbot.waitUntil(lambda: "nonsense" in dialog.status.text(), timeout=120000)
    text = dialog.status.text()
    assert text.startswith("“Head”: no module 'nonsense'") and "--" not in text, text
    assert dialog.plan is None and not dialog.import_button.isEnabled()

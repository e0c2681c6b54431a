"""File > Open Model from Code with a two-branch model (issue 25): the Reference weights and Input
shapes fields make a code ``ModelSource`` that carries them, which reopens as the same two-branch
model (Recent Models, the last session) and fills the dialog again."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

from dmlviewer.core.models.source import ModelSource
from dmlviewer.core.models.two_branch import TwoBranchModel

USER = '''
from torch import nn


def encoder(width):
    return nn.Sequential(nn.Conv2d(3, width, 3, 2, 1), nn.ReLU(), nn.Conv2d(width, width, 3, 2, 1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 6))


def build_pair():
    return encoder(4), encoder(8)
'''


@pytest.fixture()
def files(tmp_path):
    (tmp_path / "pair.py").write_text(textwrap.dedent(USER))
    namespace: dict = {}
    exec(compile(textwrap.dedent(USER), "pair", "exec"), namespace)
    torch.manual_seed(0)
    q, r = namespace["build_pair"]()
    torch.save(q.state_dict(), tmp_path / "street.pth")
    torch.save(r.state_dict(), tmp_path / "aerial.pth")
    return tmp_path, q.eval(), r.eval()


def test_dialog_makes_a_two_branch_source_that_round_trips(qtbot, files):
    from dmlviewer.gui.doors.code_model_dialog import TWO_BRANCH_NOTE, CodeModelDialog

    folder, q, r = files
    dialog = CodeModelDialog()
    qtbot.addWidget(dialog)
    assert any(label.text() == TWO_BRANCH_NOTE for label in dialog.findChildren(type(dialog.error)))
    dialog.module.setText(str(folder / "pair.py"))
    dialog.name.setEditText("build_pair")
    dialog.weights.setText(str(folder / "street.pth"))
    dialog.reference_weights.setText(str(folder / "gone.pth"))
    dialog.accept()
    assert dialog.source is None and "reference weights file" in dialog.error.text()
    dialog.reference_weights.setText(str(folder / "aerial.pth"))
    for bad in ("64x256", "0x5,64", "a,b", "9" * 300 + ",8"):  # one line in the dialog, no source
        dialog.input_shapes.setText(bad)
        dialog.accept()
        assert dialog.source is None and "input shapes" in dialog.error.text() and "\n" not in dialog.error.text()
    dialog.input_shapes.setText("32x128, 48")
    chosen = []
    dialog.source_chosen.connect(chosen.append)
    dialog.accept()
    source = chosen[0]
    assert source.reference_weights == str((folder / "aerial.pth").resolve())
    assert source.options["input_shapes"] == [[32, 128], [48, 48]]
    back = ModelSource.from_dict(json.loads(source.to_json()))  # what Recent Models and the session keep
    assert back == source
    model, _ = back.open("cpu")
    assert isinstance(model, TwoBranchModel) and model.input_shapes == {"query": (32, 128), "reference": (48, 48)}
    x = torch.rand(1, 3, 48, 48)
    with torch.no_grad():
        assert float((model.branch("reference")(x).embedding_raw - r(x)).abs().max()) <= 1e-5
        xq = torch.rand(1, 3, 32, 128)
        assert float((model.branch("query")(xq).embedding_raw - q(xq)).abs().max()) <= 1e-5
    again = CodeModelDialog(source=back)  # the dialog filled from a remembered source
    qtbot.addWidget(again)
    assert again.reference_weights.text() == back.reference_weights
    assert again.input_shapes.text() == "32x128,48x48"
    again.accept()
    assert again.source == back

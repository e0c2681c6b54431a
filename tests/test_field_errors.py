"""Errors in the user's language (issue 30 item 6) and the two silent choices of issue 31 item 11,
through each door: the core names a field by identifier (:class:`dmlviewer.core.fields.FieldError`);
the Python door says its keyword (``output=``), the command line its option (``--model-output``),
the app the field's label ("Keyword arguments").

- A module whose forward returns ``(logits, embedding)`` is refused without ``output=`` (it was
  explained on the logits, with no word), naming the elements' shapes.
- A timm ViT built for one input size, given another, says which sizes it takes instead of
  timm's bare ``AssertionError``.
"""

from __future__ import annotations

import re
import textwrap

import numpy as np
import pytest
import torch

import dmlviewer
from dmlviewer.cli import main
from dmlviewer.core.fields import FieldError
from dmlviewer.core.models.errors import CheckpointError, ModelError

TWO_OUTPUTS = '''
import torch
from torch import nn


class TwoOutputs(nn.Module):
    """(logits, embedding), as a classifier with an embedding head returns them."""

    def __init__(self, classes=10, dim=6):
        super().__init__()
        self.trunk = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, 2, 1), nn.ReLU())
        self.embed = nn.Linear(8, dim)
        self.classify = nn.Linear(dim, classes)

    def forward(self, x):
        embedding = self.embed(torch.amax(self.trunk(x), dim=(2, 3)))
        return self.classify(embedding), embedding


def build(classes=10, dim=6):
    torch.manual_seed(0)
    return TwoOutputs(classes, dim)


def vit(img_size=56, dynamic=False):
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    return VisionTransformer(img_size=img_size, patch_size=14, embed_dim=32, depth=1, num_heads=2, num_classes=0,
                             dynamic_img_size=dynamic)
'''


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    folder = tmp_path_factory.mktemp("field_errors")
    (folder / "nets.py").write_text(textwrap.dedent(TWO_OUTPUTS))
    namespace: dict = {}
    exec(compile(textwrap.dedent(TWO_OUTPUTS), "nets", "exec"), namespace)  # the user's own script
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (40, 40, 3), dtype=np.uint8) for _ in range(2)]
    for k, image in enumerate(images):
        import cv2

        cv2.imwrite(str(folder / f"{k}.png"), image[:, :, ::-1])
    return {"folder": folder, "ns": namespace, "images": images, "paths": [str(folder / f"{k}.png") for k in range(2)]}


def _cli(capsys, argv: list) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    return code, err


# ------------------------------------------------------------------ a tuple output (issue 31 item 11)


def test_python_door_refuses_a_tuple_without_output(fx):
    net = fx["ns"]["build"]()
    with pytest.raises(ModelError) as caught:
        dmlviewer.explain(net, *fx["images"], size=32)
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    assert "tuple of 2 elements (0: 2 x 10, 1: 2 x 6)" in message
    assert "with output= (an index, e.g. 1, a key or a function)" in message  # Python takes a function
    e = dmlviewer.explain(net, *fx["images"], size=32, output=1)  # the embedding, said: explained
    from dmlviewer.core.data.transforms import Preprocess

    x = torch.stack([Preprocess(32)(im) for im in fx["images"]])
    with torch.no_grad():
        emb = torch.nn.functional.normalize(net.eval()(x)[1], dim=1)
    assert e.similarity == pytest.approx(float(emb[0] @ emb[1]), abs=1e-5)


def test_a_one_element_tuple_is_its_element():
    from dmlviewer.core.models.module_model import select_output

    value = torch.ones(2, 4)
    assert select_output((value,), None) is value


def test_code_door_names_the_field(fx):
    from dmlviewer.core.models.code_door import open_code_model

    with pytest.raises(FieldError) as caught:
        open_code_model(f"{fx['folder']}/nets.py:build", {}, size=32)
    assert caught.value.field == "output" and isinstance(caught.value, ModelError)
    assert "--" not in str(caught.value) and "output=" not in str(caught.value)


def test_command_line_says_model_output(fx, capsys, tmp_path):
    argv = ["explain", "--model", f"{fx['folder']}/nets.py:build", "--query", fx["paths"][0], "--reference",
            fx["paths"][1], "--size", "32", "--out", tmp_path / "e.npz", "--device", "cpu"]
    code, err = _cli(capsys, argv)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "tuple of 2 elements (0: 2 x 10, 1: 2 x 6): say which one is the embedding with --model-output" in err
    assert err.endswith("with --model-output (an index, e.g. 1, or a key)")  # no function on the command line
    code, err = _cli(capsys, [*argv, "--model-output", "1"])
    assert code == 0, err
    assert (tmp_path / "e.npz").exists()


# ------------------------------------------------------------------ a timm ViT of one input size


def test_python_door_says_the_sizes_a_vit_takes(fx):
    pytest.importorskip("timm")
    vit = fx["ns"]["vit"]
    with pytest.raises(ModelError) as caught:
        dmlviewer.explain(vit(56), *fx["images"], size=28)
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and not isinstance(caught.value, AssertionError)
    assert message == ("size= asks for 28 px, but the VisionTransformer takes 56 px input only (its img_size): "
                       "give 56, or build the model with img_size=28 or dynamic_img_size=True to take other sizes")
    assert dmlviewer.explain(vit(56), *fx["images"]).grid_query == (4, 4)  # its own size by default
    assert dmlviewer.explain(vit(56, dynamic=True), *fx["images"], size=28).grid_query == (2, 2)


def test_command_line_says_size(fx, capsys, tmp_path):
    pytest.importorskip("timm")
    code, err = _cli(capsys, ["explain", "--model", f"{fx['folder']}/nets.py:vit", "--query", fx["paths"][0],
                              "--reference", fx["paths"][1], "--size", "28", "--out", tmp_path / "e.npz",
                              "--device", "cpu"])
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "--size asks for 28 px, but the VisionTransformer takes 56 px input only (its img_size)" in err


# ------------------------------------------------------------------ weights that do not fit (item 6)


def _mismatch(fx, tmp_path):
    from dmlviewer.core.models.code_door import open_code_model

    weights = tmp_path / "w.pth"
    torch.save(fx["ns"]["build"](dim=6).state_dict(), weights)
    with pytest.raises(CheckpointError) as caught:
        open_code_model(f"{fx['folder']}/nets.py:build", {"dim": 5}, weights, output=1)
    return weights, caught.value


def test_weights_of_other_shapes_name_the_keyword_arguments_in_each_door(fx, tmp_path, capsys):
    weights, exc = _mismatch(fx, tmp_path)
    assert isinstance(exc, FieldError) and exc.field == "model_args" and "--" not in str(exc)
    code, err = _cli(capsys, ["explain", "--model", f"{fx['folder']}/nets.py:build", "--model-args", '{"dim": 5}',
                              "--weights", weights, "--model-output", "1", "--query", fx["paths"][0], "--reference",
                              fx["paths"][1], "--out", tmp_path / "e.npz", "--device", "cpu"])
    assert code == 2 and re.search(r"shapes differ for embed\.weight .*\(check --model-args\)$", err), err
    from dmlviewer.gui.common.errors import FIELD_LABELS
    from dmlviewer.gui.common.errors import user_message

    said = user_message(exc)
    assert said.endswith("(check “Keyword arguments”)") and "--" not in said
    assert FIELD_LABELS["model_args"] == "“Keyword arguments”"


def test_dialog_labels_are_the_dialogs_own(qtbot):
    """Every label the app words a field with is a row of the code dialog (the rest say which door sets it)."""
    from PySide6.QtWidgets import QFormLayout, QLabel

    from dmlviewer.gui.doors.code_model_dialog import CodeModelDialog
    from dmlviewer.gui.common.errors import FIELD_LABELS

    dialog = CodeModelDialog()
    qtbot.addWidget(dialog)
    form = dialog.findChild(QFormLayout)
    rows = {form.itemAt(r, QFormLayout.LabelRole).widget().text() for r in range(form.rowCount())
            if form.itemAt(r, QFormLayout.LabelRole) is not None
            and isinstance(form.itemAt(r, QFormLayout.LabelRole).widget(), QLabel)}
    for field, label in FIELD_LABELS.items():
        if label.startswith("“"):
            assert label.strip("“”") in rows, (field, label, rows)


def test_field_error_with_braces_in_a_path_words_safely():
    from dmlviewer.core.fields import literal
    from dmlviewer.core.models.errors import ModelFieldError

    exc = ModelFieldError("weights", literal("/data/{run}/w.pth") + ": check {field}")
    assert exc.worded({"weights": "--weights"}) == "/data/{run}/w.pth: check --weights"

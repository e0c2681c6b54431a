"""The code-and-weights door from the command line (issue 22 item 1): ``--model FILE.py:NAME``
with ``--model-args`` and ``--weights`` on every command that takes ``--checkpoint``, decided in
one place (``commands.common``); bad input is one line with exit status 2."""

from __future__ import annotations

import json
import re
import textwrap

import h5py
import numpy as np
import pytest
import torch

from dmlviewer.cli import build_parser, main
from dmlviewer.core.data import open_dataset
from dmlviewer.core.models.code_door import open_code_model
from dmlviewer.core.models.source import ModelSource
from user_model_source import USER_MODELS


@pytest.fixture(scope="module")
def user(tmp_path_factory, tiny_demo_root):
    """The user's model file and a Lightning-style checkpoint of it."""
    folder = tmp_path_factory.mktemp("code_door_cli")
    (folder / "my_models.py").write_text(textwrap.dedent(USER_MODELS))
    namespace: dict = {}
    exec(compile(textwrap.dedent(USER_MODELS), "my_models", "exec"), namespace)  # the user's own script
    torch.manual_seed(0)
    net = namespace["build_model"](dim=6).eval()
    torch.save({"epoch": 4, "state_dict": {f"model.{k}": v for k, v in net.state_dict().items()}},
               folder / "run.ckpt")
    return {"folder": folder, "entry": f"{folder}/my_models.py:build_model", "weights": str(folder / "run.ckpt"),
            "net": net, "root": str(tiny_demo_root), "dataset": open_dataset(tiny_demo_root)}


def _model(user) -> list[str]:
    return ["--model", user["entry"], "--model-args", '{"dim": 6}', "--weights", user["weights"]]


def test_evaluate_writes_features_of_the_users_module(user, tmp_path, capsys):
    out = tmp_path / "f.h5"
    rc = main(["evaluate", *_model(user), "--dataset", user["root"], "--out", str(out), "--json"])
    assert rc == 0
    metrics = json.loads(capsys.readouterr().out)
    assert 0.0 <= metrics["recall@1"] <= 1.0
    _, info = open_code_model(user["entry"], {"dim": 6}, user["weights"])
    with h5py.File(out, "r") as f:
        assert f.attrs["checkpoint_sha256"] == info["sha256"]
        embeddings = f["embeddings"][:2]
        paths = [p.decode() if isinstance(p, bytes) else p for p in f["paths"][:2]]
    # the stored embeddings are the user's module's own
    model, _ = open_code_model(user["entry"], {"dim": 6}, user["weights"])
    from dmlviewer.core.data import load_image

    x = torch.stack([model.preprocess(load_image(f"{user['root']}/{p}")) for p in paths])
    with torch.no_grad():
        expected = torch.nn.functional.normalize(user["net"](x), dim=1).numpy()
    assert np.allclose(embeddings, expected, atol=1e-5)


def test_explain_localize_correspond_and_retrieve_take_the_model(user, tmp_path, capsys):
    npz = tmp_path / "pair.npz"
    query, reference = str(user["dataset"].abspath(0)), str(user["dataset"].abspath(5))
    assert main(["explain", *_model(user), "--query", query, "--reference", reference, "--out", str(npz),
                 "--device", "cpu"]) == 0
    z = np.load(npz)
    total = float(z["point_to_point"].astype(np.float64).sum() + z["bias_query"] + z["bias_reference"] + z["bias_both"])
    assert total == pytest.approx(float(z["similarity"]), abs=1e-5) and str(z["rule"]) == "exact"
    assert main(["localize", *_model(user), "--dataset", user["root"], "--limit", "2", "--method", "decomposition",
                 "--json", "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main(["correspond", *_model(user), "--dataset", user["root"], "--pairs", "2", "--json",
                 "--device", "cpu"]) == 0
    assert "partial_map_accuracy" in json.loads(capsys.readouterr().out)
    features = tmp_path / "f.h5"
    assert main(["evaluate", *_model(user), "--dataset", user["root"], "--out", str(features)]) == 0
    capsys.readouterr()
    assert main(["retrieve", "--features", str(features), "--query", "0", "--region", "0,0,40,40", *_model(user),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["query"]["region"] == [0, 0, 40, 40]


def test_every_command_that_takes_a_checkpoint_takes_the_model_options():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    with_checkpoint = sorted(name for name, p in sub.choices.items()
                             if any("--checkpoint" in a.option_strings for a in p._actions))
    assert {"evaluate", "explain", "localize", "correspond", "faithfulness", "retrieve", "gui"} <= set(with_checkpoint)
    for name in with_checkpoint:
        options = {o for a in sub.choices[name]._actions for o in a.option_strings}
        assert {"--model", "--model-args", "--weights"} <= options, name
        help_text = sub.choices[name].format_help()
        assert "run as" in help_text and "Python" in help_text, name


DICT_MODEL = USER_MODELS + '''

class Tagged(Net):
    """Returns its embedding beside its logits, under a key dmlviewer does not guess."""

    def forward(self, x):
        return {"logits": x.mean(dim=(1, 2, 3)), "emb": super().forward(x)}
'''


def test_feature_layer_and_model_output_choose_the_map_and_the_embedding(user, tmp_path, capsys):
    """``--feature-layer`` decomposes an earlier map of the same embedding, as the Python door's
    ``feature_layer=`` does; ``--model-output`` picks the embedding from a dict output."""
    import dmlviewer

    query, reference = str(user["dataset"].abspath(0)), str(user["dataset"].abspath(5))
    runs = {}
    for layer in (None, "trunk.2"):
        out = tmp_path / f"{layer}.npz"
        chosen = ["--feature-layer", layer] if layer else []
        assert main(["explain", *_model(user), *chosen, "--query", query, "--reference", reference,
                     "--out", str(out), "--device", "cpu"]) == 0
        runs[layer] = np.load(out)
    auto, early = runs[None], runs["trunk.2"]
    # the same embedding, decomposed over a map of twice the resolution (before the second stride)
    assert float(early["similarity"]) == pytest.approx(float(auto["similarity"]), abs=1e-6)
    assert early["point_to_point"].shape[0] == 2 * auto["point_to_point"].shape[0]
    python = dmlviewer.explain(user["net"], query, reference, feature_layer="trunk.2")  # both 224 px
    assert python.point_to_point.shape == early["point_to_point"].shape and str(early["rule"]) == python.rule
    assert np.allclose(early["point_to_point"], python.point_to_point, atol=1e-6)

    (user["folder"] / "tagged.py").write_text(textwrap.dedent(DICT_MODEL))
    tagged = ["--model", f"{user['folder']}/tagged.py:Tagged", "--model-args", '{"dim": 6}', "--weights",
              user["weights"]]
    pair = ["--query", query, "--reference", reference, "--device", "cpu"]
    assert main(["explain", *tagged, *pair, "--out", str(tmp_path / "x.npz")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--model-output" in err, err
    assert main(["explain", *tagged, "--model-output", "emb", *pair, "--out", str(tmp_path / "t.npz")]) == 0
    assert float(np.load(tmp_path / "t.npz")["similarity"]) == pytest.approx(float(auto["similarity"]), abs=1e-6)


@pytest.mark.parametrize("argv, pattern", [
    (["--checkpoint", "x.pt", "--model", "m.py:f"], r"not allowed with argument"),
    (["--checkpoint", "{weights}", "--feature-layer", "trunk.2"], r"--feature-layer is only used with --model"),
    (["--checkpoint", "{weights}", "--model-output", "0"], r"--model-output is only used with --model"),
    (["--model", "{entry}", "--feature-layer", "trunk/2"], r"--feature-layer: .*not a module name"),
    (["--model", "{entry}", "--model-args", '{{"dim": 6}}', "--weights", "{weights}", "--feature-layer", "nope"],
     r"nope"),
    ([], r"one of the arguments --checkpoint --model is required"),
    (["--model", "{entry}", "--model-args", "{{dim: 6}}"], r"--model-args: not valid JSON"),
    (["--model", "{entry}", "--model-args", "[6]"], r"--model-args: expected a JSON object"),
    (["--checkpoint", "{weights}", "--weights", "{weights}"], r"--weights is only used with --model"),
    (["--model", "{folder}/missing.py:build_model"], r"model file not found: .*missing\.py"),
    (["--model", "{entry}", "--weights", "{folder}/none.ckpt"], r"weights file not found: .*none\.ckpt"),
    (["--model", "{folder}/my_models.py:nope"], r"has no 'nope'; its callables: Net, build_model"),
    (["--model", "{entry}", "--model-args", '{{"depth": 2}}'], r"failed: TypeError"),
    (["--model", "{entry}", "--weights", "{weights}"], r"shapes differ for fc\.weight"),  # dim 8, not 6
])
def test_bad_model_options_are_one_line_with_status_2(user, tmp_path, capsys, argv, pattern):
    argv = [a.format(entry=user["entry"], folder=user["folder"], weights=user["weights"]) for a in argv]
    query = str(user["dataset"].abspath(0))
    rc = main(["explain", *argv, "--query", query, "--reference", query, "--out", str(tmp_path / "x.npz")])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert re.search(pattern, err), err


def test_gui_hands_the_app_a_code_source(user, monkeypatch):
    import dmlviewer.commands.gui as gui_command
    import dmlviewer.gui.window.app as app

    seen = {}
    monkeypatch.setattr(gui_command, "_window_possible", lambda: True)
    monkeypatch.setattr(app, "run_gui", lambda **kwargs: seen.update(kwargs) or 0)
    assert main(["gui", *_model(user), "--dataset", user["root"]]) == 0
    source = seen["checkpoint"]
    assert isinstance(source, ModelSource) and source.kind == "code"
    assert (source.entry, source.args, source.weights) == (user["entry"], {"dim": 6}, user["weights"])
    assert main(["gui", "--checkpoint", "imagenet:resnet18"]) == 0 and seen["checkpoint"] == "imagenet:resnet18"

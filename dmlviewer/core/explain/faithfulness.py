"""Faithfulness of similarity explanations: deletion and insertion curves (pixel flipping) on
the feature grid, for every map the viewer shows.

For a pair ``(q, r)`` and a map of the query on its feature grid (``n`` cells, :mod:`.perturb`),
the cells are ranked by the map, most relevant (largest signed value) first. The **deletion
curve** replaces the top ``k`` cells of the query by the baseline and records the cosine
similarity ``cos(E(q_k), E(r))`` for ``k = round(t n / steps)``, ``t = 0 .. steps``; the
**insertion curve** starts from the all-baseline query and puts the top ``k`` cells back. The
curves are plotted against the fraction ``k / n`` of cells; their areas (trapezoid rule over
``[0, 1]``, in units of cosine similarity) are the scores: a faithful map makes the similarity
fall fast when its top cells go (low deletion AUC) and rise fast when they come back (high
insertion AUC). Only the query is perturbed; the reference embedding stays fixed.

Maps (query side, on the feature grid): the six overall maps of :class:`.PairExplanation`
(``grad_transfer`` needs a :class:`.GradWeightBank`), ``occlusion`` (:mod:`.occlusion`, query
side), ``point_to_point`` (each query cell's partial map summed over the reference's positive
part, ``sum_x max(P[i, x], 0)``, what the pair view shows on hover by default; the signed sum is
exactly the Decomposition map, seed 000 Eq. 3) and, for grouping heads, ``group_<p>`` (group
``p``'s point-to-point tensor summed per query cell: the group's share of the decomposition).
Two references bound the scores: ``random`` (cells in a seeded random order, the floor) and
``oracle`` (the greedy order: at each step every remaining cell is tried alone and the step's
cells are those whose removal lowers, for insertion whose addition raises, the similarity most;
``sum_t remaining_t`` forward passes per curve, less the first deletion step's when occlusion
is scored (its passes are those trials), so it runs on a subset of the pairs; a greedy order is
not an optimum and can be beaten).

Ties in a map (e.g. a constant region) are broken by one seeded random permutation of the cells
per pair, the same for every method, never by the row-major order. Perturbed copies that
several orders share (the unperturbed and the all-baseline query, common prefixes) are embedded
once per pair.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Iterator, Sequence

import numpy as np
import torch

from dmlviewer.core.explain.correspondence import different_class_pairs, same_class_pairs
from dmlviewer.core.explain.grad_transfer import GradWeightBank, bank_from_train_split
from dmlviewer.core.explain.occlusion import occlusion
from dmlviewer.core.explain.inputs import ImageLike, as_device, as_rgb, eval_mode
from dmlviewer.core.explain import methods as registry
from dmlviewer.core.explain.pair import explain_pair
from dmlviewer.core.explain.perturb import baseline_input, cell_labels, embed_kept, relay
from dmlviewer.core.explain.perturb_options import BASELINES, DEFAULT_ORACLE_PAIRS, DEFAULT_STEPS
from dmlviewer.core.models.two_branch import branch_of
from dmlviewer.core.progress import CancelToken, Progress

log = logging.getLogger(__name__)

OCCLUSION = registry.method("occlusion").key
POINT_TO_POINT = registry.method("point_to_point").key
GRAD_TRANSFER = registry.method("grad_transfer").key
RANDOM = "random"
ORACLE = "oracle"
GROUP_PREFIX = "group_"


def available_methods(model: torch.nn.Module) -> list[str]:
    """Every map method of this model: the registry's ``faithfulness`` maps (a two-branch model's:
    those of its ``two_branch`` use) plus ``group_<p>`` per group of a grouping head (without
    ``random``/``oracle``, which are always reported)."""
    from dmlviewer.core.models.two_branch import TwoBranchModel

    groups = len(model.group_slices)
    maps = [m for m in registry.methods("faithfulness")
            if not isinstance(model, TwoBranchModel) or m in registry.methods("two_branch")]
    return [*maps, *([f"{GROUP_PREFIX}{p}" for p in range(groups)] if groups > 1 else [])]


def check_methods(model: torch.nn.Module, methods: Sequence[str]) -> list[str]:
    """``methods`` without duplicates and without ``random``/``oracle`` (added anyway); raises
    ``ValueError`` naming any the model does not have."""
    known = available_methods(model)
    chosen = [m for m in dict.fromkeys(methods) if m not in (RANDOM, ORACLE)]
    bad = [m for m in chosen if m not in known]
    if bad:
        raise ValueError(f"unknown method(s) {', '.join(bad)} for this model; choose from {', '.join(known)}")
    return chosen


def step_counts(n: int, steps: int) -> np.ndarray:
    """Numbers of cells removed (inserted) at the curve's points: ``round(t n / steps)`` for
    ``t = 0 .. steps``, duplicates dropped (grids with fewer cells than steps)."""
    if steps < 1:
        raise ValueError(f"steps must be positive, got {steps}")
    return np.unique(np.rint(np.arange(steps + 1) * n / steps).astype(np.int64))


def ranking(values: np.ndarray, tiebreak: np.ndarray) -> np.ndarray:
    """Cell indices by decreasing ``values``; equal values in the order of ``tiebreak`` (a
    permutation's ranks)."""
    return np.lexsort((tiebreak, -np.asarray(values, dtype=np.float64).ravel()))


def auc(curve: Sequence[float], fractions: Sequence[float]) -> float:
    """Trapezoid area under ``curve`` over ``fractions`` (0 .. 1)."""
    y, x = np.asarray(curve, np.float64), np.asarray(fractions, np.float64)
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2.0))


def _keep_masks(order: np.ndarray, counts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Keep-masks (``len(counts) x n`` bool) of the deletion and insertion curves of ``order``."""
    ranks = np.empty(n, np.int64)
    ranks[order] = np.arange(n)
    inserted = ranks[None, :] < counts[:, None]  # row t: the top counts[t] cells
    return ~inserted, inserted


def query_maps(expl, methods: Sequence[str], occlusion_map: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Flat query-side grid maps (``n``) of ``methods`` from a :class:`.PairExplanation`
    (``occlusion`` from ``occlusion_map``)."""
    maps = {}
    for m in methods:
        if m == OCCLUSION:
            if occlusion_map is None:
                raise ValueError("the occlusion map was not computed")
            maps[m] = np.asarray(occlusion_map, np.float64).ravel()
        elif m == POINT_TO_POINT:
            maps[m] = np.maximum(expl.point_to_point, 0.0).sum(1, dtype=np.float64)
        elif m.startswith(GROUP_PREFIX):
            maps[m] = expl.group_point_to_point(int(m[len(GROUP_PREFIX):])).sum(1, dtype=np.float64)
        else:
            maps[m] = np.asarray(expl.overall_grid(m, "query"), np.float64).ravel()
    return maps


def pair_faithfulness(
    model: torch.nn.Module,
    image_q: ImageLike,
    image_r: ImageLike,
    methods: Sequence[str] | None = None,
    baseline: str = "blur",
    steps: int = DEFAULT_STEPS,
    oracle: bool = True,
    device: str | torch.device = "cpu",
    batch_size: int | None = None,
    seed: int = 0,
    grad_bank: GradWeightBank | None = None,
    cancel: CancelToken | None = None,
) -> Iterator[Progress]:
    """Deletion and insertion curves of one pair for ``methods`` plus ``random`` and (with
    ``oracle``) ``oracle``. The ``done`` event's result: ``{"similarity", "fractions",
    "baseline", "grid", "forward_passes", "oracle_forward_passes", "seconds", "methods": {name: {"deletion",
    "insertion", "deletion_auc", "insertion_auc"}}}``. ``methods=None``: every map of the model
    (:func:`available_methods`; ``grad_transfer`` only with a ``grad_bank``)."""
    if baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}; choose from {', '.join(BASELINES)}")
    if methods is None:
        methods = [m for m in available_methods(model) if m != GRAD_TRANSFER or grad_bank is not None]
    methods = check_methods(model, methods)
    start = time.perf_counter()
    dev = as_device(device)
    rgb_q, rgb_r = as_rgb(image_q), as_rgb(image_r)
    with eval_mode(model):
        expl = explain_pair(model, rgb_q, rgb_r, dev, grad_bank=grad_bank)
        grid = tuple(expl.grid_query)
        n = grid[0] * grid[1]
        occ = occ_map = None
        passes = oracle_passes = 0
        if OCCLUSION in methods:
            occ = yield from relay(occlusion(model, rgb_q, rgb_r, baseline, sides=("query",), device=dev,
                                             batch_size=batch_size, seed=seed, use_cache=False, cancel=cancel), 0, n)
            occ_map, passes = occ.overall_grid("query"), occ.forward_passes - 2
        maps = query_maps(expl, methods, occ_map)
        rng = np.random.default_rng(seed)
        tiebreak = rng.permutation(n)
        orders = {m: ranking(v, tiebreak) for m, v in maps.items()}
        orders[RANDOM] = rng.permutation(n)
        counts = step_counts(n, steps)
        fractions = counts / n

        query_net = branch_of(model, "query")  # the perturbed query's copies go through the query branch
        x = model.preprocess(rgb_q).to(dev)  # a two-branch model's: the query branch's, at its input shape
        labels = torch.from_numpy(cell_labels(x.shape[1:], grid)).to(dev)
        base = baseline_input(x, baseline, grid, seed=seed)
        e_r = torch.from_numpy(expl.embedding("reference")).to(dev)

        # every distinct perturbed copy once
        rows: dict[bytes, int] = {}
        masks: list[np.ndarray] = []
        index: dict[str, tuple[list[int], list[int]]] = {}
        for name, order in orders.items():
            deletion, insertion = _keep_masks(order, counts, n)
            refs = ([], [])
            for kind, stack in enumerate((deletion, insertion)):
                for keep in stack:
                    key = np.packbits(keep).tobytes()
                    if key not in rows:
                        rows[key] = len(masks)
                        masks.append(keep)
                    refs[kind].append(rows[key])
            index[name] = refs
        emb = yield from relay(embed_kept(query_net, x, base, labels, np.stack(masks), batch_size, cancel, "curves"),
                               0, len(masks))
        passes += len(masks)
        sims = (emb @ e_r).double().cpu().numpy()
        curves = {name: (sims[d].tolist(), sims[i].tolist()) for name, (d, i) in index.items()}
        if oracle:
            full, empty = sims[index[RANDOM][0][0]], sims[index[RANDOM][1][0]]
            greedy = _Greedy(query_net, x, base, labels, e_r, counts, n, batch_size, cancel)
            # the occlusion passes are deletion's first trials: cos(e - d_i, e_r) = full - d_i . e_r
            removed_alone = None
            if occ is not None:
                removed_alone = full - occ.delta_query.astype(np.float64) @ e_r.double().cpu().numpy()
            deletion = yield from greedy.curve("deletion", full, empty, removed_alone)
            insertion = yield from greedy.curve("insertion", empty, full)
            curves[ORACLE] = (deletion, insertion)
            passes += greedy.passes
            oracle_passes = greedy.passes
    result = {
        "similarity": float(expl.similarity),
        "fractions": fractions.tolist(),
        "baseline": baseline,
        "grid": list(grid),
        "forward_passes": passes,
        "oracle_forward_passes": oracle_passes,
        "seconds": time.perf_counter() - start,
        "methods": {name: {"deletion": d, "insertion": i, "deletion_auc": auc(d, fractions),
                           "insertion_auc": auc(i, fractions)} for name, (d, i) in curves.items()},
    }
    yield Progress("done", 1, 1, data={"result": result})


class _Greedy:
    """The oracle's greedy order (module docstring), one curve at a time."""

    def __init__(self, model, x, base, labels, e_r, counts, n, batch_size, cancel) -> None:
        self.args = (model, x, base, labels)
        self.e_r, self.counts, self.n = e_r, counts, n
        self.batch_size, self.cancel = batch_size, cancel
        self.passes = 0

    def curve(self, kind: str, first: float, last: float,
              first_trials: np.ndarray | None = None) -> Iterator[Progress]:
        """The greedy ``kind`` curve (``first``/``last``: the known end values); returns it.
        ``first_trials``: the similarities of step 1's trials when already known (deletion: the
        occlusion passes, every cell removed alone), which saves their forward passes."""
        chosen = np.zeros(self.n, bool)  # removed (deletion) or inserted (insertion) cells
        curve = [float(first)]
        sign = 1.0 if kind == "deletion" else -1.0  # deletion minimizes, insertion maximizes
        last_step = len(self.counts) - 1
        for t in range(1, last_step + 1):
            # the state after step t - 1 (its curve point) is embedded with step t's trials
            state = chosen[None] if t > 1 else np.zeros((0, self.n), bool)
            remaining = np.flatnonzero(~chosen)
            known = t == 1 and first_trials is not None and t < last_step
            if t < last_step and not known:
                trial = np.repeat(chosen[None], len(remaining), axis=0)
                trial[np.arange(len(remaining)), remaining] = True
            else:  # known trials, or the last step (it takes every remaining cell): nothing to try
                trial = np.zeros((0, self.n), bool)
            rows = np.concatenate([state, trial])
            sims = np.asarray(first_trials, np.float64)[remaining] if known else None
            if len(rows):
                keep = ~rows if kind == "deletion" else rows
                emb = yield from embed_kept(*self.args, keep, self.batch_size, self.cancel, f"oracle ({kind})")
                self.passes += len(keep)
                sims = (emb @ self.e_r).double().cpu().numpy()
                if len(state):
                    curve.append(float(sims[0]))
                    sims = sims[1:]
            if t == last_step:
                curve.append(float(last))
                break
            take = int(self.counts[t] - self.counts[t - 1])
            chosen[remaining[np.argsort(sign * sims, kind="stable")[:take]]] = True
        return curve


class _PairClock:
    """Time left of a faithfulness run. Pairs with the oracle cost several times the others
    (demo model: 6.6 s against 0.9 s) and come first, so the average over the pairs done would
    overestimate (21 minutes left after the first pair of a 4-minute run). Seconds are kept per
    kind of pair; before a pair without the oracle is done, its cost is an oracle pair's times
    the share of that pair's forward passes that were not the oracle's."""

    def __init__(self) -> None:
        self.seconds: dict[bool, list[float]] = {True: [], False: []}
        self.plain_share: float | None = None

    def add(self, oracle: bool, result: dict) -> None:
        self.seconds[oracle].append(float(result["seconds"]))
        if oracle and self.plain_share is None and result["forward_passes"]:
            self.plain_share = 1.0 - result["oracle_forward_passes"] / result["forward_passes"]

    def eta(self, with_oracle: int, plain: int) -> float | None:
        """Seconds left for ``with_oracle`` pairs with the oracle and ``plain`` without."""
        per_oracle = float(np.mean(self.seconds[True])) if self.seconds[True] else None
        per_plain = float(np.mean(self.seconds[False])) if self.seconds[False] else None
        if per_plain is None and per_oracle is not None and self.plain_share is not None:
            per_plain = per_oracle * self.plain_share
        per_oracle = per_plain if per_oracle is None else per_oracle
        if per_plain is None:
            return None
        return with_oracle * per_oracle + plain * per_plain


def _summary(per_pair: list[dict]) -> dict:
    d = np.array([p["deletion"] for p in per_pair], np.float64)
    i = np.array([p["insertion"] for p in per_pair], np.float64)
    da = np.array([p["deletion_auc"] for p in per_pair], np.float64)
    ia = np.array([p["insertion_auc"] for p in per_pair], np.float64)
    on_oracle = np.array([p["oracle_pair"] for p in per_pair], bool)
    k = len(per_pair)
    sem = (lambda a: float(a.std(ddof=1) / math.sqrt(k)) if k > 1 else 0.0)  # noqa: E731
    mean = (lambda a: float(a.mean()) if len(a) else None)  # noqa: E731  (None: JSON null)
    return {
        "deletion_auc": mean(da),
        "insertion_auc": mean(ia),
        "deletion_auc_sem": sem(da),
        "insertion_auc_sem": sem(ia),
        "num_pairs": k,
        "deletion_curve": d.mean(0).tolist() if k else [],
        "insertion_curve": i.mean(0).tolist() if k else [],
        # the same scores on the pairs the oracle ran on, to compare with it
        "oracle_pairs": {"deletion_auc": mean(da[on_oracle]), "insertion_auc": mean(ia[on_oracle]),
                         "num_pairs": int(on_oracle.sum())},
    }


def faithfulness(
    model: torch.nn.Module,
    dataset,
    methods: Sequence[str] | None = None,
    pairs: int = 200,
    baseline: str = "blur",
    steps: int = DEFAULT_STEPS,
    oracle_pairs: int = DEFAULT_ORACLE_PAIRS,
    split: str | None = "test",
    device: str | torch.device = "cpu",
    batch_size: int | None = None,
    seed: int = 0,
    grad_bank: GradWeightBank | None = None,
    cancel: CancelToken | None = None,
) -> Iterator[Progress]:
    """Deletion/insertion AUCs of ``methods`` (default: :func:`available_methods`) over ``pairs``
    pairs of ``split``: half same-class, half different-class pairs (seeded). The ``done``
    event's result is the ``faithfulness --json`` list: one dict per method (``random`` and,
    when ``oracle_pairs > 0``, ``oracle`` included) with ``method baseline steps fractions
    deletion_auc insertion_auc deletion_auc_sem insertion_auc_sem num_pairs deletion_curve
    insertion_curve oracle_pairs`` over the same-class pairs and ``different_class`` holding the
    same keys over the different-class pairs (an AUC is ``None`` where there was no pair). The
    oracle runs on the first ``oracle_pairs`` pairs (half of each kind); its ``num_pairs`` says
    how many, and every method's ``oracle_pairs`` (``deletion_auc insertion_auc num_pairs``)
    gives its scores on those same pairs for a like-for-like comparison. Pairs with an
    unreadable image are skipped with a warning (the policy of every dataset job)."""
    from dmlviewer.core.data.images import load_or_skip

    methods = check_methods(model, available_methods(model) if methods is None else methods)
    if pairs < 1:
        raise ValueError(f"pairs must be positive, got {pairs}")
    if baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}; choose from {', '.join(BASELINES)}")
    same = same_class_pairs(dataset, split, (pairs + 1) // 2, seed)
    different = different_class_pairs(dataset, split, pairs // 2, seed)
    if not same and not different:
        raise ValueError(f"split {split!r} has no pair of images to evaluate")
    if GRAD_TRANSFER in methods and grad_bank is None:
        grad_bank = yield from bank_from_train_split(model, dataset, len(same) + len(different), device, cancel)
    dev = as_device(device)
    jobs = [("same", q, r) for q, r in same] + [("different", q, r) for q, r in different]
    oracle_quota = {"same": (oracle_pairs + 1) // 2, "different": oracle_pairs // 2}
    log.info("faithfulness of %d methods on %d same-class and %d different-class pairs (%s baseline)",
             len(methods), len(same), len(different), baseline)
    per_pair: dict[str, dict[str, list[dict]]] = {"same": {}, "different": {}}
    fractions: list[float] = []
    clock = _PairClock()
    skipped: dict = {}  # unreadable images, reported once each

    def step(k: int, kind: str) -> Progress:
        done = k + 1  # the jobs are the same-class pairs, then the different-class ones
        left = {"same": max(len(same) - done, 0), "different": len(jobs) - max(len(same), done)}
        with_oracle = sum(min(oracle_quota[c], left[c]) for c in left)
        return Progress("step", k + 1, len(jobs), f"faithfulness ({kind}-class pairs)",
                        eta_s=clock.eta(with_oracle, len(jobs) - k - 1 - with_oracle))

    for k, (kind, q, r) in enumerate(jobs):
        query, reference = load_or_skip(dataset, int(q), skipped), load_or_skip(dataset, int(r), skipped)
        if query is None or reference is None:
            yield step(k, kind)
            continue
        use_oracle = oracle_quota[kind] > 0
        oracle_quota[kind] -= int(use_oracle)
        job = pair_faithfulness(model, query, reference, methods,
                                baseline, steps, use_oracle, dev, batch_size, seed + k, grad_bank, cancel)
        result = None
        for event in job:
            if event.kind == "done":
                result = event.data["result"]
        fractions = result["fractions"]
        clock.add(use_oracle, result)
        for name, values in result["methods"].items():
            per_pair[kind].setdefault(name, []).append({**values, "oracle_pair": use_oracle})
        yield step(k, kind)
    if not fractions:
        raise ValueError(f"none of the {len(jobs)} pairs could be read; see the warnings above")
    if skipped:
        log.warning("faithfulness skipped %d unreadable image(s); AUCs are over the pairs read", len(skipped))
    results = []
    for name in [*methods, RANDOM, ORACLE]:
        if name not in per_pair["same"] and name not in per_pair["different"]:
            continue
        entry = {"method": name, "baseline": baseline, "steps": int(steps), "fractions": fractions}
        entry.update(_summary(per_pair["same"].get(name, [])))
        entry["different_class"] = _summary(per_pair["different"].get(name, []))
        results.append(entry)
    yield Progress("done", len(jobs), len(jobs), data={"result": results})

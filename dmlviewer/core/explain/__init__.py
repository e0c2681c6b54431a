"""Explanations of DML similarities: activation decomposition and point-to-point maps (seed 000),
the Grad-CAM family and grad-weight transfer (seed 000 Sec. 4.3, seed 002), attention maps
(seeds 001, 003, 004), localization and part-correspondence scores, region retrieval.

Modules: ``pairwise`` (Eq. 3 on contribution tensors), ``decomposition`` (E = sum C + B; the generic rule is ``core.models.jacobian``),
``pair`` (:class:`PairExplanation`), ``grid`` (pixel/grid alignment), ``hover`` (allocation-free
hover rendering), ``gradcam``, ``grad_transfer``, ``attention``, ``boxes``, ``localization``,
``matches``, ``correspondence``, ``groups`` (per-group maps of a pair), ``region``.
"""

# The names below are imported on first use (PEP 562), so that light modules of this package
# (``grid``, ``hover``: numpy and OpenCV only) can be imported without torch, e.g. by the
# GUI before its window is up.
import importlib

_EXPORTS = {
    "attention_maps": "attention",
    "box_from_map": "boxes", "iou": "boxes", "parse_thresholds": "boxes",
    "correspond": "correspondence",
    "decompose": "decomposition", "head_function": "decomposition",
    "GradWeightBank": "grad_transfer", "add_grad_weights": "grad_transfer",
    "compute_grad_weights": "grad_transfer", "read_grad_weights": "grad_transfer",
    "group_diversity": "groups", "group_maps": "groups",
    "HoverRenderer": "hover", "colormap_lut": "hover",
    "as_rgb": "inputs", "Explanation": "record",
    "DEFAULT_THRESHOLDS": "localization", "PAIRINGS": "localization", "localize": "localization",
    "SIDES": "pair", "PairExplanation": "pair", "explain_pair": "pair",
    "region_feature": "region", "region_query": "region",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))

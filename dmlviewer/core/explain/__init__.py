"""Explanations of DML similarities: activation decomposition and point-to-point maps (seed 000),
the Grad-CAM family and grad-weight transfer (seed 000 Sec. 4.3, seed 002), attention maps
(seeds 001, 003, 004), localization and part-correspondence scores, region retrieval.

Modules: ``pairwise`` (Eq. 3 on contribution tensors), ``decomposition``/``jacobian`` (E = sum C + B),
``pair`` (:class:`PairExplanation`), ``grid`` (pixel/grid alignment), ``hover`` (allocation-free
hover rendering), ``gradcam``, ``grad_transfer``, ``attention``, ``boxes``, ``localization``,
``matches``, ``correspondence``, ``groups`` (per-group maps of a pair), ``region``.
"""

from dmlviewer.core.explain.attention import attention_maps
from dmlviewer.core.explain.boxes import box_from_map, iou, parse_thresholds
from dmlviewer.core.explain.correspondence import correspond
from dmlviewer.core.explain.decomposition import decompose, head_function
from dmlviewer.core.explain.grad_transfer import (
    GradWeightBank,
    add_grad_weights,
    compute_grad_weights,
    read_grad_weights,
)
from dmlviewer.core.explain.groups import group_diversity, group_maps
from dmlviewer.core.explain.hover import HoverRenderer, colormap_lut
from dmlviewer.core.explain.localization import DEFAULT_THRESHOLDS, PAIRINGS, localize
from dmlviewer.core.explain.pair import METHODS, SIDES, PairExplanation, as_rgb, explain_pair
from dmlviewer.core.explain.region import region_feature, region_query

__all__ = [
    "DEFAULT_THRESHOLDS", "METHODS", "PAIRINGS", "SIDES",
    "GradWeightBank", "HoverRenderer", "PairExplanation",
    "add_grad_weights", "as_rgb", "attention_maps", "box_from_map", "colormap_lut",
    "compute_grad_weights", "correspond", "decompose", "explain_pair", "group_diversity", "group_maps",
    "head_function", "iou",
    "localize", "parse_thresholds", "read_grad_weights", "region_feature", "region_query",
]

"""The small random two-branch model the cross-view tests share: one ``small_cnn`` per branch
(separate weights, same config) at a panorama shape and a square aerial size."""

from __future__ import annotations

import torch


def tiny_two_branch(query_shape: tuple[int, int], reference_size: int, seed: int = 0, **branch_options):
    """A :class:`~dmlviewer.core.models.two_branch.TwoBranchModel` in eval mode, seeded by ``seed``;
    ``branch_options`` go to ``default_config`` (``dim`` defaults to 16)."""
    from dmlviewer.core.models.model import default_config
    from dmlviewer.core.models.two_branch import build_two_branch

    torch.manual_seed(seed)
    branch = default_config(**{"backbone": "small_cnn", "dim": 16, **branch_options})
    return build_two_branch({"branches": {"query": branch, "reference": dict(branch)},
                             "input_shapes": {"query": list(query_shape),
                                              "reference": [reference_size, reference_size]}}).eval()

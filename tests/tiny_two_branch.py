"""What the cross-view tests share: a small random two-branch model (one ``small_cnn`` per
branch, separate weights, same config) at a panorama shape and a square aerial size, and a
street and an aerial resnet18 encoder "trained elsewhere" for the import and code doors."""

from __future__ import annotations

from pathlib import Path

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


def tiny_two_branch_checkpoint(folder, query_shape: tuple[int, int], reference_size: int) -> Path:
    """:func:`tiny_two_branch` saved as ``folder/two.pt`` (a dmlviewer checkpoint); its path."""
    from dmlviewer.core.models import save_checkpoint

    return save_checkpoint(Path(folder) / "two.pt", tiny_two_branch(query_shape, reference_size))


def resnet_encoder(seed: int, dim: int) -> torch.nn.Module:
    """A torchvision resnet18 with a ``dim``-d ``fc`` embedding, as a street or aerial encoder
    trained elsewhere: random weights and non-trivial BatchNorm statistics."""
    import torchvision

    torch.manual_seed(seed)
    net = torchvision.models.resnet18(num_classes=dim).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
    return net


def save_encoders(folder) -> dict:
    """A street and an aerial encoder (16-d) and a 10-d aerial one, saved as ``NAME.pth`` state
    dicts in ``folder``; the modules by name."""
    nets = {"street": resnet_encoder(0, 16), "aerial": resnet_encoder(1, 16), "aerial10": resnet_encoder(2, 10)}
    for name, net in nets.items():
        torch.save(net.state_dict(), folder / f"{name}.pth")
    return nets

"""Deletion curves against Quantus's Pixel-Flipping metric (skipped when ``quantus`` is not
installed: it pulls pandas, matplotlib, scikit-image and the non-headless OpenCV, so it is not
part of the dev extra).

Where the two definitions coincide: Quantus scores a classifier's logit, so the model is wrapped
as a one-class classifier whose logit is the cosine similarity of its input to the fixed
reference embedding; the attribution is the Decomposition grid map replicated over each cell's
pixels and channels, so Quantus's ranking of single features (descending attribution) flips whole
cells in our order; ``features_in_step`` is the size of ``n / steps`` cells (channels included:
Quantus broadcasts the attribution over the channels but asserts that the step divides the
number of *pixels*, so the input is 96 px, a 6 x 6 grid, 3 cells a step); the perturbation
writes our baseline image's values. Where they differ: Quantus's curve has no point for the
unperturbed input (it starts after the first step), and its AUC is ``np.trapz`` with ``dx = 1``
over the ``steps`` points (``np.trapz`` is gone from NumPy 2.4, so Quantus 0.6's own
``return_auc_per_sample`` fails there; the area is recomputed here with ``np.trapezoid``), while
ours integrates ``steps + 1`` points over the fraction of cells, ``dx = 1 / steps``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

quantus = pytest.importorskip("quantus")

from dmlviewer.core.data import load_image, open_dataset  # noqa: E402
from dmlviewer.core.explain import explain_pair  # noqa: E402
from dmlviewer.core.explain.faithfulness import pair_faithfulness  # noqa: E402
from dmlviewer.core.explain.perturb import baseline_input  # noqa: E402
from dmlviewer.core.models import build_model, default_config  # noqa: E402
from dmlviewer.core.progress import run_to_end  # noqa: E402


class CosineClassifier(torch.nn.Module):
    """A classifier-shaped wrapper: one logit, the cosine of the input to a fixed reference."""

    def __init__(self, model: torch.nn.Module, reference: np.ndarray) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("reference", torch.from_numpy(reference.astype(np.float32)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.model(x.float()).embedding @ self.reference)[:, None]


@pytest.mark.parametrize("kind", ["blur", "noise"])
def test_deletion_curve_equals_quantus_pixel_flipping(tiny_demo_root, kind):
    torch.manual_seed(0)
    model = build_model(default_config(backbone="small_cnn", pooling="gap", dim=16, image_size=96)).eval()
    dataset = open_dataset(tiny_demo_root)
    test = dataset.indices("test")
    q, r = load_image(dataset.abspath(int(test[1]))), load_image(dataset.abspath(int(test[9])))
    steps = 12  # 3 of the 36 cells per step
    ours = run_to_end(pair_faithfulness(model, q, r, ["decomposition"], baseline=kind, steps=steps, oracle=False))
    ours = ours["methods"]["decomposition"]

    expl = explain_pair(model, q, r)
    grid = expl.grid_query
    assert grid == (6, 6)  # 16 x 16 pixel cells
    attribution = np.kron(expl.overall_grid("decomposition", "query"), np.ones((16, 16), np.float32))
    assert len(np.unique(attribution)) == 36
    x = model.preprocess(q)
    base = baseline_input(x, kind, grid, seed=0).numpy().reshape(1, -1)

    def replace_by_baseline(arr, indices, **kwargs):
        out = arr.copy()
        for b in range(len(arr)):
            out[b, indices[b]] = base[0, indices[b]]
        return out

    # features_in_step counts channels too (the attribution is broadcast to 3 x H x W), but
    # Quantus asserts that it divides H x W: 3 cells x 3 channels x 256 pixels divides 96 x 96
    metric = quantus.PixelFlipping(features_in_step=3 * 3 * 16 * 16, normalise=False, abs=False,
                                   perturb_func=replace_by_baseline, disable_warnings=True)
    wrapper = CosineClassifier(model, expl.embedding("reference")).eval()
    curves = metric(model=wrapper, x_batch=x[None].numpy(), y_batch=np.array([0]),
                    a_batch=attribution[None, None], channel_first=True, softmax=False, device="cpu")
    quantus_curve = np.asarray(curves[0], np.float64)
    assert quantus_curve.shape == (steps,)
    np.testing.assert_allclose(quantus_curve, ours["deletion"][1:], atol=2e-6)
    # the two areas: Quantus integrates its steps points with dx = 1, we integrate steps + 1
    # points (the unperturbed similarity first) over the fraction of cells
    quantus_auc = float(np.trapezoid(quantus_curve, dx=1))
    ours_from_quantus = (float(np.trapezoid(np.r_[expl.similarity, quantus_curve], dx=1))) / steps
    assert ours["deletion_auc"] == pytest.approx(ours_from_quantus, abs=2e-6)
    assert quantus_auc != pytest.approx(ours["deletion_auc"], abs=1e-3)  # different scales, same curve

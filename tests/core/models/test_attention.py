"""DeML object attention (seed 004 Eq. 2-3) and crop-and-zoom."""

from __future__ import annotations

import torch

from dmlviewer.core.models import attention_box, crop_and_zoom, random_walk_attention, transition_matrix


def _stationary(d: torch.Tensor) -> torch.Tensor:
    """Leading left eigenvector of a row-stochastic matrix, normalized to sum one."""
    values, vectors = torch.linalg.eig(d.double().T)
    lead = vectors[:, values.real.argmax()].real
    return lead / lead.sum()


def test_transition_matrix_is_the_row_normalized_distance_graph():
    fm = torch.randn(1, 6, 3, 4, generator=torch.Generator().manual_seed(0))
    d = transition_matrix(fm)[0]
    u = fm.flatten(2)[0].T
    dist = torch.cdist(u, u)
    assert torch.allclose(d, dist / dist.sum(1, keepdim=True), atol=1e-6)  # Eq. 2 + normalization
    assert torch.allclose(d.sum(1), torch.ones(12)) and torch.all(d.diagonal() == 0)


def test_random_walk_reaches_the_stationary_distribution():
    fm = torch.randn(2, 16, 5, 6, generator=torch.Generator().manual_seed(1))
    d = transition_matrix(fm)
    converged = random_walk_attention(fm, steps=200)
    ten = random_walk_attention(fm, steps=10)
    assert converged.shape == ten.shape == (2, 1, 5, 6)
    for b in range(2):
        pi = _stationary(d[b]).float()
        assert torch.allclose(converged[b].flatten(), pi, atol=1e-6)
        assert (ten[b].flatten() - pi).abs().sum() < 1e-3  # T = 10 is already stable (Sec. 3.1)
        assert torch.allclose(pi @ d[b], pi, atol=1e-6)
    assert torch.allclose(ten.sum((2, 3)), torch.ones(2, 1), atol=1e-6)
    # the start is uniform and is not a fixed point: the walk moved mass
    assert (ten.flatten(1) - 1 / 30).abs().max() > 1e-4


def test_identical_features_give_uniform_attention():
    out = random_walk_attention(torch.ones(1, 4, 3, 3))
    assert torch.allclose(out, torch.full((1, 1, 3, 3), 1 / 9))


def test_layers_are_resized_normalized_and_averaged():
    a = torch.randn(1, 8, 8, 8, generator=torch.Generator().manual_seed(2))
    b = torch.randn(1, 8, 4, 4, generator=torch.Generator().manual_seed(3))
    both = random_walk_attention([a, b], size=(16, 16))
    assert both.shape == (1, 1, 16, 16) and torch.allclose(both.sum(), torch.tensor(1.0))
    single = [torch.nn.functional.interpolate(random_walk_attention(m), size=(16, 16), mode="bilinear")
              for m in (a, b)]
    expected = sum(s / s.sum() for s in single) / 2
    assert torch.allclose(both, expected, atol=1e-7)


def test_crop_and_zoom_cuts_the_attended_box():
    y, x = torch.meshgrid(torch.arange(64.0), torch.arange(64.0), indexing="ij")
    image = torch.stack([x, y, x + 10 * y])[None].repeat(2, 1, 1, 1)  # linear ramps: bilinear is exact
    attention = torch.zeros(2, 1, 4, 4)
    attention[0, 0, 1:3, 1:3] = 1.0      # 16 px cells: box (16, 16)-(48, 48)
    attention[1] = 1.0                   # flat: the whole image
    boxes = attention_box(attention, (64, 64))
    assert boxes.tolist() == [[16.0, 16.0, 48.0, 48.0], [0.0, 0.0, 64.0, 64.0]]
    crops = crop_and_zoom(image, attention, 32)
    assert crops.shape == (2, 3, 32, 32)
    assert torch.allclose(crops[0], image[0, :, 16:48, 16:48], atol=1e-4)
    zoomed = crop_and_zoom(image[:1], attention[:1], 64)  # zoom x2: half-pixel steps
    assert torch.allclose(zoomed[0, 0, 0, :4], torch.tensor([15.75, 16.25, 16.75, 17.25]), atol=1e-4)

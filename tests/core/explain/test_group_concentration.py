"""Where a group's share is: the fewest cells carrying 80 % of a map's positive part
(``core.explain.groups.concentration``, issue 42 item 6)."""

from __future__ import annotations

import numpy as np
import pytest

from dmlviewer.core.explain.groups import concentration


def test_the_fewest_strongest_cells_that_carry_the_fraction():
    grid = np.zeros((4, 4))
    grid[0, 1], grid[2, 3], grid[3, 0] = 5.0, 3.0, 1.0  # positive part 10 (plus a negative cell)
    grid[1, 1] = -4.0
    grid[3, 3] = 1.0
    mask = concentration(grid, 0.8)
    assert mask.shape == (4, 4) and mask.dtype == bool
    assert set(zip(*np.nonzero(mask))) == {(0, 1), (2, 3)}  # 5 + 3 = 8 = 80 % of 10; negatives left out
    assert concentration(grid, 0.81).sum() == 3  # one more cell once 8 is not enough
    assert concentration(grid, 0.5).sum() == 1  # 5 of 10


def test_a_map_without_a_positive_part_has_no_cells():
    assert not concentration(-np.ones((3, 3))).any()
    assert not concentration(np.zeros((2, 5))).any()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_on_random_maps_no_smaller_set_of_cells_carries_the_fraction(seed):
    grid = np.random.default_rng(seed).standard_normal((7, 9)) ** 3
    mask = concentration(grid, 0.8)
    positive = np.maximum(grid, 0.0)
    total = positive.sum()
    assert positive[mask].sum() >= 0.8 * total * (1 - 1e-9)
    weakest_in = positive[mask].min()
    # dropping the weakest chosen cell leaves less than the fraction: the set is the smallest
    assert positive[mask].sum() - weakest_in < 0.8 * total
    assert np.all(positive[~mask] <= weakest_in)  # and made of the strongest cells

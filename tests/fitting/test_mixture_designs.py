"""UniMax, epoch caps and Dirichlet designs (fitting.data.sampling)."""

import numpy as np
import pytest

from fitting.data.sampling import dirichlet_mixtures, epoch_cap_weights, unimax_weights


def test_unimax_caps_small_datasets_and_spreads_the_rest_uniformly():
    # caps 400 / 4,000 / 40,000 / 200,000 of a 40,000 budget: the two small ones are capped,
    # the remaining 35,600 split equally (Chung et al. 2023, Alg. 1 by hand)
    w = unimax_weights([100, 1000, 10000, 50000], 40000, 4)
    np.testing.assert_allclose(w, [0.01, 0.1, 0.445, 0.445])


def test_unimax_is_uniform_when_nothing_binds_and_proportional_to_caps_when_everything_does():
    np.testing.assert_allclose(unimax_weights([5e5, 1e6, 2e6], 3e5, 1), [1 / 3] * 3)
    np.testing.assert_allclose(unimax_weights([10, 30], 1000, 2), [0.25, 0.75])


def test_unimax_never_exceeds_the_epoch_cap_when_the_budget_fits():
    sizes = np.array([300, 2000, 7000, 9000, 40000.0])
    w = unimax_weights(sizes, 20000, 3)
    assert np.all(w * 20000 <= epoch_cap_weights(sizes, 20000, 3) * 20000 + 1e-9)
    assert w.sum() == pytest.approx(1.0)


def test_epoch_caps_name_bad_arguments():
    with pytest.raises(ValueError, match="budget"):
        epoch_cap_weights([1, 2], 0, 1)
    with pytest.raises(ValueError, match="epochs"):
        unimax_weights([1, 2], 10, -1)


def test_dirichlet_mixtures_are_seeded_rows_of_the_simplex():
    a = dirichlet_mixtures(5, 4, seed=3)
    assert a.shape == (4, 5)
    np.testing.assert_allclose(a.sum(axis=1), 1.0)
    np.testing.assert_array_equal(a, dirichlet_mixtures(5, 4, seed=3))
    assert not np.array_equal(a, dirichlet_mixtures(5, 4, seed=4))
    sparse = dirichlet_mixtures(6, 50, concentration=0.3, seed=0, min_weight=0.05)
    assert np.all((sparse == 0) | (sparse >= 0.05))  # dropped weights' mass is renormalised
    assert (sparse == 0).any()
    np.testing.assert_allclose(sparse.sum(axis=1), 1.0)

"""The design room: parametric fits, the information algebra, the strategies and the loop."""

from __future__ import annotations

import numpy as np
import pytest

from fitting.design import (
    STRATEGIES,
    ParametricLaw,
    fisher_information,
    fit_parametric,
    jacobian,
    simulate_design,
    target_variance,
    variance_reduction,
)
from fitting.laws.budget.data_constrained import data_constrained_loss
from fitting.laws.budget.farseer import farseer_loss

TRUE = np.array([1.7, 400.0, 0.34, 410.0, 0.28])  # E, A, α, B, β (Hoffmann et al.'s values)


def chinchilla(T, X):
    E, A, a, B, b = T[:, :, None]
    return E + A / X[:, 0] ** a + B / X[:, 1] ** b


LAW = ParametricLaw("chinchilla", chinchilla,
                    [(0.5, 3.0), (1.0, 1e5), (0.1, 0.8), (1.0, 1e5), (0.1, 0.8)])


def pool(rng, n=120):
    N = np.exp(rng.uniform(np.log(1e6), np.log(3e8), n))
    D = np.exp(rng.uniform(np.log(1e8), np.log(3e10), n))
    return np.column_stack([N, D]), 6 * N * D


def test_normalised_coordinates_round_trip_and_use_log_scale_for_wide_boxes():
    theta = np.array([1.2, 3e3, 0.5, 7.0, 0.2])
    assert np.allclose(LAW.to_theta(LAW.to_u(theta)), theta)
    # A's box spans five decades: the middle of u is the geometric middle
    assert LAW.to_theta(np.full(5, 0.5))[1] == pytest.approx(np.sqrt(1e5), rel=1e-9)
    assert LAW.to_theta(np.full(5, 0.5))[0] == pytest.approx(1.75)


def test_fit_recovers_a_known_law_from_exact_points():
    rng = np.random.default_rng(0)
    X, _ = pool(rng, 60)
    y = LAW.predict_u(LAW.to_u(TRUE), X)
    fit = fit_parametric(LAW, X, y, rng=rng, n_starts=8)
    assert np.allclose(fit.theta, TRUE, rtol=1e-3)
    assert fit.rss < 1e-12


def test_variance_reduction_equals_the_drop_computed_by_refactoring():
    rng = np.random.default_rng(1)
    X, _ = pool(rng, 30)
    u = LAW.to_u(TRUE)
    J = jacobian(LAW, u, X)
    target = jacobian(LAW, u, np.array([[1e10, 2e11], [3e9, 1e12]]))
    chosen, sigma2 = [0, 3, 7, 9], 1e-4
    info = fisher_information(J[chosen], sigma2)
    drop = variance_reduction(info, J, target, sigma2)
    for c in (1, 11, 29):
        after = fisher_information(J[chosen + [c]], sigma2)
        exact = target_variance(info, target).mean() - target_variance(after, target).mean()
        assert drop[c] == pytest.approx(exact, rel=1e-6)


def test_the_loop_keeps_to_the_budget_and_never_repeats_a_run():
    rng = np.random.default_rng(2)
    X, cost = pool(rng, 80)
    y = LAW.predict_u(LAW.to_u(TRUE), X)[:, 0]
    for strategy in STRATEGIES:
        steps = simulate_design(LAW, X, y, cost, X[:2] * 30, (0.05, 0.2), strategy,
                                np.random.default_rng(3))
        for step in steps:
            assert step.spent <= step.fraction * cost.sum() * (1 + 1e-9)
            assert len(set(step.chosen)) == len(step.chosen)
            assert step.spent == pytest.approx(cost[step.chosen].sum())
        assert steps[0].chosen == steps[1].chosen[: len(steps[0].chosen)]  # cumulative


def _target_error(strategy, seed):
    rng = np.random.default_rng(seed)
    X, cost = pool(rng)
    truth = LAW.predict_u(LAW.to_u(TRUE), X)[:, 0]
    y = truth * np.exp(rng.normal(0, 0.01, len(X)))
    target = np.array([[3e9, 1e11], [1e10, 3e11]])
    step = simulate_design(LAW, X, y, cost, target, (0.1,), strategy, np.random.default_rng(seed))[0]
    exact = LAW.predict_u(LAW.to_u(TRUE), target)[:, 0]
    return np.sqrt(np.mean((step.fit.predict(target)[:, 0] / exact - 1) ** 2))


def test_target_variance_per_cost_predicts_the_target_better_than_random_runs():
    """Known law, 1 % noise, 10 % of the pool's cost: ours' error at the far target is smaller."""
    ours = [_target_error("ours", s) for s in range(6)]
    rand = [_target_error("random", s) for s in range(6)]
    assert np.median(ours) < np.median(rand)


def test_data_constrained_law_reduces_to_chinchilla_for_one_epoch_of_unique_data():
    theta = np.array([400.0, 5.0, 410.0, 15.0, 0.3, 1.7, 2.0])
    N, D = np.array([1e8, 5e8]), np.array([2e9, 1e10])
    one_epoch = data_constrained_loss(theta, D, N, D)
    assert np.allclose(one_epoch, 400 / N**0.3 + 410 / D**0.3 + 1.7)
    # the same tokens from a quarter of the unique data are worth less
    assert np.all(data_constrained_loss(theta, D / 4, N, D) > one_epoch)


def test_farseer_law_with_size_independent_terms_is_a_power_law_in_data():
    theta = np.array([-1.0, 0.0, 0.1, 0.2, 10.0, -0.1, -5.0, 0.0, 0.1])  # s = A = 0
    D = np.array([1e9, 1e10])
    exponent = np.exp(-1.0)
    expected = np.exp(0.2) + np.exp(10.0 * 1e8 ** -0.1 - 5.0) * D ** -exponent
    assert np.allclose(farseer_loss(theta, np.full(2, 1e8), D), expected)

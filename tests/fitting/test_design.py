"""The design room: parametric fits, the information algebra, the strategies and the loop."""

from __future__ import annotations

import numpy as np
import pytest

from fitting.design import (
    STRATEGIES,
    DesignState,
    FitObjective,
    FitSettings,
    ParametricLaw,
    PredictionGuard,
    fisher_information,
    fit_parametric,
    jacobian,
    simulate_design,
    target_variance,
    variance_reduction,
    weighted_information,
)
from fitting.laws.budget.data_constrained import data_constrained_loss
from fitting.laws.budget.farseer import farseer_loss

TRUE = np.array([1.7, 400.0, 0.34, 410.0, 0.28])  # E, A, α, B, β (Hoffmann et al.'s values)


def chinchilla(T, X):
    E, A, a, B, b = T[:, :, None]
    return E + A / X[:, 0] ** a + B / X[:, 1] ** b


LAW = ParametricLaw("chinchilla", chinchilla,
                    [(0.5, 3.0), (1.0, 1e5), (0.1, 0.8), (1.0, 1e5), (0.1, 0.8)],
                    ("E", "A", "alpha", "B", "beta"))


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


def test_the_guard_keeps_an_unpinned_prediction_in_band_and_leaves_a_pinned_fit_alone():
    # c + d·x²: runs at x = 0 leave d free, and a start at d = 1 predicts c + 100 at x = 10
    law = ParametricLaw("free", lambda T, X: T[0][:, None] + T[1][:, None] * X[:, 0] ** 2,
                        [(0.0, 2.0), (0.0, 2.0)])
    X, y, target = np.zeros((5, 1)), np.ones(5), np.array([[10.0]])
    warm = np.array([0.3, 0.5])
    plain = fit_parametric(law, X, y, rng=np.random.default_rng(0), n_starts=0, warm=warm)
    guard = PredictionGuard.around(target, y)
    guarded = fit_parametric(law, X, y, rng=np.random.default_rng(0), n_starts=0, warm=warm,
                             objective=FitObjective(guard=guard))
    assert plain.predict(target)[0, 0] > 50
    assert guard.low[0] - 1e-6 <= guarded.predict(target)[0, 0] <= guard.high[0] + 1e-6
    assert guarded.rss < 1e-12 and plain.rss < 1e-12  # the runs fit equally well either way
    # where the runs pin the law and the target is in band, the guard changes nothing
    rng = np.random.default_rng(0)
    Xc, _ = pool(rng, 60)
    yc = LAW.predict_u(LAW.to_u(TRUE), Xc)
    fit = fit_parametric(LAW, Xc, yc, rng=rng, n_starts=8,
                         objective=FitObjective(guard=PredictionGuard.around(Xc[:5] * 2, yc)))
    assert np.allclose(fit.theta, TRUE, rtol=1e-3)


def test_cost_weights_pull_a_misspecified_fit_toward_the_costly_runs_and_rss_stays_plain():
    # a constant cannot fit 0, 0, 1: unweighted it lands at the mean, weighted near the costly run
    law = ParametricLaw("constant", lambda T, X: np.repeat(T[0][:, None], len(X), axis=1),
                        [(-1.0, 2.0)])
    X, y, cost = np.zeros((3, 1)), np.array([0.0, 0.0, 1.0]), np.array([1.0, 1.0, 100.0])
    plain = FitSettings(n_starts=2).fit(law, X, y, np.random.default_rng(0), cost=cost)
    weighted = FitSettings(n_starts=2, cost_weight=1.0).fit(law, X, y, np.random.default_rng(0),
                                                            cost=cost)
    assert plain.theta[0] == pytest.approx(1 / 3, abs=1e-6)
    assert weighted.theta[0] == pytest.approx(100 / 102, abs=1e-6)
    assert weighted.rss == pytest.approx(2 * (100 / 102) ** 2 + (2 / 102) ** 2, rel=1e-6)
    direct = fit_parametric(law, X, y, rng=np.random.default_rng(0), n_starts=2,
                            objective=FitObjective(weights=cost / 100))
    assert direct.theta[0] == pytest.approx(weighted.theta[0], abs=1e-9)


def test_under_a_cost_weighted_fit_ours_counts_a_cheap_run_as_teaching_less():
    # two candidates at the same point, one 100 times cheaper; cost left out of the score
    X = np.array([[1e8, 1e10], [1e8, 1e10], [3e7, 1e9], [3e8, 3e9]])
    cost = np.array([1.0, 100.0, 50.0, 50.0])
    target = np.array([[3e9, 1e11]])

    def state(cost_weight):
        s = DesignState(LAW, X, cost, target, np.random.default_rng(0), chosen=[2, 3],
                        cost_power=0.0, cost_weight=cost_weight)
        s.fit = fit_parametric(LAW, X[[2, 3]], LAW.predict_u(LAW.to_u(TRUE), X[[2, 3]]),
                               rng=np.random.default_rng(0), n_starts=2)
        s.refresh_jacobians()
        return s

    plain, weighted = state(0.0), state(1.0)
    info, jac = weighted_information(plain, np.array([0, 1]))
    assert np.array_equal(info, plain.info()) and np.array_equal(jac, plain.jac_pool[[0, 1]])
    assert STRATEGIES["ours"](plain, np.array([0, 1])) == 0  # a tie: the first
    assert STRATEGIES["ours"](weighted, np.array([0, 1])) == 1
    info, jac = weighted_information(weighted, np.array([0, 1]))
    assert np.allclose(jac[0], weighted.jac_pool[0] / 10) and np.allclose(jac[1], weighted.jac_pool[1])


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


def _study_tables(tmp_path, rng):
    N = np.exp(rng.uniform(np.log(1e6), np.log(1e8), 60))
    D = np.exp(rng.uniform(np.log(1e8), np.log(1e10), 60))
    loss = LAW.predict_u(LAW.to_u(TRUE), np.column_stack([N, D]))[:, 0]
    loss = loss * np.exp(rng.normal(0, 0.005, 60))
    import pandas as pd

    table = pd.DataFrame({"params": N, "tokens": D, "val_loss": loss})
    table[:12].to_csv(tmp_path / "done.csv", index=False)
    table[12:].to_csv(tmp_path / "pool.csv", index=False)
    return table


def _design(tmp_path, capsys, *extra):
    import json

    from fitting.cli import main

    rc = main(["design", str(tmp_path / "done.csv"), "--pool", str(tmp_path / "pool.csv"),
               "--target", "n=1e9,d=2e11", "--columns", "n=params,d=tokens,loss=val_loss",
               "--json", *extra])
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if rc == 0 else out.err)


def test_design_cli_plans_within_the_budget_and_the_predicted_interval_narrows(tmp_path, capsys):
    table = _study_tables(tmp_path, np.random.default_rng(5))
    rc, res = _design(tmp_path, capsys, "--budget", "10%")
    assert rc == 0
    pool_cost = float((6 * table.params * table.tokens)[12:].sum())
    assert res["spent"] <= 0.1 * pool_cost * (1 + 1e-12)
    widths = [c["target_half_width_rel_after"][0] for c in res["chosen"]]
    assert widths and np.all(np.diff(widths) <= 1e-12)
    assert widths[-1] < res["target_now"][0]["half_width_rel"]
    rows = [c["row"] for c in res["chosen"]]
    assert len(set(rows)) == len(rows)


def test_design_cli_simulation_reveals_the_chosen_runs_and_reports_the_target(tmp_path, capsys):
    table = _study_tables(tmp_path, np.random.default_rng(6))
    rc, res = _design(tmp_path, capsys, "--budget", "10%", "--simulate")
    assert rc == 0
    pool = table[12:].reset_index(drop=True)
    for c in res["chosen"]:
        assert c["loss"] == pytest.approx(pool.val_loss[c["row"]])
    exact = LAW.predict_u(LAW.to_u(TRUE), np.array([[1e9, 2e11]]))[0, 0]
    after = res["target_after"][0]
    assert after["prediction"] == pytest.approx(exact, rel=0.05)


def test_design_cli_names_the_missing_column_and_exits_2(tmp_path, capsys):
    _study_tables(tmp_path, np.random.default_rng(7))
    from fitting.cli import main

    rc = main(["design", str(tmp_path / "done.csv"), "--pool", str(tmp_path / "pool.csv"),
               "--target", "n=1e9,d=2e11", "--budget", "5%"])
    err = capsys.readouterr().err
    assert rc == 2 and "missing column" in err and "'n'" in err and "--columns" in err


def test_design_from_a_prior_alone_plans_and_each_pick_narrows_the_target(tmp_path, capsys):
    import json

    from fitting.cli import main

    _study_tables(tmp_path, np.random.default_rng(8))
    prior = tmp_path / "prior.json"
    prior.write_text(json.dumps({"params": dict(zip(LAW.param_names, TRUE.tolist(), strict=True)),
                                 "sigma": 0.01}))
    args = ["design", "--pool", str(tmp_path / "pool.csv"), "--target", "n=1e9,d=2e11",
            "--columns", "n=params,d=tokens,loss=val_loss", "--budget", "5%", "--json"]
    assert main([*args, "--prior", str(prior)]) == 0
    res = json.loads(capsys.readouterr().out)
    widths = [c["target_half_width_rel_after"][0] for c in res["chosen"]]
    assert len(widths) >= 2 and np.all(np.diff(widths) <= 1e-12)
    assert widths[-1] < res["target_now"][0]["half_width_rel"]
    assert main([*args, "--prior", str(tmp_path / "missing.json")]) == 2
    assert "--prior" in capsys.readouterr().err
    assert main([*args]) == 2  # neither TABLE nor --prior


def test_identify_first_picks_as_d_optimal_until_the_law_has_as_many_values_as_parameters():
    rng = np.random.default_rng(9)
    X, cost = pool(rng, 60)
    y = LAW.predict_u(LAW.to_u(TRUE), X)[:, 0]
    cost = np.ones(len(X))  # cost plays no part: the two criteria alone differ
    target = np.array([[3e9, 1e11]])

    def picks(strategy, identify_first):
        return simulate_design(LAW, X, y, cost, target, (8 / 60,), strategy,
                               np.random.default_rng(1), identify_first=identify_first)[0].chosen

    d_opt, hybrid, ours = picks("d_optimal", False), picks("ours", True), picks("ours", False)
    assert hybrid[:LAW.n_params] == d_opt[:LAW.n_params]
    assert ours[:LAW.n_params] != d_opt[:LAW.n_params]


def test_the_mixture_objective_is_the_preference_weighted_mean_of_the_pairs_losses():
    """mixture_objective on mixture_across_sizes' parameters: log of Σ π_i L_i / Σ π_i over the
    pairs with π_i > 0, whatever the domain mask; the per-pair law outputs 0 outside it."""
    from fitting.design.laws import mixture_across_sizes, mixture_objective

    law = mixture_across_sizes(3)
    objective = mixture_objective(law, 3, np.array([0.0, 1.0, 3.0]))
    u = np.random.default_rng(0).random(law.n_params)
    X = np.array([[0.5, 0.2, 0.3, 0.5, 1, 1, 1], [2.0, 0.0, 1.0, 0.0, 0, 1, 0]])
    losses = np.exp(law.predict_u(u, X[:1]))[0]
    assert objective.predict_u(u, X[:1])[0, 0] == pytest.approx(
        np.log((losses[1] + 3 * losses[2]) / 4))
    assert law.predict_u(u, X[1:])[0, [0, 2]].tolist() == [0.0, 0.0]
    assert law.jacobian_u(u, X[1:])[0, [0, 2]].any() == np.False_
    with pytest.raises(ValueError, match="need 3 preferences"):
        mixture_objective(law, 3, np.array([0.0, 0.0, 0.0]))


def test_a_plan_for_a_function_of_the_outputs_targets_that_function():
    """plan_batch with target_law: the objective's predicted sd after the batch is the one
    current_target_sd gives with the batch trained, and differs from the first pair's own."""
    from fitting.design.laws import mixture_across_sizes, mixture_objective
    from fitting.design.parametric import ParametricFit
    from fitting.design.plan import current_target_sd, plan_batch

    law = mixture_across_sizes(3)
    objective = mixture_objective(law, 3, np.array([1.0, 1.0, 1.0]))
    u = np.full(law.n_params, 0.5)
    fit = ParametricFit(law, u, law.to_theta(u), 0.0, 0, 1e-4)
    rng = np.random.default_rng(1)
    W = rng.dirichlet(np.ones(3), 12)
    X = np.column_stack([np.repeat([0.2, 0.5, 1.0], 4), W, np.ones((12, 3))])
    target = np.array([[1.0, 0.2, 0.4, 0.4, 1, 1, 1]])
    picks = plan_batch(fit, X[:6], X[6:], np.ones(6), target, 2.0, target_law=objective)
    trained = np.concatenate([X[:6], X[6:][[p.index for p in picks]]])
    assert picks[-1].target_sd[0] == pytest.approx(
        current_target_sd(fit, trained, target, objective)[0])
    own = plan_batch(fit, X[:6], X[6:], np.ones(6), target, 2.0)
    assert own[-1].target_sd[0] != pytest.approx(picks[-1].target_sd[0], rel=0.01)

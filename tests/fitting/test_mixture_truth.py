"""Honest validation of the mixture laws: each of the four forms in turn generates the data
(with noise) and cross-validation, refitting every fold from the start grids, chooses it with
all four forms (``joint`` included) competing."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from fitting.laws.mixture.compare import compare_mixture_laws, cv_folds
from fitting.laws.mixture.laws import FORMS, MixtureLawFit, attach_bootstrap, refit_mixture_law
from fitting.laws.mixture.runs import MixtureRuns, read_wide_runs
from fitting.test_utils import known_truth_mixture_runs

PAIRS = ["en-a", "en-b", "en-c"]
SIZES = [1e7, 3e7, 1e8]
TAU = np.array([[0.0, 0.5, 0.0], [0.4, 0.0, -0.2], [0.0, 0.0, 0.0]])


def _truth(form: str) -> MixtureLawFit:
    """A law of ``form`` with fixed parameters for :data:`PAIRS` at :data:`SIZES`."""
    k, sol = len(PAIRS), {}
    for i, p in enumerate(PAIRS):
        oth = [j for j in range(k) if j != i]
        if form == "transfer":
            sol[p] = {"theta": [0.3 + 0.05 * i] + list(TAU[i, oth]), "coef": [0.8, 1.2 + 0.1 * i]}
        elif form == "datamixing":
            for s in range(len(SIZES)):
                sol[f"{p}@{s}"] = {"theta": [1.5 + 0.5 * j - 0.3 * i for j in range(k - 1)],
                                   "coef": [1.0 + 0.1 * i - 0.15 * s, 0.25 + 0.05 * s]}
        else:
            theta = [0.35, 0.5 + 0.1 * i] + [0.3 if j == (i + 1) % k else 0.02 for j in oth]
            a = [1.2 if j == i else 0.05 for j in range(k)]
            coef = [1.3 + 0.1 * i, 0.15] + ([0.5] if form == "additive" else a)
            sol[p] = {"theta": theta, "coef": coef}
    for v in sol.values():
        v["f_scale"] = 0.01
    return MixtureLawFit(law="mixture", params={}, form=form, pairs=PAIRS, sizes=SIZES,
                         n_ref=3e7, solutions=sol)


def _runs(truth: MixtureLawFit) -> MixtureRuns:
    """The uniform mixture and 7 Dirichlet ones (concentration 3) at every size, two held-out
    mixtures at the largest (:func:`fitting.test_utils.known_truth_mixture_runs`)."""
    return known_truth_mixture_runs(truth, n_mix=7, concentration=3.0)


@pytest.mark.parametrize("form", FORMS)
def test_cv_chooses_the_generating_law_among_all_four(form):
    cmp = compare_mixture_laws(_runs(_truth(form)), n_boot=0, max_folds=3)
    assert set(cmp.errors) == set(FORMS)
    assert cmp.chosen == form, cmp.chosen_because
    assert all(e["cv_failed"] == 0 for e in cmp.errors.values())
    assert cmp.errors[form]["heldout_mape"] < 1.0


def test_folds_leave_mixtures_out_whole():
    g = np.repeat([f"m{i}" for i in range(50)], 3)  # 50 mixtures at 3 sizes
    fold = cv_folds(g, max_folds=10, seed=0)
    assert fold.max() + 1 == 10
    for label in np.unique(g):
        assert len(set(fold[g == label])) == 1
    assert np.all(np.bincount(fold) == 15)
    few = np.repeat([f"m{i}" for i in range(7)], 2)
    assert len(np.unique(cv_folds(few))) == 7  # leave-one-mixture-out when few


def test_cv_refits_never_start_from_the_fit():
    runs = _runs(_truth("transfer"))
    fit = compare_mixture_laws(runs, forms=("transfer",), n_boot=0).laws["transfer"]
    garbage = copy.deepcopy(fit)
    for sol in garbage.solutions.values():
        sol["theta"] = [4.0] + [0.9] * (len(sol["theta"]) - 1)
    train = ~runs.heldout
    a = refit_mixture_law(fit, runs.n[train], runs.W[train], runs.Y[train], from_grid=True)
    b = refit_mixture_law(garbage, runs.n[train], runs.W[train], runs.Y[train], from_grid=True)
    assert a == b
    c = refit_mixture_law(garbage, runs.n[train], runs.W[train], runs.Y[train])
    assert c != a  # a bootstrap-style polish does start from the fit


def test_failed_bootstrap_refits_are_dropped_and_counted_not_replaced():
    fit = _truth("transfer")
    fit.params = {"alpha[en-a]": 0.3}
    full = copy.deepcopy(fit.solutions)
    part = {k: v for k, v in full.items() if k != "en-a"}
    attach_bootstrap(fit, [(part, ["en-a"]), (full, []), (full, [])], seed=0)
    assert fit.meta["bootstrap"]["failed"] == {"en-a": 1}
    assert fit.meta["bootstrap"]["failed_refits"] == 1
    samples = fit.predict_samples([1e8], [[0.2, 0.3, 0.5]])
    assert np.isnan(samples[0, 0, 0]) and np.isfinite(samples[0, 0, 1:]).all()


def test_a_weight_only_domain_is_a_source_never_a_target():
    runs = _runs(_truth("transfer"))
    runs.Y[:, 2] = np.nan  # en-c trained, never evaluated
    cmp = compare_mixture_laws(runs, forms=("transfer",), n_boot=0, max_folds=3)
    params = cmp.laws["transfer"].params
    assert "tau[en-a,en-c]" in params and "alpha[en-c]" not in params
    assert all("en-c" not in d for d in cmp.heldout.values())
    assert cmp.errors["transfer"]["cv_failed"] == 0


def test_the_token_budget_enters_the_laws_that_take_it():
    truth = _truth("additive")
    truth.d_ref, truth.d_default = 1e9, 1e9
    for sol in truth.solutions.values():  # B (D/1e9)^-0.4 with B = 0.3
        sol["theta"].append(0.4)
        sol["coef"].append(0.3)
    base = _runs(truth)
    d = np.repeat([3e8, 1e9, 3e9], len(base.n))
    n, W = np.tile(base.n, 3), np.tile(base.W, (3, 1))
    Y = truth.predict(n, W, d) * (1 + 0.002 * np.random.default_rng(0).standard_normal(W.shape))
    runs = MixtureRuns(PAIRS, [f"r{j}" for j in range(len(n))], n, W, Y,
                       np.full(Y.shape, np.nan), np.tile(base.heldout, 3), tokens=d)
    cmp = compare_mixture_laws(runs, forms=("transfer", "additive"), n_boot=0, max_folds=3)
    assert cmp.chosen == "additive"
    assert cmp.errors["additive"]["heldout_mape"] < 1.0
    assert cmp.errors["transfer"]["heldout_mape"] > 3 * cmp.errors["additive"]["heldout_mape"]
    assert "beta_d[en-a]" in cmp.laws["additive"].params
    assert any("no D term" in w for w in cmp.laws["transfer"].warnings)
    wide = runs.to_wide()
    assert np.allclose(read_wide_runs(wide).tokens, d)

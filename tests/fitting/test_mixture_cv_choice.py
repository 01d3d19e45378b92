"""The CV choice among mixture laws (fitting.laws.mixture.compare.choose_law) compares the laws on
one point set when no law's CV predicted every point; so does every other ranking of the laws
(rank_laws: the law bootstrapped beside the chosen one, the report's recommendation law)."""

from __future__ import annotations

import numpy as np
import pytest

from fitting.laws.mixture.compare import choose_law


def _errors(y: np.ndarray, pred: np.ndarray) -> dict:
    good = np.isfinite(pred)
    return {"cv_mae": float(np.mean(np.abs(pred[good] - y[good]))), "cv_mape": 0.0,
            "cv_points": int(good.sum()), "cv_not_predicted": int((~good).sum())}


def test_the_fallback_ranks_the_laws_on_the_points_all_of_them_predicted():
    """Law "easy" leaves the hard point unpredicted (a failed fold), law "hard" predicts it badly
    and the others better. The rule of 082b6f0 ranked each law's MAE over its own points
    (easy 0.1 over 2 points, hard 0.2 over 3) and chose "easy"; on the 2 points both predicted,
    "hard" is the better law."""
    y = np.array([1.0, 1.0, 1.0, 1.0])
    preds = {"easy": np.array([1.1, 0.9, np.nan, np.nan]),
             "hard": np.array([1.05, 0.95, 1.5, np.nan])}
    errors = {f: _errors(y, p) for f, p in preds.items()}
    assert errors["easy"]["cv_mae"] < errors["hard"]["cv_mae"]  # the old rule's ranking
    chosen, why = choose_law(errors, preds, y)
    assert chosen == "hard"
    assert "on the 2 points every law's CV predicted: hard 0.05; then easy 0.1" in why
    # a law whose CV predicted every point is still preferred, by its own MAE
    preds["full"] = np.array([1.2, 1.2, 1.2, 1.2])
    errors["full"] = _errors(y, preds["full"])
    chosen, why = choose_law(errors, preds, y)
    assert chosen == "full" and errors["full"]["cv_mae"] == pytest.approx(0.2)
    assert "not ranked (some CV points not predicted): easy, hard" in why


def test_no_common_point_means_no_choice():
    y = np.ones(2)
    preds = {"a": np.array([1.0, np.nan]), "b": np.array([np.nan, 1.0])}
    chosen, why = choose_law({f: _errors(y, p) for f, p in preds.items()}, preds, y)
    assert chosen is None and "cannot be compared on one point set" in why


PAIRS = ["en-de", "en-fr", "en-zh"]


def _runs():
    """Three pairs, 6 design mixtures at 3 sizes on an eq. 11 law with a transfer matrix."""
    from fitting.data.sampling import dirichlet_mixtures
    from fitting.laws.mixture.laws import MixtureLawFit
    from fitting.laws.mixture.runs import MixtureRuns

    tau = np.array([[1, 0.5, 0], [0.5, 1, 0], [0, 0, 1.0]])
    sol = {p: {"theta": [0.3] + [tau[i, j] for j in range(3) if j != i],
               "coef": [0.8, 1.0 + 0.2 * i], "f_scale": 0.01} for i, p in enumerate(PAIRS)}
    truth = MixtureLawFit(law="mixture", params={}, form="transfer", pairs=PAIRS,
                          sizes=[1e7, 4e7], n_ref=2e7, solutions=sol)
    Wd = np.vstack([np.full((1, 3), 1 / 3), dirichlet_mixtures(3, 5, seed=2, concentration=3.0)])
    n = np.repeat([1e7, 2e7, 4e7], len(Wd))
    W = np.tile(Wd, (3, 1))
    Y = truth.predict(n, W)
    return MixtureRuns(PAIRS, [f"run{j}" for j in range(len(n))], n, W, Y,
                       np.full(Y.shape, np.nan), np.zeros(len(n), bool))


def _staged_cv(monkeypatch):
    """compare_mixture_laws with its CV predictions staged (the full fits are real): datamixing
    predicts every point (error 0.001) and is chosen; of the laws that predict at any size,
    "additive" skips the largest size's points (its failed folds) and errs 0.02 elsewhere,
    "joint" errs 0.01 there and 0.2 at the largest size, "transfer" 0.05 everywhere; joint and
    transfer miss one point each. Over each law's own points additive is the best (0.02 against
    joint's ≈ 0.07), on the points all three predicted joint is (0.01). Returns the comparison
    and the laws whose bootstrap was run."""
    from fitting.laws.mixture import compare

    def staged(fit, n, W, Y, d, train):
        hard = n == n.max()
        first = np.flatnonzero(hard)[0]
        err = {"datamixing": np.full(len(n), 0.001), "transfer": np.full(len(n), 0.05),
               "additive": np.where(hard, np.nan, 0.02), "joint": np.where(hard, 0.2, 0.01)}
        e = err[fit.form].copy()
        if fit.form in ("transfer", "joint"):
            e[first] = np.nan
        pred = Y + e[:, None]
        return pred, ["a fold"] if np.isnan(pred[~train]).any() else []

    booted: list[str] = []
    monkeypatch.setattr(compare, "_fold_fit", staged)
    monkeypatch.setattr(compare, "_bootstrap_laws",
                        lambda jobs, fits, *a, **k: booted.extend(f.form for f in fits))
    cmp = compare.compare_mixture_laws(_runs(), n_boot=1, workers=1)
    return cmp, booted


def test_the_sized_law_bootstrapped_beside_the_chosen_is_ranked_on_one_point_set(monkeypatch):
    """Old rule (a8299e0): _bootstrap_forms (whose bootstrap the recommendation may need) sorted
    the laws by each one's CV MAE over its own points and took "additive", whose failed folds
    skipped the largest size; on the points every candidate predicted, "joint" is best."""
    cmp, booted = _staged_cv(monkeypatch)
    e = cmp.errors
    assert e["additive"]["cv_mae"] < e["transfer"]["cv_mae"] < e["joint"]["cv_mae"]
    assert cmp.chosen == "datamixing"
    assert booted == ["datamixing", "transfer", "joint"]


def test_the_recommendation_law_is_ranked_on_one_point_set(monkeypatch):
    """Old rule (a8299e0): the report's target_for (which law recommends where the chosen one
    cannot predict) took the lowest CV MAE over each law's own points: "additive"."""
    from fitting.report.sections.mixture import target_for

    cmp, _ = _staged_cv(monkeypatch)
    # datamixing (one fit per size) cannot predict at 1e8; of those that can, joint
    assert not cmp.laws["datamixing"].can_predict(1e8)
    assert target_for(cmp, [1e8]) == (1e8, "joint")
    assert target_for(cmp, [2e7]) == (2e7, "datamixing")


def test_the_recommendation_law_that_cannot_be_ranked_is_said(monkeypatch):
    """When the laws that predict at the target share no CV point, no law is taken (the old
    rule, a8299e0, took the lowest MAE over its own points)."""
    from fitting.core.base import FitError
    from fitting.report.sections.mixture import target_for

    cmp, _ = _staged_cv(monkeypatch)
    cmp.cv_predictions["joint"][1:] = np.nan  # joint: the first row alone
    cmp.cv_predictions["additive"][0] = np.nan
    with pytest.raises(FitError, match="cannot be ranked by CV on one point set"):
        target_for(cmp, [1e8])

"""The CV choice among mixture laws (fitting.laws.mixture.compare.choose_law) compares the laws on
one point set when no law's CV predicted every point."""

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

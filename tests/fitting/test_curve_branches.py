"""Cool-down branches predicted from their parent's curve (fitting.laws.curves.branches), the
training loss's window (Curve.window) and per-pair / per-eval-set curves of a tidy table.

Synthetic runs shaped like the main job's: rsqrt after a 100-step warm-up, a linear cool-down
over the last 20 % of 1,000 steps, branches at 450, 600, 750 cooling down over 10 % of their
length; losses from a known LR-annealing law (Tissue et al. 2024 eq. 1)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fitting.core.base import FitError
from fitting.laws.curves.annealing import AnnealingLawFit
from fitting.laws.curves.branches import branch_families, predict_branch_ends
from fitting.laws.curves.joint_fit import CurveFitOptions
from fitting.laws.curves.runs import Curve, curves_from_table

TRUTH = AnnealingLawFit(law="lr_annealing", lam=0.9,
                        params={"L0": 0.15, "A": 1.5, "alpha": 0.7, "C": 0.06})
T, WARMUP = 1000, 100
BRANCHES = {450: 500, 600: 667, 750: 833}
#: the annealing law fitted from step 200 with the truth's λ
FROM_200 = {"options": CurveFitOptions(from_step=200), "law_params": {"lam": 0.9}}


def rate(s: np.ndarray, end: int, cooldown: int) -> np.ndarray:
    """The training stack's rate of update s: rsqrt(max(s, w)) · min(s/w, 1) · cool-down ramp."""
    s = np.asarray(s, dtype=np.float64)
    base = np.minimum(s / WARMUP, 1.0) / np.sqrt(np.maximum(s, WARMUP))
    return base * np.clip((end - (s - 1)) / cooldown, 0.0, 1.0)


def log_steps(first: int, end: int) -> np.ndarray:
    """Steps of the training rows: every 10 after ``first`` and the last."""
    return np.unique(np.append(np.arange(first + 10, end + 1, 10), end)).astype(np.float64)


def tidy_table(offset: float = 0.02) -> pd.DataFrame:
    """The tidy rows of a parent and its three branches: learning_rate and train_loss every 10
    steps (each train_loss the exact mean of the law over the updates since the previous row),
    and the validation loss of two pairs at the runs' evaluations (en-de: the law + ``offset``;
    en-zh: another pair's, twice as high)."""
    rows = []
    runs = [("parent", "", np.nan, 0, T, 200)] + [
        (f"parent_cd{b}", "parent", b, b, e, round(0.1 * e)) for b, e in BRANCHES.items()]
    for run, parent, b, first, end, cd in runs:
        own = log_steps(first, end)
        lr_steps = np.concatenate([log_steps(0, int(b)), own]) if parent else own
        eta = rate(lr_steps, end, cd) if not parent else np.concatenate(
            [rate(log_steps(0, int(b)), T, 200), rate(own, end, cd)])
        law = np.concatenate([[np.nan], TRUTH.predict(np.arange(1.0, end + 1), lr_steps, eta)])
        prev = np.concatenate([[first], own[:-1]]).astype(int)  # law[k]: the model at step k
        train = [law[max(p, 1):int(s)].mean() for p, s in zip(prev, own, strict=True)]
        base = {"run_id": run, "parent_run": parent or None, "branch_step": b, "n": 1e5}
        rows += [{**base, "pair": "all", "eval_set": "train", "metric": "learning_rate",
                  "step": s, "value": v} for s, v in zip(lr_steps[lr_steps > first] if parent
                                                          else lr_steps, eta[-own.size:]
                                                          if parent else eta, strict=True)]
        rows += [{**base, "pair": p, "eval_set": "train", "metric": "train_loss", "step": s,
                  "value": v} for p in ("all", "en-de") for s, v in zip(own, train, strict=True)]
        evals = np.unique(np.append(np.arange(first + 100, end + 1, 100), end))
        evals = evals[evals > first]
        rows += [{**base, "pair": p, "eval_set": "validation", "metric": "loss", "step": s,
                  "value": k * law[int(s)] + offset}
                 for p, k in (("en-de", 1.0), ("en-zh", 2.0)) for s in evals]
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return tidy_table()


def test_training_loss_windows_are_the_updates_since_the_previous_row(table):
    curves = curves_from_table(table)
    br = curves["parent_cd600"]
    assert br.parent == "parent" and br.branch_step == 600
    assert br.steps[0] == 610 and br.window[0] == 10          # models 600 … 609
    assert br.steps[-1] == 667 and br.window[-1] == 7         # the short last window
    assert curves["parent"].window[0] == 10 and curves["parent"].parent == ""
    assert np.all(curves_from_table(table, loss_window=0)["parent"].window == 0)
    assert branch_families(curves) == {"parent": ["parent_cd450", "parent_cd600",
                                                  "parent_cd750"]}


def test_pair_and_eval_set_select_one_pairs_evaluations(table):
    """d5cd320 read a table without 'all' rows of the metric as every pair's rows, averaging
    the two pairs' validation losses logged at one step; pair= selects one."""
    de = curves_from_table(table, loss_metric="loss", eval_set="validation", pair="en-de")
    zh = curves_from_table(table, loss_metric="loss", eval_set="validation", pair="en-zh")
    assert np.all(de["parent"].window == 0)
    np.testing.assert_allclose(zh["parent"].loss - 0.02, 2 * (de["parent"].loss - 0.02))
    with pytest.raises(FitError, match="pair 'fr-en'"):
        curves_from_table(table, loss_metric="loss", pair="fr-en")


def test_branch_ends_predicted_from_the_parent_with_the_window(table):
    """The parent's whole curve (its own cool-down included) predicts each branch's last
    training-loss row to 0.1 % when the row is read as its window's mean; read as the loss at
    its step (loss_window=0), the ~5-step lag of every row costs 0.5–1 % at the ends of
    the short cool-downs."""
    res = predict_branch_ends(curves_from_table(table), **FROM_200)
    s = res.summary()
    assert s["n"] == 3 and s["worst_abs"] < 1e-3
    assert [e.run for e in res.tested()] == ["parent_cd450", "parent_cd600", "parent_cd750"]
    assert res.fits["parent"].params["C"] == pytest.approx(0.06, rel=0.02)
    old = predict_branch_ends(curves_from_table(table, loss_window=0), **FROM_200)
    assert old.summary()["worst_abs"] > 5e-3


def test_validation_ends_from_a_training_fit_with_the_offset(table):
    """Targets: the validation loss at each branch's end (the law + 0.02). With ``offset`` the
    fit on the training loss adds the gap it measures at the parent's evaluations."""
    train = curves_from_table(table)
    val = curves_from_table(table, loss_metric="loss", eval_set="validation", pair="en-de")
    res = predict_branch_ends(train, targets=val, offset=True, **FROM_200)
    assert res.offsets["parent"] == pytest.approx(0.02, abs=2e-4)
    assert res.summary()["worst_abs"] < 2e-3
    plain = predict_branch_ends(train, targets=val, **FROM_200)
    assert plain.summary()["mean"] < -0.05   # 0.02 below losses of ~0.2–0.3


def test_stable_phase_and_one_branch_mark_what_was_fitted(table):
    res = predict_branch_ends(curves_from_table(table), stable_until=800, fit_branches="middle",
                              **FROM_200)
    fitted = {e.run: e.fitted for e in res.ends}
    assert fitted == {"parent": False, "parent_cd450": False, "parent_cd600": True,
                      "parent_cd750": False}
    assert res.summary()["n"] == 3 and res.summary()["worst_abs"] < 2e-3
    with pytest.raises(FitError, match="fit_branches"):
        predict_branch_ends(curves_from_table(table), fit_branches="first")


def test_windows_must_match_the_losses():
    with pytest.raises(FitError, match="one window"):
        Curve("r", [0, 10], [1.0, 1.0], [10, 20], [1.0, 0.9], window=[10])

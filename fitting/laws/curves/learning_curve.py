"""Learning-curve extrapolation for under-trained runs (Fernandes et al. 2023, App. G).

Fernandes et al. fit a power law to the loss as training progresses, L(t) = b·t^(−a) + L_conv
(following Hutter 2021), and use its value at a later step (2.5M) as the converged loss of
under-trained runs. :func:`fit_learning_curve` does the same with the robust power-law engine;
:func:`convergence_check` says whether a curve is still dropping at its end (compute-limited
regime) from the local log-log slope.

With cool-down branches (Hägele et al. 2024, *Scaling Laws and Compute-Optimal Training Beyond
Fixed Training Durations*) a run gives its loss at several token budgets D, each after a full
cool-down: :func:`cooldown_budgets` collects them and :func:`cooled_drop_per_doubling` says how
much the cooled-down loss still falls per doubling of D — the one rule of the report's
cooled-down regime verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from fitting.core.base import FitError, FitResult, register_law
from fitting.core.options import NO_UNCERTAINTY, FitOptions, UncertaintyOptions
from fitting.data.tables import final_losses, is_branch, require_columns
from fitting.laws.size.power import as_positive_array, fit_power_law, power_law

__all__ = [
    "LearningCurveFit",
    "fit_learning_curve",
    "convergence_check",
    "correct_final_losses",
    "cooled_drop_per_doubling",
    "cooldown_budgets",
]


@register_law("learning_curve")
@dataclass
class LearningCurveFit(FitResult):
    """L(t) = b·t^(−a) + L_conv over training steps t (Fernandes App. G)."""

    last_step: float = 0.0
    last_loss: float = float("nan")
    dropped_early: int = 0

    def predict(self, step: ArrayLike) -> np.ndarray:
        """Extrapolated loss at training step(s) ``step``."""
        p = self.params
        return power_law(np.asarray(step, dtype=np.float64), p["alpha"], p["beta"], p["l_inf"])

    def gain(self, step: float) -> float:
        """Predicted loss decrease from the last observed step to ``step`` (nats)."""
        return float(self.last_loss - self.predict([step])[0])


def fit_learning_curve(
    step: Sequence[float] | np.ndarray,
    loss: Sequence[float] | np.ndarray,
    *,
    min_step_fraction: float = 0.1,
    fit_options: FitOptions = FitOptions(),
    uncertainty: UncertaintyOptions = NO_UNCERTAINTY,
) -> LearningCurveFit:
    """Fit the App. G power law in the step to one run's evaluation curve.

    Points before ``min_step_fraction`` × the last step (warm-up transient) are left out; their
    count is reported in ``dropped_early`` (set 0 to keep all). Needs ≥ 4 remaining points.
    ``fit_options`` and ``uncertainty`` are :func:`~fitting.laws.size.power.fit_power_law`'s
    (no intervals by default); there is no backtest.
    """
    s = as_positive_array(step, "step")
    y = as_positive_array(loss, "loss")
    if s.shape != y.shape:
        raise FitError(f"'step' has {s.size} values but 'loss' has {y.size}")
    order = np.argsort(s)
    s, y = s[order], y[order]
    keep = s >= min_step_fraction * s[-1]
    if keep.sum() < 4:
        raise FitError(
            f"learning curve: only {int(keep.sum())} evaluations after step "
            f"{min_step_fraction * s[-1]:.0f}; need at least 4", column="step")
    fit = fit_power_law(s[keep], y[keep], x_name="step", fit_options=fit_options,
                        uncertainty=uncertainty, backtest=None)
    return LearningCurveFit(
        law="learning_curve", params=fit.params, stderr=fit.stderr, intervals=fit.intervals,
        goodness=fit.goodness, n_points=fit.n_points, warnings=fit.warnings, meta=fit.meta,
        last_step=float(s[-1]), last_loss=float(y[-1]), dropped_early=int((~keep).sum()),
    )


def convergence_check(
    step: Sequence[float] | np.ndarray,
    loss: Sequence[float] | np.ndarray,
    *,
    tail: float = 0.5,
    threshold: float = 0.01,
) -> dict[str, float | bool]:
    """Local log-log slope of the curve over its last ``tail`` fraction of steps (in log step).

    ``drop_per_doubling`` = 1 − 2^slope: the relative loss decrease that doubling training would
    bring at the current rate. ``still_dropping`` when it exceeds ``threshold`` (default 1%, the
    noise level of Fernandes footnote 5): the run is compute-limited, not converged.
    """
    s = as_positive_array(step, "step")
    y = as_positive_array(loss, "loss")
    order = np.argsort(s)
    s, y = s[order], y[order]
    ls = np.log(s)
    sel = ls >= ls[-1] - tail * (ls[-1] - ls[0])
    if sel.sum() < 3:
        sel = np.zeros_like(sel)
        sel[-min(3, s.size):] = True
    if sel.sum() < 2:
        return {"slope": float("nan"), "drop_per_doubling": float("nan"), "still_dropping": False,
                "n_points": int(sel.sum())}
    slope = float(np.polyfit(ls[sel], np.log(y[sel]), 1)[0])
    drop = 1.0 - 2.0**slope
    return {"slope": slope, "drop_per_doubling": float(drop),
            "still_dropping": bool(drop > threshold), "n_points": int(sel.sum())}


def cooldown_start(step: Sequence[float] | np.ndarray,
                   learning_rate: Sequence[float] | np.ndarray,
                   *, tolerance: float = 0.03) -> float | None:
    """The last logged step before a learning-rate cool-down, or None when there is none.

    Under the inverse-square-root schedule lr·√step is constant after warm-up (it rises during
    warm-up), under a constant rate it rises; a cool-down (a decay to 0 at the end of training)
    makes it fall in both. The cool-down starts after the last step at which lr·√step is within
    ``tolerance`` of its running maximum.
    A curve's convergence is judged before that step: the cool-down's own drop anneals the
    gradient noise and says nothing about whether the model still learns.
    """
    s = np.asarray(step, float)
    v = np.asarray(learning_rate, float)
    keep = np.isfinite(s) & np.isfinite(v) & (s > 0) & (v >= 0)
    s, v = s[keep], v[keep]
    if s.size < 3:
        return None
    order = np.argsort(s)
    s, v = s[order], v[order]
    scaled = v * np.sqrt(s)
    peak = np.maximum.accumulate(scaled)
    below = np.nonzero(scaled < (1.0 - tolerance) * peak)[0]
    if below.size == 0 or below[0] == 0:
        return None
    return float(s[below[0] - 1])


def correct_final_losses(
    table: pd.DataFrame,
    *,
    target_step: float,
    select: pd.Series | None = None,
    eval_set: str = "validation",
    metric: str = "loss",
    final: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Replace final losses of selected runs by their App. G extrapolation to ``target_step``.

    ``select`` is a boolean mask over ``(run_id, pair)`` final rows (default: weight ≤ 0.05, as
    in Fernandes App. G). Returns a copy of the final rows with ``value`` corrected and columns
    ``value_observed`` and ``corrected`` added. ``final`` gives the final rows to correct
    (default: :func:`fitting.data.tables.final_losses` of ``table``).
    """

    fin = final_losses(table, eval_set=eval_set, metric=metric)[0] if final is None else final
    fin = fin.copy()
    fin["value_observed"] = fin["value"]
    fin["corrected"] = False
    if select is None:
        select = pd.to_numeric(fin.get("weight", pd.Series(1.0, index=fin.index))) <= 0.05
    series = table[(table["eval_set"] == eval_set) & (table["metric"] == metric)]
    for idx in fin.index[np.asarray(select, dtype=bool)]:
        run, pair = fin.at[idx, "run_id"], fin.at[idx, "pair"]
        cur = series[(series["run_id"] == run) & (series["pair"] == pair)]
        try:
            lc = fit_learning_curve(cur["step"].to_numpy(float), cur["value"].to_numpy(float))
        except FitError:
            continue
        fin.at[idx, "value"] = float(lc.predict([target_step])[0])
        fin.at[idx, "corrected"] = True
    return fin


def cooled_drop_per_doubling(tokens: Sequence[float] | np.ndarray,
                             losses: Sequence[float] | np.ndarray) -> float:
    """Relative drop of the cooled-down loss per doubling of the token budget D, between the last
    two budgets.

    With the budgets sorted by D (each loss measured at the end of a cool-down to learning rate
    0, Hägele et al. 2024), ``(L_prev − L_last) / L_prev / log2(D_last / D_prev)``: 0.01 means the
    loss still falls by 1 % each time training is doubled. Negative when the larger budget has
    the higher loss. FitError with fewer than 2 budgets, a non-positive or non-finite value, or
    two budgets at the same D.
    """
    d = as_positive_array(tokens, "tokens")
    y = as_positive_array(losses, "loss")
    if d.shape != y.shape:
        raise FitError(f"'tokens' has {d.size} values but 'loss' has {y.size}")
    if d.size < 2:
        raise FitError(f"cooled-down drop: {d.size} budget(s); need at least 2", column="tokens")
    order = np.argsort(d, kind="stable")
    d, y = d[order], y[order]
    if d[-1] == d[-2]:
        raise FitError(f"cooled-down drop: the last two budgets have the same D = {d[-1]:g}",
                       column="tokens")
    return float((y[-2] - y[-1]) / y[-2] / np.log2(d[-1] / d[-2]))


def cooldown_budgets(table: pd.DataFrame, *, eval_set: str = "validation", metric: str = "loss",
                     drop_invalid: bool = False) -> pd.DataFrame:
    """The cooled-down budgets of every parent run: its own final point and each of its cool-down
    branches' final points (schema revision 1.2; Hägele et al. 2024).

    Returns the final ``metric`` rows on ``eval_set`` of ordinary runs and of branches
    (:func:`fitting.data.tables.final_losses` with ``include_branches=True``), with a column
    ``parent``: the run whose budgets the row belongs to (its own ``run_id`` for an ordinary run,
    ``parent_run`` for a branch). D of a row is its ``tokens``. Sorted by parent, pair and tokens.
    """
    require_columns(table, ["run_id", "pair", "tokens"], "cooldown budgets")
    fin, _ = final_losses(table, eval_set=eval_set, metric=metric, drop_invalid=drop_invalid,
                          include_branches=True, source="cooldown budgets")
    branch = is_branch(fin)
    own = fin["run_id"].astype(str).to_numpy()
    parent = fin["parent_run"].astype(str).to_numpy() if branch.any() else own
    fin = fin.assign(parent=np.where(branch, parent, own))
    fin["tokens"] = pd.to_numeric(fin["tokens"], errors="coerce").astype(float)
    return fin.sort_values(["parent", "pair", "tokens"], kind="stable").reset_index(drop=True)

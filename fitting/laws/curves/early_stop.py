"""A run stopped early: its cooled-down end predicted from its curve up to the stop.

A run of T steps stopped at S = ⌈f·T⌉ (``StudySpec.stop_fraction``, ``TrainConfig.stop_step``)
has its losses up to S and its planned learning rates after S (:data:`PLANNED_LR_METRIC`,
:func:`with_planned_rates`). The schedule-aware curve law (Tissue et al. 2024 eq. 1,
:mod:`fitting.laws.curves.annealing`), fitted from ``from_step`` to S on the curve it is given
(the report gives the pair's probe loss, else its training loss) and on the run's cool-down
branches that left by S, predicts the loss at T from the full schedule
(:func:`predict_stopped_end`); the loss judged may sit apart from the curve fitted, so the median
gap target − law over the fitted steps is added (``offset_points``). Its interval:
:func:`fitting.intervals.early_stop.calibrated_intervals`. The rules in full: docs/guides/
fitting.md, "Early stop: predicted ends of stopped runs".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from fitting.core.base import FitError
from fitting.laws.curves.annealing import fit_annealing_law
from fitting.laws.curves.joint_fit import CurveFitOptions
from fitting.laws.curves.learning_curve import cooldown_start
from fitting.laws.curves.runs import Curve

__all__ = ["PLANNED_LR_METRIC", "StoppedEnd", "stop_step",
           "with_planned_rates", "fit_run_curve", "predict_stopped_end", "cooldown_profile",
           "planned_branch_curve", "predict_planned_end"]

#: the metric of a stopped run's planned learning rates (docs/reference/metrics_schema.md)
PLANNED_LR_METRIC = "planned_learning_rate"


def stop_step(end: float, fraction: float) -> int:
    """S = ⌈fraction · end⌉, the step a run of ``end`` steps stops at (as the study plans it)."""
    if not 0.0 < fraction <= 1.0:
        raise FitError(f"the stop fraction must lie in (0, 1], got {fraction!r}",
                       column="stop_fraction")
    return int(min(end, math.ceil(fraction * end - 1e-9)))


def with_planned_rates(curves: dict[str, Curve], table: pd.DataFrame) -> dict[str, Curve]:
    """``curves`` with each stopped run's :data:`PLANNED_LR_METRIC` rows after its last logged
    rate appended to its rates (a run without them unchanged): the schedule of all its steps."""
    if "metric" not in table.columns:
        return curves
    rows = table[table["metric"] == PLANNED_LR_METRIC]
    if rows.empty:
        return curves
    out = dict(curves)
    for run, g in rows.groupby(rows["run_id"].astype(str)):
        c = curves.get(run)
        if c is None:
            continue
        later = g["step"].to_numpy(float) > c.lr_steps.max()
        if not later.any():
            continue
        out[run] = Curve(c.run, np.concatenate([c.lr_steps, g["step"].to_numpy(float)[later]]),
                         np.concatenate([c.lr, g["value"].to_numpy(float)[later]]), c.steps,
                         c.loss, c.n, window=c.window, parent=c.parent,
                         branch_step=c.branch_step)
    return out


@dataclass
class StoppedEnd:
    """One run's predicted end: ``run``, ``pair``, ``n``, ``stop`` S and ``end`` T (steps),
    ``predicted`` (the law at T plus ``offset``, which rests on ``offset_points`` target points),
    the ``branches`` fitted with it, the fit's ``params`` and ``warnings``; once judged,
    ``measured`` (the trained end; None for a run stopped) and ``interval``."""

    run: str
    pair: str
    n: float
    stop: int
    end: int
    predicted: float
    offset: float
    offset_points: int
    branches: list[str] = field(default_factory=list)
    params: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    measured: float | None = None
    #: its :class:`fitting.intervals.predictive.PredictiveInterval` once judged
    interval: Any = None

    @property
    def error(self) -> float | None:
        """(predicted − measured) / measured, None without a trained end."""
        return None if self.measured is None else (self.predicted - self.measured) / self.measured


def _cut(c: Curve, last: float, first: float = 0.0) -> Curve:
    keep = (c.steps <= last) & (c.steps >= first)
    return Curve(c.run, c.lr_steps, c.lr, c.steps[keep], c.loss[keep], c.n,
                 window=c.window[keep], parent=c.parent, branch_step=c.branch_step)


def _offset(fit: Any, fitted: list[Curve], targets: dict[str, Curve], from_step: float
            ) -> tuple[float, int]:
    """(median of target − law, points) over each fitted run's target losses within its fitted
    steps (from ``from_step`` to its last fitted loss); (0, 0) without any."""
    gaps = []
    for c in fitted:
        t = targets.get(c.run)
        if t is None or not t.steps.size or not c.steps.size:
            continue
        m = (t.steps >= max(from_step, c.steps.min())) & (t.steps <= c.steps.max())
        if m.any():
            gaps.append(t.loss[m] - fit.predict(t.steps[m], c.lr_steps, c.lr,
                                                window=t.window[m]))
    if not gaps:
        return 0.0, 0
    g = np.concatenate(gaps)
    return float(np.median(g)), int(g.size)


def fit_run_curve(curves: dict[str, Curve], run: str, stop: float, *,
                  targets: dict[str, Curve] | None = None, from_step: float = 0.0, lam: float,
                  form: str, max_points: int = 60) -> tuple[Any, float, int, list[str]]:
    """(fit, offset, offset points, branches fitted): the LR-annealing law fitted on ``run``'s
    losses in [``from_step``, ``stop``] and on its branches that left at or before ``stop``,
    and the median gap of ``targets`` (None: ``curves``) to it on those steps (module
    docstring) — the one rule behind a stopped run's end and a branch not trained
    (:func:`predict_stopped_end`, :func:`predict_planned_end`)."""
    c = curves[run]
    branches = sorted((r for r, b in curves.items() if b.parent == run and b.steps.size
                       and b.branch_step <= stop), key=lambda r: curves[r].branch_step)
    fitted = [_cut(c, stop, from_step)] + [curves[b] for b in branches]
    fit = fit_annealing_law(fitted, lam=lam, form=form,
                            options=CurveFitOptions(size_terms=False, from_step=from_step,
                                                    max_points=max_points))
    gap, points = _offset(fit, fitted, curves if targets is None else targets, from_step)
    return fit, gap, points, branches


def predict_stopped_end(curves: dict[str, Curve], run: str, stop: int, *,
                        targets: dict[str, Curve] | None = None, pair: str = "",
                        from_step: float = 0.0, lam: float, form: str,
                        max_points: int = 60) -> StoppedEnd:
    """The loss of ``run`` at the last step T of its schedule predicted from its losses in
    [``from_step``, ``stop``] and its branches that left at or before ``stop`` (module
    docstring; :func:`fit_run_curve`); ``targets`` the losses judged (None: ``curves``).
    FitError naming the run when its rates do not reach past the stop or the fit fails."""
    c = curves[run]
    end = int(round(c.lr_steps.max()))
    if end <= stop:
        raise FitError(f"run {run!r}: its learning rates end at step {end}, not after the stop "
                       f"{stop} (a stopped run logs its planned rates)", column="lr")
    fit, gap, points, branches = fit_run_curve(curves, run, stop, targets=targets,
                                               from_step=from_step, lam=lam, form=form,
                                               max_points=max_points)
    pred = float(fit.predict([end], c.lr_steps, c.lr)[0]) + gap
    if not (math.isfinite(pred) and pred > 0):
        raise FitError(f"run {run!r}: the law predicts {pred} at step {end}", column="loss")
    return StoppedEnd(run=run, pair=pair, n=float(c.n), stop=int(stop), end=end, predicted=pred,
                      offset=gap, offset_points=points, branches=branches,
                      params=dict(fit.params), warnings=list(fit.warnings))


def _stable_exponent(c: Curve, start: float) -> float:
    """k of the stable phase's rate η ∝ s^−k between the warm-up's peak and ``start`` (0.5 under
    rsqrt, 0 under a constant rate): minus the log-log slope there; 0 with fewer than 2 steps."""
    peak = float(c.lr_steps[np.argmax(c.lr)])
    m = (c.lr_steps >= peak) & (c.lr_steps <= start) & (c.lr > 0)
    if m.sum() < 2:
        return 0.0
    return float(-np.polyfit(np.log(c.lr_steps[m]), np.log(c.lr[m]), 1)[0])


def cooldown_profile(c: Curve) -> tuple[np.ndarray, np.ndarray, float]:
    """(x, ramp, k): the shape of ``c``'s own cool-down — its rate over the stable phase's rate
    continued (η ∝ s^−k, :func:`_stable_exponent`; the training stack multiplies the stable rate
    by the ramp) against the share x ∈ [0, 1] of the cool-down done, from its start
    (:func:`fitting.laws.curves.learning_curve.cooldown_start`) to its last rate; a straight
    line to 0 (the study's ``cooldown_shape`` "linear") when the curve has no cool-down."""
    start = cooldown_start(c.lr_steps, c.lr)
    end = float(c.lr_steps.max())
    if start is None or end <= start:
        return np.array([0.0, 1.0]), np.array([1.0, 0.0]), _stable_exponent(c, end)
    k = _stable_exponent(c, start)
    eta0 = float(np.interp(start, c.lr_steps, c.lr))
    m = c.lr_steps > start
    s, ramp = c.lr_steps[m], c.lr[m] / (eta0 * (start / c.lr_steps[m]) ** k)
    if s.size >= 2 and ramp[0] > ramp[1]:  # the start between logged rates: the first two
        start = min(float(s[0]), max(start, float(s[0] - (1 - ramp[0]) * (s[1] - s[0])
                                                  / (ramp[0] - ramp[1]))))
    # the ramp reaches 0 one step after the last (the stack's (T − (s − 1)) / c)
    return (np.concatenate([[0.0], (s - start) / (end + 1 - start)]),
            np.concatenate([[1.0], ramp]), k)


def planned_branch_curve(parent: Curve, branch_step: float, cooldown_steps: int) -> Curve:
    """The schedule of a branch not trained: the parent's rates up to ``branch_step`` b, then
    the stable rate continued times a ramp over ``cooldown_steps`` c_b in the shape of the
    parent's own cool-down (:func:`cooldown_profile`), as the training stack's branches do
    (Hägele et al. 2024; mnmt.training.branches, mnmt.training.optimizer); no losses."""
    if cooldown_steps < 1 or branch_step >= float(parent.lr_steps.max()):
        raise FitError(f"run {parent.run!r}: a branch at step {branch_step:g} with "
                       f"{cooldown_steps} cool-down steps lies outside its schedule",
                       column="branch_step")
    x, ramp, k = cooldown_profile(parent)
    keep = parent.lr_steps < branch_step
    eta_b = float(np.interp(branch_step, parent.lr_steps, parent.lr))
    s = branch_step + np.arange(1, int(cooldown_steps) + 1, dtype=float)
    lr = eta_b * (branch_step / s) ** k * np.interp((s - branch_step - 1) / cooldown_steps, x,
                                                     ramp)
    empty = np.empty(0)
    return Curve(f"{parent.run}_cd{int(branch_step)}",
                 np.concatenate([parent.lr_steps[keep], [branch_step], s]),
                 np.concatenate([parent.lr[keep], [eta_b], lr]), empty, empty, parent.n,
                 window=empty, parent=parent.run, branch_step=float(branch_step))


def predict_planned_end(fit: Any, offset: float, branch: Curve) -> float:
    """The law ``fit`` (:func:`fit_run_curve`) at the last step of ``branch``'s schedule plus
    ``offset``: the cooled-down end of a branch not trained; FitError when not finite and
    positive."""
    pred = float(fit.predict([float(branch.lr_steps.max())], branch.lr_steps, branch.lr)[0])
    pred += offset
    if not (math.isfinite(pred) and pred > 0):
        raise FitError(f"branch {branch.run!r}: the law predicts {pred} at its end",
                       column="loss")
    return pred

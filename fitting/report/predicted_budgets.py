"""Cooled-down budgets not trained, predicted from their run's curve: L(N, D) across weights
(:func:`fitting.report.sections.chinchilla.fit_cooled_law`) on fewer trained cool-down branches.

A study plans, per run, its own end and a cool-down branch at each point of :class:`BudgetPlan`.
Where a planned budget was not trained — a branch ``StudySpec.branch_checks`` leaves out, a
branch after an early stop, a stopped run's own end — its cooled-down loss is predicted by the
early stop's one rule (:func:`fitting.laws.curves.early_stop.fit_run_curve`), marked
``predicted`` and weighed in L(N, D) like a trained one; the backtest grades trained points
only. The schedule each prediction reads and why the weight is equal: docs/reference/laws.md,
"Cooled-down budgets predicted, not trained".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fitting.core.base import FitError
from fitting.laws.curves.early_stop import (
    PLANNED_LR_METRIC,
    fit_run_curve,
    planned_branch_curve,
    predict_planned_end,
    predict_stopped_end,
    with_planned_rates,
)
from fitting.laws.curves.runs import Curve, curves_from_table, pair_training_curves
from fitting.report.sections.chinchilla import PREDICTED
from fitting.report.sections.extrapolation import CURVE_FORM, CURVE_LAMBDA, FROM_FRACTION
from fitting.report.view import StudyView

#: λ of the law fitted on a run's whole curve (its own cool-down in the fit): chosen on design
#: seed 10 of the main job (benchmarks/RESULTS.md), where the curve section's 0.8 — fitted on
#: short branch cool-downs — over-predicts the gain of a short branch from the run's long one
WHOLE_RUN_LAMBDA = 0.97

__all__ = ["PREDICTED", "WHOLE_RUN_LAMBDA", "BudgetPlan", "infer_plan", "predicted_budgets"]


@dataclass(frozen=True)
class BudgetPlan:
    """The cool-down branches planned for every run: ``points`` (fractions in (0, 1) of the
    run's steps, or steps ≥ 1) and ``cooldown_share`` f in (0, 1) of each branch's steps."""

    points: tuple[float, ...]
    cooldown_share: float

    def __post_init__(self) -> None:
        if not 0.0 < self.cooldown_share < 1.0:
            raise FitError(f"a branch's cool-down share must lie in (0, 1), got "
                           f"{self.cooldown_share!r}", column="cooldown_share")
        if any(not (math.isfinite(p) and p > 0) for p in self.points):
            raise FitError(f"branch points must be positive, got {self.points!r}",
                           column="branch_step")

    def branches(self, steps: float) -> list[tuple[int, int]]:
        """[(b, c_b)] of a run of ``steps`` steps, ascending in b."""
        out = set()
        for p in self.points:
            b = int(round(p * steps)) if p < 1 else int(p)
            f = self.cooldown_share
            out.add((b, max(1, int(round(b * f / (1 - f))))))
        return sorted(out)


def infer_plan(table: pd.DataFrame) -> BudgetPlan | None:
    """The plan of a table's trained branches (None without any): their points as fractions
    b/T of their parents' last scheduled step (rounded to 0.001) and the median share
    c_b / (b + c_b) of their cool-downs."""
    if "parent_run" not in table.columns or "metric" not in table.columns:
        return None
    rates = table[table["metric"].isin(["learning_rate", PLANNED_LR_METRIC])]
    last = rates.groupby(rates["run_id"].astype(str))["step"].max()
    par = table["parent_run"].fillna("").astype(str)
    br = table[par != ""].groupby(table.loc[par != "", "run_id"].astype(str)).first()
    points, shares = set(), []
    for run, row in br.iterrows():
        b, parent = float(row["branch_step"]), str(row["parent_run"])
        if parent in last.index and run in last.index and last[run] > b:
            points.add(round(b / float(last[parent]), 3))
            shares.append((float(last[run]) - b) / float(last[run]))
    if not points:
        return None
    return BudgetPlan(tuple(sorted(points)), float(np.median(shares)))


def _template(table: pd.DataFrame, run: str, pair: str, eval_set: str, metric: str
              ) -> pd.Series | None:
    """The last ``metric`` row of ``run`` for ``pair`` on ``eval_set`` (its columns copied)."""
    rows = table[(table["run_id"].astype(str) == run) & (table["pair"].astype(str) == pair)
                 & (table["eval_set"].astype(str) == eval_set)
                 & (table["metric"].astype(str) == metric)]
    if rows.empty:
        return None
    return rows.sort_values("step").iloc[-1]


def _row(tpl: pd.Series, run: str, parent: str, step: float, value: float,
         branch_step: float) -> dict:
    tokens_per_step = float(tpl["tokens"]) / float(tpl["step"])
    out = tpl.to_dict()
    out.update(run_id=run, parent=parent, step=float(step), tokens=tokens_per_step * step,
               value=float(value), final=True, branch_step=branch_step,
               parent_run="" if run == parent else parent)
    out[PREDICTED] = True
    return out


def _parent_budgets(curves: dict[str, Curve], targets: dict[str, Curve], run: str, pair: str,
                    plan: BudgetPlan) -> list[tuple[str, float, float, float]]:
    """(run, last step, predicted loss, branch step) of each of one parent's budgets not trained
    (module docstring); the branch step NaN for the parent's own end."""
    c = curves[run]
    end = float(c.lr_steps.max())
    t = targets.get(run)
    trained_to = float(t.steps.max()) if t is not None and t.steps.size else 0.0
    trained_b = {float(b.branch_step) for b in curves.values()
                 if b.parent == run and (bt := targets.get(b.run)) is not None and bt.steps.size}
    stop = float(c.steps.max())
    kw = {"targets": targets, "from_step": FROM_FRACTION * end, "lam": CURVE_LAMBDA,
          "form": CURVE_FORM}
    found: list[tuple[str, float, float, float]] = []  # run, last step, value, branch step
    if trained_to < end:
        e = predict_stopped_end(curves, run, int(stop), pair=pair, **kw)
        found.append((run, float(e.end), e.predicted, float("nan")))
    missing = [(b, cb) for b, cb in plan.branches(end) if b < end and float(b) not in trained_b]
    if missing:
        if trained_to >= end:  # the whole run, its own cool-down in the fit
            kw["lam"] = WHOLE_RUN_LAMBDA
        fit, gap, _, _ = fit_run_curve(curves, run, stop, **kw)
        for b, cb in missing:
            branch = planned_branch_curve(c, b, cb)
            found.append((branch.run, float(b + cb), predict_planned_end(fit, gap, branch),
                          float(b)))
    return found


def predicted_budgets(view: StudyView, plan: BudgetPlan | None,
                      pairs: Sequence[str] | None = None) -> tuple[pd.DataFrame, dict[str, str]]:
    """(the predicted rows of every fitted parent's planned budgets not trained, marked
    :data:`PREDICTED`, in the columns of :attr:`fitting.report.view.StudyView.budgets_fit`;
    {"pair run": why not predicted}) — the module docstring's rule. ``plan`` None: the table's
    own (:func:`infer_plan`; none there: only stopped runs' ends)."""
    table = view.table_fit
    plan = plan or infer_plan(table) or BudgetPlan((), 0.5)
    rows, failed = [], {}
    for pair in pairs or list(view.points):
        try:
            curves = with_planned_rates(pair_training_curves(table, pair), table)
            targets = curves_from_table(table[table["run_id"].astype(str).isin(curves)],
                                        loss_metric=view.metric, pair=pair,
                                        eval_set=view.eval_set, loss_window=0,
                                        source="predicted budgets")
        except FitError as e:
            failed[pair] = str(e)
            continue
        for run, c in sorted(curves.items()):
            if c.parent or not c.steps.size:
                continue
            tpl = _template(table, run, pair, view.eval_set, view.metric)
            weight = pd.to_numeric(pd.Series([tpl.get("weight") if tpl is not None else 0]),
                                   errors="coerce").iloc[0]
            if tpl is None or weight <= 0:
                continue  # a pair the run does not train (weight 0) has no law
            try:
                found = _parent_budgets(curves, targets, run, pair, plan)
            except FitError as e:
                failed[f"{pair} {run}"] = str(e)
                continue
            rows += [_row(tpl, name, run, step, value, b) for name, step, value, b in found]
    return pd.DataFrame(rows), failed

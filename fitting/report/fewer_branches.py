"""Fewer cool-down branches, side by side: L(N, D) across weights with one trained branch per
size (the check) and the other budgets predicted, against the same study with every branch
trained.

On a finished table, :func:`check_branches` picks per size the branch a study with
``StudySpec.branch_checks`` trains, :func:`without_branches_except` drops the others,
:func:`fitting.report.predicted_budgets.predicted_budgets` predicts them, and :func:`compare`
refits L(N, D) on both and sets side by side, per pair: E, the leave-largest-size-out backtest
graded on trained losses, the held-out runs, and the predicted budgets against the trained
ones. :func:`verdict` judges the paired differences against :data:`NOISE_MULTIPLE` σ_seed (with
:data:`REQUIRED_SHARE`). Which experiment and branch are kept and why the verdict is paired:
docs/reference/laws.md, "Fewer cool-down branches, side by side".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from fitting.core.base import FitError
from fitting.core.options import NO_UNCERTAINTY
from fitting.core.seed_noise import SeedNoise, few_seeds_verdict, judges, judging_multiple
from fitting.data.seeds import run_mixtures
from fitting.laws.budget.chinchilla_joint import coef_key, leave_largest_out
from fitting.report.predicted_budgets import BudgetPlan, infer_plan, predicted_budgets
from fitting.report.sections.chinchilla import (
    PREDICTED,
    cooled_points,
    fit_cooled_law,
    largest_size_seed_noises,
)
from fitting.report.sections.extrapolation import FAILS, HOLDS, NO_NOISE, NOISE_MULTIPLE
from fitting.report.view import StudyView, prepare_view

__all__ = ["REQUIRED_SHARE", "check_branches", "without_branches_except", "compare", "verdict"]

#: the share of predicted budgets that must lie within k·σ_seed of the trained ones
REQUIRED_SHARE = 0.8


def _parents(table: pd.DataFrame) -> pd.DataFrame:
    """One row per run that is not a branch: run_id, n, mixture (its whole mixture), seed."""
    par = table["parent_run"].fillna("").astype(str) if "parent_run" in table.columns else \
        pd.Series("", index=table.index)
    rows = table[par == ""]
    frame = pd.DataFrame({"run_id": rows["run_id"].astype(str),
                          "n": pd.to_numeric(rows["n"], errors="coerce"),
                          "mixture": run_mixtures(rows)})
    return frame.groupby("run_id", sort=True).first().reset_index()


def check_branches(table: pd.DataFrame, exclude: Sequence[str] = ()) -> list[str]:
    """The branches kept as checks (module docstring): per size, the experiment with most
    seeds (ties: the middle mixture in sorted order), every seed's middle branch by step.
    ``exclude``: runs never considered (held-out runs)."""
    if "parent_run" not in table.columns:
        raise FitError("the table has no cool-down branches (parent_run)", column="parent_run")
    par = table["parent_run"].fillna("").astype(str)
    branches = table[par != ""].groupby(table.loc[par != "", "run_id"].astype(str))[
        ["parent_run", "branch_step"]].first()
    runs = _parents(table)
    runs = runs[~runs["run_id"].isin(set(exclude)) & runs["run_id"].isin(
        set(branches["parent_run"].astype(str)))]
    keep: list[str] = []
    for _, size in runs.groupby("n"):
        counts = size.groupby("mixture")["run_id"].nunique()
        best = sorted(counts[counts == counts.max()].index)
        experiment = size[size["mixture"] == best[len(best) // 2]]
        for run in experiment["run_id"]:
            mine = branches[branches["parent_run"].astype(str) == run].sort_values(
                "branch_step")
            if len(mine):
                keep.append(str(mine.index[len(mine) // 2]))
    return sorted(keep)


def without_branches_except(table: pd.DataFrame, keep: Sequence[str]) -> pd.DataFrame:
    """``table`` without the rows of every cool-down branch not in ``keep``."""
    par = table["parent_run"].fillna("").astype(str)
    drop = (par != "") & ~table["run_id"].astype(str).isin(set(keep))
    return table[~drop.to_numpy()].reset_index(drop=True)


def _backtest(fit_pts: pd.DataFrame, trained_pts: pd.DataFrame, pair: str,
              noise: float | None) -> dict[str, Any]:
    """The leave-largest-size-out backtest refitted on ``fit_pts`` below the largest size and
    graded on ``trained_pts`` at it (the trained cooled-down losses)."""
    a = fit_pts[fit_pts["pair"] == pair]
    b = trained_pts[trained_pts["pair"] == pair]
    top = float(b["n"].max())
    pts = pd.concat([a[a["n"] < top], b[b["n"] == top]], ignore_index=True)
    graded = (pts["n"] == top).to_numpy() | ~pts[PREDICTED].to_numpy(bool)
    cols = [pts[c].to_numpy(float) for c in ("n", "tokens", "weight", "value")]
    try:
        bt = leave_largest_out(*cols, noise_rel=noise, form="auto", graded=graded)
    except FitError as e:
        return {"error": str(e)}
    return {k: bt[k] for k in ("rmse_rel", "mean_rel", "max_abs_rel", "l_inf", "form",
                               "budgets", "held_out_n")} | {"n_graded": len(bt["errors"])}


def _heldout(view: StudyView, fit: Any, pair: str) -> list[dict[str, Any]]:
    """Each held-out experiment of ``pair`` (its seeds' mean final loss) predicted by ``fit`` at
    its N, D and weight."""
    held = view.held
    if fit is None or pair not in (fit.pairs or []) or not len(held):
        return []
    h = held[held["pair"].astype(str) == pair].assign(mixture=run_mixtures(
        held[held["pair"].astype(str) == pair]))
    out = []
    for (n, mix), g in h.groupby(["n", "mixture"]):
        w = float(pd.to_numeric(g["weight"], errors="coerce").iloc[0])
        if not w > 0:
            continue
        measured = float(g["value"].mean())
        pred = float(fit.predict(float(n), float(g["tokens"].mean()), w, pair).ravel()[0])
        out.append({"n": float(n), "mixture": str(mix), "weight": w, "seeds": len(g),
                    "measured": measured, "predicted": pred,
                    "error": pred / measured - 1.0})
    return out


def verdict(rows: dict[str, dict[str, Any]], noise: dict[str, SeedNoise]) -> str:
    """:data:`HOLDS` when every pair's E, backtest and held-out runs of the fewer-branch fit lie
    within :data:`NOISE_MULTIPLE` σ_seed of the trained-branch fit's (module docstring),
    :data:`FAILS` otherwise; information where a pair's σ_seed is missing or rests on fewer
    than 3 seeds."""
    if not rows:
        return "not computed: no pair fitted both ways"
    ok = []
    for pair, r in rows.items():
        nz = noise.get(pair)
        if nz is None:
            return NO_NOISE
        if not judges(nz.dof):
            return few_seeds_verdict(nz.seeds, nz.dof)
        tol = judging_multiple(nz.dof, NOISE_MULTIPLE) * nz.sigma
        budgets = r.get("budget_errors") or []
        if budgets:
            within = sum(abs(e["error"]) <= tol for e in budgets)
            ok.append(within >= REQUIRED_SHARE * len(budgets))
        bt_f, bt_t = r["backtest_fewer"].get("rmse_rel"), r["backtest_trained"].get("rmse_rel")
        if not r.get("e_bound_both"):
            ok.append(abs(r["e_change"]) <= tol)
        if bt_t is not None:  # without a trained-branch backtest there is none to match
            ok.append(bt_f is not None and abs(bt_f - bt_t) <= tol)
        ok += [abs(f["error"] - t["error"]) <= tol
               for f, t in zip(r["heldout_fewer"], r["heldout_trained"], strict=True)]
    return HOLDS if all(ok) else FAILS


def compare(table: pd.DataFrame, *, heldout_runs: Sequence[str] = (),
            keep: Sequence[str] | None = None, plan: BudgetPlan | None = None,
            eval_set: str = "validation", metric: str = "loss") -> dict[str, Any]:
    """The side-by-side of the module docstring for a table of finished runs with every branch
    trained; ``keep`` the branches kept (None: :func:`check_branches`), ``plan`` the branches
    planned (None: the table's, :func:`infer_plan`)."""
    full = prepare_view(table, eval_set=eval_set, metric=metric, heldout_runs=heldout_runs)
    plan = plan or infer_plan(full.table_fit)
    keep = check_branches(full.table_fit) if keep is None else list(keep)
    fewer = prepare_view(without_branches_except(table, keep), eval_set=eval_set,
                         metric=metric, heldout_runs=heldout_runs)
    noise = largest_size_seed_noises(full.seeds)[0]
    noise_rel = noise or None
    pred, failed = predicted_budgets(fewer, plan)
    cooled_t, cooled_f = cooled_points(full), cooled_points(fewer, pred)
    fit_t, _, why_t = fit_cooled_law(full, uncertainty=NO_UNCERTAINTY, noise_rel=noise_rel,
                                     points=cooled_t)
    fit_f, _, why_f = fit_cooled_law(fewer, uncertainty=NO_UNCERTAINTY, noise_rel=noise_rel,
                                     points=cooled_f)
    out: dict[str, Any] = {"kept": keep, "plan": None if plan is None else {
        "points": list(plan.points), "cooldown_share": plan.cooldown_share},
        "n_predicted": len(pred), "failed": failed, "skipped": {}, "pairs": {}}
    if fit_t is None or fit_f is None:
        out["skipped"]["all"] = why_t or why_f
        out["verdict"] = "not computed: " + (why_t or why_f)
        return out
    pts_t, pts_f = cooled_t[0], cooled_f[0]
    errs = _prediction_errors(pred, full.budgets_fit)
    for pair in sorted(set(fit_t.pairs or []) & set(fit_f.pairs or [])):
        nz = noise.get(pair)
        e_t, e_f = (float(f.params[coef_key("E", pair)]) for f in (fit_t, fit_f))
        pe = [e for e in errs if e["pair"] == pair]
        out["pairs"][pair] = {
            "E_trained": e_t, "E_fewer": e_f, "e_change": e_f / e_t - 1.0,
            "form_trained": fit_t.form(pair), "form_fewer": fit_f.form(pair),
            "e_bound_both": bool(fit_t.e_is_bound(pair) and fit_f.e_is_bound(pair)),
            "points_trained": int((pts_t["pair"] == pair).sum()),
            "points_fewer": int((pts_f["pair"] == pair).sum()),
            "predicted_points": int(pts_f.loc[pts_f["pair"] == pair, PREDICTED].sum()),
            "backtest_trained": _backtest(pts_t, pts_t, pair, None if nz is None else nz.sigma),
            "backtest_fewer": _backtest(pts_f, pts_t, pair, None if nz is None else nz.sigma),
            "heldout_trained": _heldout(full, fit_t, pair),
            "heldout_fewer": _heldout(fewer, fit_f, pair),
            "budget_errors": pe, "sigma": None if nz is None else nz.sigma,
            "n_within": None if nz is None else int(sum(
                abs(e["error"]) <= judging_multiple(nz.dof, NOISE_MULTIPLE) * nz.sigma
                for e in pe))}
    out["verdict"] = verdict(out["pairs"], noise)
    return out


def _prediction_errors(pred: pd.DataFrame, budgets: pd.DataFrame | None) -> list[dict]:
    """Each predicted budget against the trained one it replaces (same run id), where there is
    one."""
    if budgets is None or not len(pred):
        return []
    trained = budgets.set_index([budgets["run_id"].astype(str), budgets["pair"].astype(str)])[
        "value"]
    out = []
    for _, r in pred.iterrows():
        key = (str(r["run_id"]), str(r["pair"]))
        if key in trained.index:
            m = float(np.atleast_1d(trained.loc[key])[0])
            out.append({"run": key[0], "pair": key[1], "predicted": float(r["value"]),
                        "trained": m, "error": float(r["value"]) / m - 1.0})
    return out

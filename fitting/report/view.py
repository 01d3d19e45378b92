"""One prepared view of a study, which every section of the report reads: :func:`prepare_view`
derives from the tidy table, once, every frame the sections need and returns them as a frozen
:class:`StudyView` — one rule, one derivation, and every section sees the same rows.

The rules: weights rounded (:func:`fitting.data.tables.round_weights`, so 1 − 0.7 and 0.3 are
one weight); verification runs split off first; held-out runs
(:func:`fitting.report.sections.heldout.check_heldout_runs`) and their branches out of every
fit, though still in the regime and the learning-curve figure; cool-down branches (Hägele et al.
2024) never in the size laws, seeds, held-out predictions or quality laws, only in the regime and
L(N, D) as cooled-down budgets; repeated seeds fitted on their means
(:mod:`fitting.data.seeds`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fitting.core.base import FitError
from fitting.data.seeds import seed_means, seed_spread
from fitting.data.tables import (
    final_losses,
    has_branches,
    is_branch,
    round_weights,
    with_optional_columns,
    without_branches,
)
from fitting.laws.curves.learning_curve import cooldown_budgets, correct_final_losses

__all__ = ["StudyView", "prepare_view", "points_by_weight", "check_heldout_runs",
           "split_verification"]

#: (n, loss) arrays sorted by n, per pair and weight
Points = dict[str, dict[float, tuple[np.ndarray, np.ndarray]]]


@dataclass(frozen=True)
class StudyView:
    """The study as the report's sections read it (built by :func:`prepare_view`; never
    modified: the frames are shared by every section).

    Attributes:
      table: the tidy table with weights rounded (:func:`fitting.data.tables.round_weights`)
        and the verification runs split off; held-out runs and cool-down branches included.
      verify_rows: the verification runs' rows (and their branches'), which no fit sees.
      verification: the verification plan (``ReportOptions.verification``), or None.
      verify_final: the verification runs' final rows
        (:func:`fitting.data.tables.final_losses`, invalid rows dropped), or None where there
        are none or they cannot be derived (the verification section then says why).
      held_ids: the held-out run ids, each checked to be a run of ``table``.
      final_all: final rows of every run with a final ``metric`` row on ``eval_set``, held-out
        runs included (branches left out; corrected when ``correction_step``): the regime's.
      final_seeds: final rows of the fitted runs, one per seed (the seed spread's).
      final: the fitted runs' final rows as seed means (:func:`fitting.data.seeds.seed_means`):
        what every size law is fitted on.
      held: final rows of the held-out runs (empty without any).
      table_fit: ``table`` without the held-out runs and their cool-down branches.
      table_fit_runs: ``table_fit`` without cool-down branches (the quality laws').
      branches: whether ``table`` has cool-down branches (schema revision 1.2).
      n_branch_runs: the number of cool-down branch runs in ``table``.
      budgets: cooled-down budgets of every parent run of ``table``
        (:func:`fitting.laws.curves.learning_curve.cooldown_budgets`, invalid rows dropped), or
        None without branches or the columns they need (the regime then derives them itself).
      budgets_fit: ``budgets`` without the held-out runs (those of ``table_fit``), or None.
      seeds: the fitted runs' seed spread (:func:`fitting.data.seeds.seed_spread`).
      points: ``{pair: {weight: (n, loss)}}`` of ``final`` (:func:`points_by_weight`).
      shown: ``points`` without zero-shot weights (p = 0), as the figures show them.
      sizes: the fitted model sizes N, sorted.
      eval_set, metric: the evaluation set and metric of the losses.
      n_dropped: final rows dropped as invalid (``drop_invalid``).
      correction_step: the training step of the convergence correction, or None.
      n_corrected: final losses replaced by their learning-curve extrapolation.
    """

    table: pd.DataFrame
    verify_rows: pd.DataFrame
    verification: Mapping | None
    verify_final: pd.DataFrame | None
    held_ids: list[str]
    final_all: pd.DataFrame
    final_seeds: pd.DataFrame
    final: pd.DataFrame
    held: pd.DataFrame
    table_fit: pd.DataFrame
    table_fit_runs: pd.DataFrame
    branches: bool
    n_branch_runs: int
    budgets: pd.DataFrame | None
    budgets_fit: pd.DataFrame | None
    seeds: dict
    points: Points
    shown: Points
    sizes: list[float]
    eval_set: str
    metric: str
    n_dropped: int
    correction_step: float | None
    n_corrected: int


def points_by_weight(fin: pd.DataFrame) -> Points:
    """``{pair: {weight: (n, loss)}}`` of final rows, sorted by n; weight 1.0 for a table
    without weights; non-finite weights (task ``all``) left out."""
    data: Points = {}
    has_w = "weight" in fin.columns
    for pair, sub in fin.groupby("pair", sort=True):
        data[str(pair)] = {}
        groups = sub.groupby("weight", sort=True) if has_w else [(1.0, sub)]
        for w, g in groups:
            if not np.isfinite(float(w)):
                continue
            g = g.sort_values("n")
            data[str(pair)][float(w)] = (g["n"].to_numpy(float), g["value"].to_numpy(float))
    return data


def check_heldout_runs(table: pd.DataFrame, run_ids: Sequence[str]) -> list[str]:
    """The held-out run ids as strings, each checked to be a ``run_id`` of ``table``.

    Raises FitError naming an unknown id, the closest known one (difflib) and the known ids.
    """
    ids = [str(r) for r in run_ids]
    if not ids:
        return []
    if "run_id" not in table.columns:
        raise FitError(f"held-out runs {ids} given, but the table has no run_id column",
                       column="run_id")
    known = sorted(table["run_id"].astype(str).unique())
    for rid in ids:
        if rid in known:
            continue
        close = difflib.get_close_matches(rid, known, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        shown = ", ".join(known[:60]) + (f", … ({len(known)} in all)" if len(known) > 60 else "")
        raise FitError(f"held-out run {rid!r} is not a run_id of the table{hint} "
                       f"Known run ids: {shown}", column="run_id")
    return list(dict.fromkeys(ids))


def split_verification(table: pd.DataFrame, plan: Mapping | None
                       ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the table without the verification runs, their rows): the runs of ``plan["runs"]`` and
    their cool-down branches, which no fit may see."""
    if not plan or "run_id" not in table.columns:
        return table, table.iloc[:0]
    ids = {str(r) for r in plan["runs"]}
    mask = table["run_id"].astype(str).isin(ids)
    if "parent_run" in table.columns:
        mask |= table["parent_run"].astype(str).isin(ids)
    return table[~mask], table[mask]


def _without_runs(table: pd.DataFrame, ids: Sequence[str]) -> pd.DataFrame:
    """``table`` without the runs ``ids`` and their cool-down branches."""
    rows = table["run_id"].astype(str).isin(ids).to_numpy()
    if "parent_run" in table.columns:
        rows = rows | table["parent_run"].astype(str).isin(ids).to_numpy()
    return table[~rows]


def _budgets(table: pd.DataFrame, branches: bool, eval_set: str, metric: str
             ) -> pd.DataFrame | None:
    """The cooled-down budgets of ``table`` (None without branches or their columns, or where
    they cannot be derived: the sections then derive them and say why)."""
    if not branches or not {"run_id", "pair", "tokens"} <= set(table.columns):
        return None
    try:
        return cooldown_budgets(with_optional_columns(table), eval_set=eval_set, metric=metric,
                                drop_invalid=True)
    except FitError:
        return None


def _verify_final(rows: pd.DataFrame, plan: Mapping | None, eval_set: str, metric: str
                  ) -> pd.DataFrame | None:
    if not plan or not len(rows):
        return None
    try:
        return final_losses(rows, eval_set=eval_set, metric=metric, source="verification",
                            drop_invalid=True)[0]
    except FitError:
        return None


def prepare_view(table: pd.DataFrame, *, eval_set: str = "validation", metric: str = "loss",
                 drop_invalid: bool = False, convergence_correction: float | None = None,
                 heldout_runs: Sequence[str] = (), verification: Mapping | None = None
                 ) -> StudyView:
    """The :class:`StudyView` of ``table`` (a DataFrame; see :func:`StudyView` for each field).

    Raises FitError where the report cannot be written: no final ``metric`` rows on
    ``eval_set`` (or an invalid one without ``drop_invalid``), an unknown held-out run, or every
    run held out."""
    # one rule for telling weights apart (round_weights): en-zh's 1 − 0.7 is en-de's 0.3 in
    # every fit, key, seed group and table of the report
    table = round_weights(table)
    table, verify_rows = split_verification(table, verification)  # never fitted
    held_ids = check_heldout_runs(table, heldout_runs)
    fin, n_dropped = final_losses(table, eval_set=eval_set, metric=metric,
                                  drop_invalid=drop_invalid, source="report")
    n_corrected = 0
    if convergence_correction:
        fin = correct_final_losses(table, target_step=convergence_correction, final=fin,
                                   eval_set=eval_set, metric=metric)
        n_corrected = int(fin["corrected"].sum())
    # held-out runs: out of every fit (kept in `final_all` for the regime and in `held`)
    fin_all, table_fit, held = fin, table, fin.iloc[:0]
    if held_ids:
        is_held = fin["run_id"].astype(str).isin(held_ids).to_numpy()
        held, fin = fin[is_held], fin[~is_held]
        table_fit = _without_runs(table, held_ids)  # a held-out run's branches go with it
        if fin.empty:
            raise FitError(f"every run with final {metric!r} rows is held out ({held_ids}): "
                           "nothing is left to fit", column="run_id")
    branches = has_branches(table)
    budgets = _budgets(table, branches, eval_set, metric)
    budgets_fit = budgets
    if budgets is not None and held_ids:
        out = budgets["run_id"].astype(str).isin(held_ids) | budgets["parent"].astype(str).isin(
            held_ids)
        budgets_fit = budgets[~out.to_numpy()].reset_index(drop=True)
    means = seed_means(fin)  # every fit uses the seed mean of each experiment
    points = points_by_weight(means)
    return StudyView(
        table=table, verify_rows=verify_rows, verification=verification,
        verify_final=_verify_final(verify_rows, verification, eval_set, metric),
        held_ids=held_ids, final_all=fin_all, final_seeds=fin, final=means, held=held,
        table_fit=table_fit, table_fit_runs=without_branches(table_fit), branches=branches,
        n_branch_runs=(table.loc[is_branch(table), "run_id"].nunique()
                       if branches and "run_id" in table.columns else 0),
        budgets=budgets, budgets_fit=budgets_fit, seeds=seed_spread(fin), points=points,
        shown={pair: {w: v for w, v in by_w.items() if w > 0} for pair, by_w in points.items()},
        sizes=sorted(means["n"].unique()), eval_set=eval_set, metric=metric,
        n_dropped=n_dropped, correction_step=convergence_correction or None,
        n_corrected=n_corrected)

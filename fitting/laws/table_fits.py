"""What the laws' table fitters (:meth:`fitting.core.base.FitResult.fit_table`, the fits
``mnmt-fit fit --law`` runs) share: a table reduced to final losses with a ``loss`` column, the
rows ``drop_invalid`` dropped said on every fit, and the bootstrap-only fits (Chinchilla, DPL)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from fitting.core.base import FitError, FitResult, TableRequest
from fitting.data.tables import (
    check_finite_positive,
    check_weights,
    drop_invalid_rows,
    final_losses,
)

__all__ = ["final_loss_table", "pair_final_losses", "note_dropped", "fit_bootstrapped"]


def final_loss_table(df: pd.DataFrame, request: TableRequest,
                     used: Sequence[str] = ("n", "loss"), include_branches: bool = False
                     ) -> tuple[pd.DataFrame, int]:
    """Final losses with a ``loss`` column: a user table as is (its ``used`` columns checked),
    or the tidy table's final rows (cool-down branches left out unless ``include_branches``:
    they are smaller token budgets of their parents, points of L(N, D) but not of the size
    laws), and the number of rows ``drop_invalid`` dropped."""
    src = request.source
    if "loss" in df.columns:
        # a user table: validate it here, so that a bad value is reported with its row in the
        # table (not its position inside a pair/weight group), and --drop-invalid drops it
        num = [c for c in used if c in df.columns]
        dropped = 0
        if request.drop_invalid:
            df, dropped = drop_invalid_rows(df, num, positive=num)
        for c in num:
            check_finite_positive(df, c, src)
        if "weight" in df.columns:
            check_weights(df, "weight", src)
        return df, dropped
    if {"metric", "value"} <= set(df.columns):
        fin, dropped = final_losses(df, eval_set=request.eval_set, metric=request.metric,
                                    source=src, drop_invalid=request.drop_invalid,
                                    include_branches=include_branches)
        return fin.rename(columns={"value": "loss"}), dropped
    raise FitError(f"{src}: needs a 'loss' column (or the tidy table's metric/value columns); "
                   f"has {list(df.columns)}", column="loss", source=src)


def pair_final_losses(df: pd.DataFrame, request: TableRequest,
                      used: Sequence[str] = ("n", "loss")) -> tuple[pd.DataFrame, int]:
    """:func:`final_loss_table` of ``request.pair`` alone where one is named."""
    fin, dropped = final_loss_table(df, request, used)
    if request.pair is not None:
        fin = fin[fin["pair"].astype(str) == request.pair] if "pair" in fin.columns else fin
        if fin.empty:
            raise FitError(f"no rows for pair {request.pair!r}", column="pair",
                           source=request.source)
    return fin, dropped


def note_dropped(res: FitResult | dict[str, Any], dropped: int) -> FitResult | dict[str, Any]:
    """``res`` with a warning on every fit that ``dropped`` invalid rows were dropped."""
    if dropped:
        msg = f"{dropped} row(s) with invalid values were dropped (--drop-invalid)"
        for r in (res.values() if isinstance(res, dict) else [res]):
            if isinstance(r, FitResult):
                r.warnings.append(msg)
    return res


def fit_bootstrapped(fit_from_table: Callable[..., FitResult], law: str, df: pd.DataFrame,
                     request: TableRequest, pre_dropped: int = 0,
                     keywords: Callable[[dict[str, Any]], dict[str, Any]] = dict) -> FitResult:
    """A law whose only uncertainty is the bootstrap (Chinchilla, DPL) fitted by its
    ``fit_from_table`` with the request's bootstrap and own options, made its keyword arguments
    by ``keywords`` (the law's options objects from the flat names); the resamples recorded in
    ``meta["uncertainty"]``."""
    kw = keywords({**request.bootstrap_options(), **request.options})
    fit = fit_from_table(df, source=request.source, **kw)
    if kw.get("bootstrap"):
        fit.meta["uncertainty"] = (f"bootstrap, {kw['bootstrap']} resamples (the only "
                                   f"uncertainty method of the {law} law)")
    if pre_dropped:
        fit.warnings.append(f"{pre_dropped} row(s) with invalid values were dropped "
                            "(--drop-invalid)")
    return fit

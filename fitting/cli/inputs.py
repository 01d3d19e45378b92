"""What ``mnmt-fit``'s subcommands share: option values parsed from their text (numbers,
``name=value`` lists, ``--option`` JSON values) and the input table, read and reduced to final
losses with the fit options of :mod:`fitting.cli`'s parser.

Exit status 2 on bad input is :mod:`fitting.cli`'s: a :class:`~fitting.core.base.FitError` raised
here names the option (``--sizes``, ``--f-scale``) or the column and row.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

import pandas as pd

from fitting.core.base import FitError
from fitting.data.rundirs import collect_runs
from fitting.data.tables import (
    check_finite_positive,
    check_weights,
    drop_invalid_rows,
    final_losses,
    read_table,
)

__all__ = ["parse_floats", "parse_values", "parse_pair_values", "parse_law_options", "load_input",
           "final_loss_table", "fit_options", "bootstrap_options"]


def parse_floats(text: str | None, what: str) -> list[float] | None:
    """``1e8,1e9`` → [1e8, 1e9] (None for None); ``what`` names the option in the error."""
    if text is None:
        return None
    try:
        return [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise FitError(f"--{what}: expected comma-separated numbers, got {text!r}") from None


def parse_values(text: str | None, what: str) -> dict[str, float] | None:
    """``en-de=2,en-zh=1`` → {name: number} (None for None); ``what`` names the option in the
    error."""
    if text is None:
        return None
    out = {}
    for item in text.split(","):
        if not item.strip():
            continue
        if "=" not in item:
            raise FitError(f"--{what}: expected name=value items, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = float(v)
        except ValueError:
            raise FitError(f"--{what}: value of {k.strip()!r} is not a number: {v!r}") from None
    return out


def parse_pair_values(items: Sequence[str] | None, what: str) -> dict[str, float] | None:
    """Repeated ``PAIR=VALUE`` options → {pair: value}."""
    if not items:
        return None
    return parse_values(",".join(items), what)


def parse_law_options(items: Sequence[str] | None) -> dict[str, Any]:
    """``--option key=value`` pairs; values parsed as JSON when possible (numbers, lists, bools)."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise FitError(f"--option: expected key=value, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = json.loads(v)
        except json.JSONDecodeError:
            out[k.strip()] = v
    return out


def load_input(args: argparse.Namespace) -> pd.DataFrame:
    """The table of ``--input`` (a CSV/Parquet table, or run directories collected into the tidy
    table), its columns renamed by ``--columns``."""
    inputs = args.input
    if len(inputs) > 1:
        return read_table(collect_runs(inputs), args.columns)
    return read_table(inputs[0], args.columns)


def final_loss_table(df: pd.DataFrame, args: argparse.Namespace, include_branches: bool = False
                     ) -> tuple[pd.DataFrame, int]:
    """Final losses with a ``loss`` column: a user table as is, or the tidy table's final rows
    (cool-down branches left out unless ``include_branches``: they are smaller token budgets of
    their parents, points of L(N, D) but not of the size laws), and the number of rows
    ``--drop-invalid`` dropped."""
    src = ",".join(args.input)
    if "loss" in df.columns:
        # a user table: validate it here, so that a bad value is reported with its row in the
        # table (not its position inside a pair/weight group), and --drop-invalid drops it
        used = ("n_enc", "n_dec", "loss") if getattr(args, "law", None) == "bivariate" else (
            "n", "loss")
        num = [c for c in used if c in df.columns]
        dropped = 0
        if args.drop_invalid:
            df, dropped = drop_invalid_rows(df, num, positive=num)
        for c in num:
            check_finite_positive(df, c, src)
        if "weight" in df.columns:
            check_weights(df, "weight", src)
        return df, dropped
    if {"metric", "value"} <= set(df.columns):
        fin, dropped = final_losses(df, eval_set=args.eval_set, metric=args.metric, source=src,
                                    drop_invalid=args.drop_invalid,
                                    include_branches=include_branches)
        return fin.rename(columns={"value": "loss"}), dropped
    raise FitError(f"{src}: needs a 'loss' column (or the tidy table's metric/value columns); "
                   f"has {list(df.columns)}", column="loss", source=src)


def fit_options(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword options of the least-squares laws' fits: ``--f-scale`` (``auto`` or a number),
    ``--uncertainty`` (``none`` → None), ``--n-refits``, ``--seed``."""
    fs: Any = args.f_scale
    if fs != "auto":
        try:
            fs = float(fs)
        except ValueError:
            raise FitError(f"--f-scale must be 'auto' or a number, got {fs!r}") from None
    unc = None if args.uncertainty == "none" else args.uncertainty
    return {"f_scale": fs, "uncertainty": unc, "n_refits": args.n_refits, "seed": args.seed}


def bootstrap_options(args: argparse.Namespace) -> dict[str, Any]:
    """Shared options for the Chinchilla and DPL fits, whose uncertainty is the bootstrap only.

    ``--uncertainty`` other than ``none`` asks for ``--n-refits`` bootstrap resamples (rows
    resampled with replacement; recorded in the fit's ``meta["uncertainty"]``, also when
    ``perturbation`` was asked for); ``--seed`` and ``--drop-invalid`` are passed on.
    """
    kw: dict[str, Any] = {"seed": args.seed, "drop_invalid": args.drop_invalid}
    if args.uncertainty != "none" and args.n_refits > 0:
        kw["bootstrap"] = args.n_refits
    return kw

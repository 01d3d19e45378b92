"""What ``mnmt-fit``'s subcommands share: option values parsed from their text (numbers,
``name=value`` lists, ``--option`` JSON values), the input table, and the
:class:`~fitting.core.base.TableRequest` a law's table fitter is handed.

Exit status 2 on bad input is :mod:`fitting.cli`'s: a :class:`~fitting.core.base.FitError` raised
here names the option (``--sizes``, ``--f-scale``) or the column and row.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

import pandas as pd

from fitting.core.base import FitError, TableRequest
from fitting.data.rundirs import collect_runs
from fitting.data.tables import (
    read_table,
)

__all__ = ["parse_floats", "parse_values", "parse_pair_values", "parse_law_options", "load_input",
           "table_request"]


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


def table_request(args: argparse.Namespace) -> TableRequest:
    """What ``mnmt-fit fit`` (and ``frontier``/``recommend`` fitting on ``--input``) asks of a
    law: the input's name, ``--eval-set``, ``--metric``, ``--drop-invalid``, ``--pair``,
    ``--weight``, ``--form``, ``--quality-metric``, the fit options and ``--option`` values."""
    return TableRequest(
        source=",".join(args.input or []), eval_set=args.eval_set, metric=args.metric,
        drop_invalid=args.drop_invalid, pair=getattr(args, "pair", None),
        weight=getattr(args, "weight", None), form=args.form,
        quality_metric=getattr(args, "quality_metric", "bleu"), uncertainty=args.uncertainty,
        n_refits=args.n_refits, f_scale=args.f_scale, seed=args.seed,
        options=parse_law_options(getattr(args, "option", None)))

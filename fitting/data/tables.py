"""The tidy metrics table of docs/reference/metrics_schema.md: reading, writing, validation.

Input-validation helpers raise :class:`fitting.core.base.FitError` naming the column and the row (or
the file and line) and what was expected. Nothing is silently dropped: the ``drop_invalid``
options drop rows only when asked and report how many were dropped.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from fitting.core.base import FitError
from fitting.data import io
from fitting.data.rundirs import collect_runs
from fitting.data.schema import OPTIONAL_COLUMNS

__all__ = [
    "require_columns",
    "check_numeric",
    "check_finite_positive",
    "check_weights",
    "check_min_points",
    "parse_column_map",
    "apply_column_map",
    "read_table",
    "write_table",
    "final_losses",
    "drop_invalid_rows",
    "validate_tidy",
    "with_optional_columns",
    "is_branch",
    "has_branches",
    "without_branches",
    "last_evaluations_sd",
    "WEIGHT_DIGITS",
    "round_weights",
]

def _row_label(df: pd.DataFrame, idx: Any) -> str:
    """'row 3' (0-based position) plus the run/pair where the table has them."""
    try:
        pos = df.index.get_loc(idx)
        pos = pos if isinstance(pos, int | np.integer) else idx
    except (KeyError, TypeError):
        pos = idx
    label = f"row {pos}"
    extra = [f"{c}={df.at[idx, c]!r}" for c in ("run_id", "pair") if c in df.columns]
    if extra:
        label += " (" + ", ".join(extra) + ")"
    return label


def _src(source: str | None) -> str:
    return f"{source}: " if source else ""


def require_columns(df: pd.DataFrame, cols: Iterable[str], source: str | None = None) -> None:
    """Raise FitError naming every missing column (and the columns that are there)."""
    if not isinstance(df, pd.DataFrame):
        raise FitError(f"{_src(source)}expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise FitError(
            f"{_src(source)}missing column(s) {missing}; the table has {list(df.columns)} "
            "(map other names with columns={'n': 'params', ...} or --columns n=params)",
            column=missing[0],
            source=source,
        )


def check_numeric(df: pd.DataFrame, col: str, source: str | None = None) -> np.ndarray:
    """Return ``df[col]`` as float64, or raise naming the first row that is not a number."""
    require_columns(df, [col], source)
    s = df[col]
    if pd.api.types.is_bool_dtype(s):
        return s.to_numpy(dtype=np.float64)
    conv = pd.to_numeric(s, errors="coerce")
    bad = conv.isna() & s.notna()
    if bad.any():
        idx = bad[bad].index[0]
        raise FitError(
            f"{_src(source)}column {col!r}, {_row_label(df, idx)}: expected a number, "
            f"got {s.loc[idx]!r}",
            column=col,
            row=idx,
            source=source,
        )
    return conv.to_numpy(dtype=np.float64)


def check_finite_positive(
    df: pd.DataFrame, col: str, source: str | None = None, *, allow_zero: bool = False
) -> np.ndarray:
    """Values of ``col`` as float64; FitError naming the first NaN/inf/non-positive row."""
    x = check_numeric(df, col, source)
    bad = ~np.isfinite(x) | ((x < 0) if allow_zero else (x <= 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        idx = df.index[i]
        what = "non-negative" if allow_zero else "positive"
        raise FitError(
            f"{_src(source)}column {col!r}, {_row_label(df, idx)}: expected a finite {what} "
            f"number, got {x[i]!r} ({int(bad.sum())} bad row(s) in total; "
            "pass drop_invalid=True / --drop-invalid to drop them)",
            column=col,
            row=idx,
            source=source,
        )
    return x


def check_weights(df: pd.DataFrame, col: str = "weight", source: str | None = None) -> np.ndarray:
    """Sampling weights as float64; FitError naming the first row outside [0, 1] or not finite."""
    x = check_numeric(df, col, source)
    bad = ~np.isfinite(x) | (x < 0) | (x > 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        idx = df.index[i]
        raise FitError(
            f"{_src(source)}column {col!r}, {_row_label(df, idx)}: a sampling weight must lie "
            f"in [0, 1], got {x[i]!r}",
            column=col,
            row=idx,
            source=source,
        )
    return x


def check_min_points(n_points: int, n_params: int, law: str, what: str = "points") -> None:
    """FitError when a law with ``n_params`` free parameters gets fewer than that many points."""
    if n_points < n_params:
        raise FitError(
            f"law {law!r} has {n_params} free parameters but only {n_points} {what} were given; "
            f"need at least {n_params}"
        )


def drop_invalid_rows(
    df: pd.DataFrame, cols: Sequence[str], *, positive: Sequence[str] = ()
) -> tuple[pd.DataFrame, int]:
    """Drop rows with non-numeric/non-finite values in ``cols`` (non-positive in ``positive``).

    Returns the kept rows and the number dropped; callers report that count.
    """
    keep = pd.Series(True, index=df.index)
    for c in cols:
        v = pd.to_numeric(df[c], errors="coerce")
        ok = np.isfinite(v.to_numpy(dtype=np.float64))
        if c in positive:
            ok &= v.to_numpy(dtype=np.float64) > 0
        keep &= ok
    return df[keep.to_numpy()], int((~keep).sum())


# -- column mapping -------------------------------------------------------------------------------


def parse_column_map(spec: str | Mapping[str, str] | None) -> dict[str, str]:
    """``"n=params,loss=val_loss"`` (or a dict) -> ``{"n": "params", "loss": "val_loss"}``.

    Keys are the names `fitting` expects; values are the user's column names.
    """
    if spec is None or spec == "":
        return {}
    if isinstance(spec, Mapping):
        return {str(k): str(v) for k, v in spec.items()}
    out: dict[str, str] = {}
    for item in str(spec).split(","):
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            raise FitError(
                f"column mapping item {item!r} must look like ours=theirs, e.g. n=params"
            )
        k, v = (t.strip() for t in item.split("=", 1))
        if not k or not v:
            raise FitError(f"column mapping item {item!r} has an empty side")
        out[k] = v
    return out


def apply_column_map(
    df: pd.DataFrame, columns: str | Mapping[str, str] | None, source: str | None = None
) -> pd.DataFrame:
    """Rename the user's columns to ours (``{ours: theirs}``); FitError if a mapped one is absent."""
    cmap = parse_column_map(columns)
    if not cmap:
        _check_unique_columns(list(df.columns), list(df.columns), source)
        return df
    absent = [theirs for theirs in cmap.values() if theirs not in df.columns]
    if absent:
        raise FitError(
            f"{_src(source)}column mapping refers to missing column(s) {absent}; "
            f"the table has {list(df.columns)}",
            column=absent[0],
            source=source,
        )
    rename = {theirs: ours for ours, theirs in cmap.items()}
    if len(rename) < len(cmap):
        theirs = next(t for t in cmap.values() if list(cmap.values()).count(t) > 1)
        raise FitError(f"{_src(source)}column mapping maps several of our names to column "
                       f"{theirs!r}; map each of your columns once", column=theirs, source=source)
    _check_unique_columns(list(df.columns), [rename.get(c, c) for c in df.columns], source)
    return df.rename(columns=rename)


def _check_unique_columns(names: list, renamed: list, source: str | None) -> None:
    """FitError when two columns (``names``, after mapping: ``renamed``) share a name."""
    clash = next((c for c in renamed if renamed.count(c) > 1), None)
    if clash is None:
        return
    origins = [c for c, r in zip(names, renamed, strict=True) if r == clash]
    how = "" if origins == [clash] * len(origins) else f" (from {origins}, by the column mapping)"
    raise FitError(
        f"{_src(source)}two columns named {clash!r}{how}; the table has {names}: expected "
        "one column per name (map each name to one column only)",
        column=clash, source=source,
    )


# -- reading and writing ----------------------------------------------------------------------


def read_table(
    path_or_df: str | os.PathLike | pd.DataFrame,
    columns: str | Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """Read a CSV or Parquet table (or take a DataFrame), renaming mapped columns to ours.

    ``columns`` maps our names to the user's, e.g. ``"n=params,loss=val_loss"``. A local directory
    that is a run directory (holds ``run.json``), or holds run directories, is read with
    :func:`fitting.data.rundirs.collect_runs`.
    """
    if isinstance(path_or_df, pd.DataFrame):
        return apply_column_map(path_or_df.copy(), columns, "table")
    path = os.fspath(path_or_df)
    if not io.is_remote(path) and os.path.isdir(path):  # directories of run directories: local
        if os.path.exists(os.path.join(path, "run.json")):
            return apply_column_map(collect_runs([path]), columns, path)
        subdirs = sorted(
            os.path.join(path, d)
            for d in os.listdir(path)
            if os.path.exists(os.path.join(path, d, "run.json"))
        )
        if not subdirs:
            raise FitError(f"{path}: a directory but neither a run directory nor a folder of them")
        return apply_column_map(collect_runs(subdirs), columns, path)
    if not io.exists(path):
        raise FitError(f"{path}: no such file", source=path)
    lower = path.lower()
    try:
        if lower.endswith((".parquet", ".pq")):
            with io.open_file(path, "rb") as f:
                df = pd.read_parquet(f)
        elif lower.endswith((".csv", ".csv.gz", ".tsv", ".txt")):
            sep = "\t" if lower.endswith(".tsv") else ","
            with io.open_file(path, "rb") as f:
                df = pd.read_csv(f, sep=sep, compression="gzip" if lower.endswith(".gz") else None)
        elif lower.endswith(".jsonl"):
            with io.open_file(path, "rb") as f:
                df = pd.read_json(f, lines=True)
        else:
            raise FitError(
                f"{path}: unknown table format; expected .csv, .csv.gz, .tsv, .parquet or .jsonl",
                source=path,
            )
    except FitError:
        raise
    except Exception as e:  # pandas/pyarrow errors: say which file
        raise FitError(f"{path}: could not read table: {e}", source=path) from e
    return apply_column_map(df, columns, path)


def write_table(df: pd.DataFrame, path: str | os.PathLike) -> str:
    """Write CSV or Parquet (by extension); returns the path. Parent directories are created.

    `.csv` and Parquet files are replaced atomically (`fitting.data.io.write_text_atomic`): a full
    disk raises `fitting.data.io.NoSpaceError` and leaves the previous file."""
    path = os.fspath(path)
    if not io.is_remote(path):
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
    lower = path.lower()
    if lower.endswith((".parquet", ".pq")):
        io.write_text_atomic(path, df.to_parquet(index=False))
    elif lower.endswith(".csv"):
        io.write_text_atomic(path, df.to_csv(index=False))
    elif lower.endswith(".csv.gz"):
        if io.is_remote(path):
            with io.open_file(path, "w") as f:
                f.write(df.to_csv(index=False))
        else:
            df.to_csv(path, index=False)
    else:
        raise FitError(f"{path}: unknown table format; use .csv, .csv.gz or .parquet", source=path)
    return path


#: optional columns whose "absent" value is "" (a CSV file reads "" back as NaN)
_BLANK_STR = tuple(c for c, v in OPTIONAL_COLUMNS.items() if v == "")


def _blank(col: pd.Series) -> pd.Series:
    """True where a str column holds nothing: "" read back from a CSV file is NaN."""
    return col.isna() | col.astype(str).isin(["", "nan", "None", "<NA>"])


def with_optional_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the optional columns of schema revisions 1.1 and 1.2 filled in: a table
    without ``seed`` gets NaN, without ``mixture`` "" (explicit weights), without ``parent_run``
    "" (no cool-down branches), without ``branch_step`` NaN. A ``mixture`` or ``parent_run`` of ""
    read back from a CSV file, where "" becomes NaN, is "" again. Returns a copy when anything
    changed."""
    missing = [c for c in OPTIONAL_COLUMNS if c not in df.columns]
    blanks = {c: _blank(df[c]) for c in _BLANK_STR if c in df.columns}
    blanks = {c: b for c, b in blanks.items() if b.any() and not (df[c][b] == "").all()}
    if not missing and not blanks:
        return df
    df = df.copy()
    for c in missing:
        df[c] = OPTIONAL_COLUMNS[c]
    for c, b in blanks.items():
        df[c] = df[c].where(~b, "")
    for c in _BLANK_STR:
        df[c] = df[c].astype(str)
    return df


def is_branch(df: pd.DataFrame) -> np.ndarray:
    """Boolean mask of the rows of cool-down branches (schema revision 1.2): rows whose
    ``parent_run`` names a run. All False for a table without the column."""
    if "parent_run" not in df.columns:
        return np.zeros(len(df), dtype=bool)
    return ~_blank(df["parent_run"]).to_numpy()


def has_branches(df: pd.DataFrame) -> bool:
    """Whether the table holds any cool-down branch (:func:`is_branch`)."""
    return bool(is_branch(df).any())


def without_branches(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` without the rows of cool-down branches (:func:`is_branch`); ``df`` itself when it
    has none. The size laws are fitted on ordinary runs only: a branch's final loss belongs to a
    smaller token budget than its parent's."""
    mask = is_branch(df)
    return df[~mask] if mask.any() else df


def last_evaluations_sd(table: pd.DataFrame, eval_set: str, metric: str, *, last: int = 3,
                        min_points: int = 3) -> dict[tuple[str, str], float]:
    """{(run_id, pair): sd} of each run's last ``last`` evaluations of a pair (by step; sd with
    ddof = 1 over the finite ones among them, given at least ``min_points``): how much a final
    loss still moves, the noise the held-out comparisons quote. Empty without the columns."""
    if not {"run_id", "step", "pair", "value"} <= set(table.columns):
        return {}
    sel = np.ones(len(table), dtype=bool)
    for col, val in (("eval_set", eval_set), ("metric", metric)):
        if col in table.columns:
            sel &= (table[col].astype(str) == val).to_numpy()
    out = {}
    for (run, pair), g in table[sel].sort_values("step").groupby(["run_id", "pair"]):
        v = g["value"].to_numpy(float)[-last:]
        v = v[np.isfinite(v)]
        if v.size >= min_points:
            out[(str(run), str(pair))] = float(np.std(v, ddof=1))
    return out


def validate_tidy(df: pd.DataFrame, source: str | None = None) -> pd.DataFrame:
    """Check the columns the laws use (n, pair, weight, eval_set, metric, step, value)."""
    require_columns(df, ["n", "pair", "eval_set", "metric", "value"], source)
    check_finite_positive(df, "n", source)
    if "weight" in df.columns:
        w = pd.to_numeric(df["weight"], errors="coerce")
        sub = df[w.notna()]
        if len(sub):
            check_weights(sub, "weight", source)
    return df


#: significant digits a sampling weight keeps where weights are grouped, compared or shown:
#: 1 − 0.7 (0.30000000000000004, the weight a two-pair study gives its second pair) and 0.3 are
#: one weight, while a small weight keeps its value (4e-7 stays 4e-7, not 0)
WEIGHT_DIGITS = 6


def round_weights(df: pd.DataFrame, col: str = "weight") -> pd.DataFrame:
    """``df`` with its weights (column ``col``) rounded to :data:`WEIGHT_DIGITS` significant
    digits: the one rule by which the report, its f(p) table and ``mnmt-fit compare`` tell two
    weights apart. ``df`` itself when it has no numeric ``col``; never modified in place."""
    if col not in df.columns or not pd.api.types.is_numeric_dtype(df[col]):
        return df
    w = df[col].astype(float)
    rounded = {v: float(f"{v:.{WEIGHT_DIGITS}g}") for v in pd.unique(w.dropna())}
    return df.assign(**{col: w.map(rounded)})


def final_losses(
    df: pd.DataFrame,
    *,
    eval_set: str = "validation",
    metric: str = "loss",
    source: str | None = None,
    drop_invalid: bool = False,
    include_branches: bool = False,
) -> tuple[pd.DataFrame, int]:
    """Rows at each run's final step for one (eval_set, metric), with finite positive values.

    Returns ``(rows, n_dropped)``; without ``drop_invalid`` a bad value raises FitError naming it.
    When the table has no ``final`` column the largest step per (run, pair) is used. Rows of
    cool-down branches (``parent_run`` not "", schema revision 1.2) are left out unless
    ``include_branches``: every size law is fitted on ordinary runs, a branch's end is a smaller
    token budget of its parent (Hägele et al. 2024).
    """
    require_columns(df, ["pair", "n", "value"], source)
    sub = df if include_branches else without_branches(df)
    if "eval_set" in sub.columns:
        sub = sub[sub["eval_set"].astype(str) == eval_set]
    if "metric" in sub.columns:
        sub = sub[sub["metric"].astype(str) == metric]
    if not len(sub):
        have = (
            sorted(df[["eval_set", "metric"]].drop_duplicates().astype(str).agg("/".join, axis=1))
            if {"eval_set", "metric"} <= set(df.columns)
            else []
        )
        left = "" if include_branches or not has_branches(df) else " outside cool-down branches"
        raise FitError(
            f"{_src(source)}no rows with eval_set={eval_set!r} and metric={metric!r}{left}; "
            f"available eval_set/metric: {have}",
            column="metric",
            source=source,
        )
    if "final" in sub.columns:
        fin = sub["final"]
        if fin.dtype != bool:
            fin = fin.astype(str).str.lower().isin(["true", "1", "1.0"])
        sub = sub[fin.to_numpy()]
    elif "step" in sub.columns and "run_id" in sub.columns:
        last = sub.groupby(["run_id", "pair"])["step"].transform("max")
        sub = sub[sub["step"] == last]
    n_dropped = 0
    if drop_invalid:
        sub, n_dropped = drop_invalid_rows(sub, ["n", "value"], positive=["n", "value"])
    check_finite_positive(sub, "n", source)
    check_finite_positive(sub, "value", source)
    return sub.copy(), n_dropped


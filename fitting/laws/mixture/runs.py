"""Runs of K pairs as arrays: one row per run with its size N, weights w and final losses.

* :func:`mixture_runs` — the tidy table (docs/reference/metrics_schema.md) → one row per run:
  size N, weights w (column ``weight`` of each evaluated pair; 0 = evaluated, not trained),
  final losses; cool-down branches left out.
* :func:`read_wide_runs` — the same from a wide CSV (one row per run: ``run_id``, ``n`` or
  ``size``, ``w_<pair>``, ``loss_<pair>`` (absent for a weight-only domain), optional
  ``heldout`` 0/1 and ``data_size_<pair>``).

The laws are in :mod:`fitting.laws.mixture.laws`; their comparison in
:mod:`fitting.laws.mixture.compare`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fitting.core.base import FitError
from fitting.data.tables import final_losses, last_evaluations_sd

__all__ = ["MixtureRuns", "mixture_runs", "read_wide_runs"]


@dataclass
class MixtureRuns:
    """Runs as arrays: ``W`` and ``Y`` have one column per pair (``pairs`` order); ``Y`` is NaN
    where the run did not evaluate the pair. ``curve_sd``: sd of the last 3 evaluated losses of
    each (run, pair) where the table has learning curves (else NaN). ``tokens``: each run's
    training tokens (its token budget D), None when the table does not say."""

    pairs: list[str]
    run_ids: list[str]
    n: np.ndarray
    W: np.ndarray
    Y: np.ndarray
    curve_sd: np.ndarray
    heldout: np.ndarray
    data_size: dict[str, float] = field(default_factory=dict)
    source: str = "table"
    tokens: np.ndarray | None = None

    def to_tidy(self, *, eval_set: str = "validation", metric: str = "loss") -> pd.DataFrame:
        """The runs as a tidy table (final rows only; one row per evaluated pair)."""
        rows = []
        for r, rid in enumerate(self.run_ids):
            for i, p in enumerate(self.pairs):
                if np.isfinite(self.Y[r, i]):
                    rows.append({"run_id": rid, "pair": p, "n": float(self.n[r]),
                                 "weight": float(self.W[r, i]),
                                 "data_size": self.data_size.get(p, np.nan),
                                 "eval_set": eval_set, "metric": metric, "step": 1000,
                                 "value": float(self.Y[r, i]), "final": True})
        return pd.DataFrame(rows)

    def to_wide(self) -> pd.DataFrame:
        """The runs as a wide table (:func:`read_wide_runs`)."""
        df = pd.DataFrame({"run_id": self.run_ids, "n": self.n,
                           "heldout": self.heldout.astype(int)})
        if self.tokens is not None:
            df["tokens"] = self.tokens
        for i, p in enumerate(self.pairs):
            df[f"w_{p}"] = self.W[:, i]
            df[f"loss_{p}"] = self.Y[:, i]
            if p in self.data_size:
                df[f"data_size_{p}"] = self.data_size[p]
        return df

    @property
    def mixture_keys(self) -> np.ndarray:
        """One label per run: its weight vector rounded to 6 decimals."""
        return np.array([",".join(f"{v:.6f}" for v in row) for row in self.W])


def mixture_runs(table: pd.DataFrame, *, eval_set: str = "validation", metric: str = "loss",
                 heldout_runs: list[str] | tuple = (), source: str = "table") -> MixtureRuns:
    """One row per run (not a cool-down branch) from the tidy table's final losses."""
    fin, _ = final_losses(table, eval_set=eval_set, metric=metric, source=source,
                          include_branches=False)
    for col in ("run_id", "weight"):
        if col not in fin.columns:
            raise FitError(f"{source}: column {col!r} is missing; the mixture laws need one row "
                           "per (run, pair) with the pair's sampling weight", column=col,
                           source=source)
    fin = fin.assign(run_id=fin["run_id"].astype(str), pair=fin["pair"].astype(str))
    pairs = sorted(fin["pair"].unique())
    runs = list(dict.fromkeys(fin["run_id"]))
    W = fin.pivot_table(index="run_id", columns="pair", values="weight", aggfunc="first")
    Y = fin.pivot_table(index="run_id", columns="pair", values="value", aggfunc="mean")
    W = W.reindex(index=runs, columns=pairs).fillna(0.0).to_numpy(float)
    Y = Y.reindex(index=runs, columns=pairs).to_numpy(float)
    sums = W.sum(axis=1)
    if np.any(sums <= 0):
        bad = runs[int(np.flatnonzero(sums <= 0)[0])]
        raise FitError(f"{source}: run {bad!r} has no pair with a positive weight",
                       column="weight", source=source)
    n = fin.groupby("run_id")["n"].first().reindex(runs).to_numpy(float)
    sd = last_evaluations_sd(table, eval_set, metric, min_points=2)
    curve = np.array([[sd.get((r, p), np.nan) for p in pairs] for r in runs])
    data_size = {}
    if "data_size" in fin.columns:
        ds = pd.to_numeric(fin["data_size"], errors="coerce")
        for p, v in ds.groupby(fin["pair"]):
            v = v[np.isfinite(v) & (v > 0)]
            if len(v):
                data_size[str(p)] = float(v.median())
    held = np.isin(runs, [str(r) for r in heldout_runs])
    tokens = None
    if "tokens" in fin.columns:
        tokens = pd.to_numeric(fin["tokens"], errors="coerce").groupby(fin["run_id"]).max()
        tokens = tokens.reindex(runs).to_numpy(float)
    return MixtureRuns(pairs, runs, n, W / sums[:, None], Y, curve, held, data_size, source,
                       tokens)


def _numeric(df: pd.DataFrame, col: str, path: str) -> np.ndarray:
    v = pd.to_numeric(df[col], errors="coerce").to_numpy(float)
    bad = np.flatnonzero(~np.isfinite(v) & df[col].notna().to_numpy())
    if len(bad):
        raise FitError(f"{path}: column {col!r}, row {int(bad[0]) + 2}: expected a number, got "
                       f"{df[col].iloc[bad[0]]!r}", column=col, row=int(bad[0]), source=path)
    return v


def read_wide_runs(table: pd.DataFrame | str) -> MixtureRuns:
    """Runs from a wide table, one row per run: ``run_id``, ``n`` (or ``size``), ``w_<domain>``
    for every trained domain and ``loss_<domain>`` for every evaluated one (a ``w_<domain>``
    without ``loss_<domain>`` is a weight-only domain: trained, never evaluated; it enters the
    laws as a source, never as a target), optional ``heldout`` (0/1) and
    ``data_size_<domain>`` and ``tokens`` (the run's training tokens, its token budget D).
    Weights of a row must sum to 1 (±1e-3; then renormalised)."""
    path = table if isinstance(table, str) else "wide table"
    if isinstance(table, str):
        if not os.path.exists(table):
            raise FitError(f"{path}: no such file", source=path)
        df = pd.read_csv(table)
    else:
        df = table.copy()
    if "run_id" not in df.columns:
        raise FitError(f"{path}: column 'run_id' is missing (one row per run expected); columns: "
                       f"{list(df.columns)}", column="run_id", source=path)
    ncol = "n" if "n" in df.columns else "size" if "size" in df.columns else None
    if ncol is None:
        raise FitError(f"{path}: column 'n' (or 'size'), the non-embedding parameters of each "
                       "run, is missing", column="n", source=path)
    wp = [c[2:] for c in df.columns if c.startswith("w_")]
    lp = [c[5:] for c in df.columns if c.startswith("loss_")]
    if not wp:
        raise FitError(f"{path}: no weight columns 'w_<pair>'", column="w_<pair>", source=path)
    for p in lp:
        if p not in wp:
            raise FitError(f"{path}: column 'loss_{p}' has no weight column 'w_{p}'",
                           column=f"w_{p}", source=path)
    pairs = sorted(wp)  # a w_X without loss_X: trained, never evaluated (its losses NaN)
    n = _numeric(df, ncol, path)
    if np.any(~(n > 0)):
        r = int(np.flatnonzero(~(n > 0))[0])
        raise FitError(f"{path}: column {ncol!r}, row {r + 2}: expected a positive size, got "
                       f"{df[ncol].iloc[r]!r}", column=ncol, row=r, source=path)
    W = np.column_stack([np.nan_to_num(_numeric(df, f"w_{p}", path)) for p in pairs])
    Y = np.column_stack([_numeric(df, f"loss_{p}", path) if p in lp
                         else np.full(len(df), np.nan) for p in pairs])
    s = W.sum(axis=1)
    bad = np.flatnonzero((np.abs(s - 1.0) > 1e-3) | (W < 0).any(axis=1))
    if len(bad):
        raise FitError(f"{path}: row {int(bad[0]) + 2} (run {df['run_id'].iloc[bad[0]]!r}): "
                       f"weights w_* must be ≥ 0 and sum to 1, got sum {s[bad[0]]:.6g}",
                       column="w_<pair>", row=int(bad[0]), source=path)
    held = (_numeric(df, "heldout", path) > 0) if "heldout" in df.columns \
        else np.zeros(len(df), bool)
    data_size = {}
    for p in pairs:
        if f"data_size_{p}" in df.columns:
            v = _numeric(df, f"data_size_{p}", path)
            v = v[np.isfinite(v) & (v > 0)]
            if len(v):
                data_size[p] = float(np.median(v))
    tokens = _numeric(df, "tokens", path) if "tokens" in df.columns else None
    if tokens is not None and np.any(~(tokens > 0)):
        r = int(np.flatnonzero(~(tokens > 0))[0])
        raise FitError(f"{path}: column 'tokens', row {r + 2}: expected the run's training "
                       f"tokens (> 0), got {df['tokens'].iloc[r]!r}", column="tokens", row=r,
                       source=path)
    return MixtureRuns(pairs, df["run_id"].astype(str).tolist(), n, W / s[:, None], Y,
                       np.full(Y.shape, np.nan), held, data_size, path, tokens)

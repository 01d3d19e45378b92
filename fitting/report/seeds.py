"""Repeated seeds in the report (Ghorbani et al. 2021 App. C): their spread, and the seed means
that the fits use.

Runs that share an experiment — pair, model size (``n``, ``n_enc``, ``n_dec``), weight, data size
and mixture tag — and differ only in their seed (the tidy table's ``seed`` column, schema
revision 1.1; or plain repeats in a table without it) form one group. :func:`seed_spread`
measures the standard deviation of their final loss; :func:`seed_means` collapses every group to
one point, the mean of its seeds, so that each experiment weighs the same in a fit however often
it was repeated (Ghorbani et al. average their seeds too) and no law sees repeated sizes.
:func:`seeds_section` writes the spread into the report.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from fitting.report.markdown import Document, format_number

__all__ = ["GROUP_KEYS", "group_keys", "seed_spread", "seed_means", "seeds_section"]

#: the columns that name an experiment; its runs differ only in their seed
GROUP_KEYS: tuple[str, ...] = ("study", "family", "size", "n", "n_enc", "n_dec", "pair", "weight",
                               "data_size", "mixture", "eval_set", "metric")


def group_keys(df: pd.DataFrame, by: Sequence[str] = ()) -> list[str]:
    """The columns of :data:`GROUP_KEYS` (plus ``by``) that ``df`` has."""
    return [c for c in (*GROUP_KEYS, *by) if c in df.columns]


def _groups(df: pd.DataFrame, by: Sequence[str] = ()):
    keys = group_keys(df, by)
    if not keys:
        raise ValueError("the table has none of the columns that name an experiment")
    return df.groupby(keys, dropna=False, sort=False)


def seed_means(df: pd.DataFrame, by: Sequence[str] = (),
               mean_columns: Sequence[str] = ("value",)) -> pd.DataFrame:
    """One row per experiment (per ``by`` too, e.g. ``("step",)`` for learning curves): the mean
    of ``mean_columns`` over its seeds, the other columns from its first run, and ``n_seeds``.
    ``df`` itself when no experiment was repeated."""
    if df.empty:
        return df
    sizes = _groups(df, by).size()
    if int(sizes.max()) <= 1:
        return df
    keys = group_keys(df, by)
    agg = {c: ("mean" if c in mean_columns else "first") for c in df.columns if c not in keys}
    out = _groups(df, by).agg(agg).reset_index()
    out["n_seeds"] = _groups(df, by).size().to_numpy()
    return out[[c for c in df.columns if c in out.columns] + ["n_seeds"]]


def seed_spread(fin: pd.DataFrame) -> dict:
    """Spread of the final loss over the seeds of each repeated experiment: the number of
    groups and of repeated ones, seeds per group, the median and largest standard deviation
    (ddof = 1) in nats and relative to the group mean, and the groups themselves."""
    if fin.empty:
        return {"n_groups": 0, "n_repeated": 0}
    g = _groups(fin)["value"]
    sizes, sd, mean = g.size(), g.std(ddof=1), g.mean()
    rep = (sizes > 1).to_numpy()
    out: dict = {"n_groups": int(len(sizes)), "n_repeated": int(rep.sum())}
    if not rep.any():
        return out
    sd_r, mean_r, n_r = sd[rep], mean[rep], sizes[rep]
    rel = sd_r / mean_r
    names = list(sizes.index.names)
    groups = []
    for key, s, m, k in zip(sd_r.index, sd_r.to_numpy(float), mean_r.to_numpy(float),
                            n_r.to_numpy(int), strict=True):
        key = key if isinstance(key, tuple) else (key,)
        d = dict(zip(names, key, strict=True))
        groups.append({"pair": str(d.get("pair", "")), "n": _num(d.get("n")),
                       "weight": _num(d.get("weight")), "mixture": str(d.get("mixture", "") or ""),
                       "seeds": int(k), "mean": float(m), "sd": float(s)})
    out.update(seeds_min=int(n_r.min()), seeds_max=int(n_r.max()),
               sd_median=float(np.median(sd_r)), sd_max=float(sd_r.max()),
               rel_sd_median=float(np.median(rel)), groups=groups)
    return out


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def seeds_section(doc: Document, spread: dict, *, max_rows: int = 12) -> None:
    """The seed spread of :func:`seed_spread` in the report; nothing when no run was repeated."""
    if not spread.get("n_repeated"):
        return
    doc.h(2, "Seeds (Ghorbani App. C)")
    k, lo, hi = spread["n_repeated"], spread["seeds_min"], spread["seeds_max"]
    doc.p(f"{k} of {spread['n_groups']} experiments (pair, size, weight, mixture) were trained "
          f"with several seeds ({lo if lo == hi else f'{lo}–{hi}'} each). Standard deviation of "
          f"the final loss across seeds: median {spread['sd_median']:.3g} nats "
          f"({spread['rel_sd_median']:.2%} of the loss), largest {spread['sd_max']:.3g}. Every fit "
          "of this report uses the seed mean of each experiment (one point each); the spread is "
          "the noise floor below which no fit's residuals can go. The quality laws use every "
          "(loss, metric) point, seeds included.")
    rows = sorted(spread["groups"], key=lambda g: -g["sd"])[:max_rows]
    doc.table(["pair", "N", "p", "mixture", "seeds", "mean loss", "sd"],
              [[g["pair"], format_number(g["n"]), format_number(g["weight"], digits=3),
                g["mixture"] or "–", str(g["seeds"]), format_number(g["mean"]),
                format_number(g["sd"], digits=2)] for g in rows])
    if len(spread["groups"]) > max_rows:
        doc.p(f"(the {max_rows} experiments with the largest spread of {len(spread['groups'])})")

"""Repeated seeds in the tidy table (Ghorbani et al. 2021 App. C): which runs are seeds of one
experiment, their spread, and the seed means that the fits use.

Runs that share an experiment — pair, model size (``n``, ``n_enc``, ``n_dec``), weight, data size,
mixture tag and the run's whole mixture (every pair's weight, :func:`run_mixtures`) — and differ
only in their seed (the tidy table's ``seed`` column, schema revision 1.1; or plain repeats in a
table without it) form one group: :func:`experiment_groups`, the one rule by which the report
tells seeds from experiments. The whole mixture matters in K-pair studies with explicit weights,
whose ``mixture`` tag is ``""``: (½, ½, 0) and (½, 0, ½) give en-de the same weight ½ but are two
experiments, not two seeds. :func:`seed_spread` measures the standard deviation of their final
loss; :func:`seed_means` collapses every group to one point, the mean of its seeds, so that each
experiment weighs the same in a fit however often it was repeated.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from fitting.data.tables import WEIGHT_DIGITS

__all__ = ["GROUP_KEYS", "RUN_MIXTURE", "group_keys", "run_mixtures", "experiment_keys",
           "experiment_groups", "seed_spread", "seed_means"]

#: the columns that name an experiment; its runs differ only in their seed
GROUP_KEYS: tuple[str, ...] = ("study", "family", "size", "n", "n_enc", "n_dec", "pair", "weight",
                               "data_size", "mixture", "eval_set", "metric")


def group_keys(df: pd.DataFrame, by: Sequence[str] = ()) -> list[str]:
    """The columns of :data:`GROUP_KEYS` (plus ``by``) that ``df`` has."""
    return [c for c in (*GROUP_KEYS, *by) if c in df.columns]


def run_mixtures(df: pd.DataFrame) -> pd.Series:
    """Each row's run's whole mixture, aligned with ``df``: ``"pair=p"`` for every pair with a
    weight row of that run (same ``study`` and ``run_id``), sorted, weights to
    :data:`fitting.data.tables.WEIGHT_DIGITS` significant digits — e.g. ``"en-de=0.5 en-fr=0.5
    en-zh=0"``. The tidy table has no column naming it (``mixture`` is only a tag, ``""`` for
    explicit weights), but every evaluated pair of a run has rows carrying its weight, zero-shot
    pairs (p = 0) included; rows of task ``all`` (weight NaN) add nothing. ``""`` for every row
    of a table without ``run_id``, ``pair`` or ``weight``, and for a run without weights."""
    if not {"run_id", "pair", "weight"} <= set(df.columns):
        return pd.Series("", index=df.index, dtype=object)
    run = df["run_id"].astype(str)
    if "study" in df.columns:
        run = df["study"].astype(str) + "\x00" + run
    w = pd.to_numeric(df["weight"], errors="coerce")
    rows = pd.DataFrame({"run": run, "pair": df["pair"].astype(str), "w": w})
    rows = rows[w.notna().to_numpy()].drop_duplicates()
    if rows.empty:
        return pd.Series("", index=df.index, dtype=object)
    rows["t"] = rows["pair"] + "=" + rows["w"].map(lambda v: f"{v:.{WEIGHT_DIGITS}g}")
    mix = rows.drop_duplicates(["run", "t"]).sort_values("t").groupby("run")["t"].agg(" ".join)
    return run.map(mix).fillna("").astype(object)


#: the column :func:`experiment_keys` adds: the run's whole mixture (:func:`run_mixtures`)
RUN_MIXTURE = "_run_mixture"


def experiment_keys(df: pd.DataFrame, by: Sequence[str] = ()) -> tuple[pd.DataFrame, list[str]]:
    """``df`` with the column :data:`RUN_MIXTURE` and the keys that name an experiment: the
    columns of :func:`group_keys` (plus ``by``) and :data:`RUN_MIXTURE`. Runs with equal keys
    differ only in their seed. Raises ValueError when ``df`` has none of :data:`GROUP_KEYS`."""
    keys = group_keys(df, by)
    if not keys:
        raise ValueError("the table has none of the columns that name an experiment "
                         f"({', '.join(GROUP_KEYS)})")
    return df.assign(**{RUN_MIXTURE: run_mixtures(df)}), [*keys, RUN_MIXTURE]


def experiment_groups(df: pd.DataFrame, by: Sequence[str] = ()):
    """``df`` grouped by experiment (:func:`experiment_keys`; NaN keys kept, order of first
    appearance), each group the seeds of one experiment; the groups' frames carry
    :data:`RUN_MIXTURE`."""
    frame, keys = experiment_keys(df, by)
    return frame.groupby(keys, dropna=False, sort=False)


def seed_means(df: pd.DataFrame, by: Sequence[str] = (),
               mean_columns: Sequence[str] = ("value",)) -> pd.DataFrame:
    """One row per experiment (per ``by`` too, e.g. ``("step",)`` for learning curves): the mean
    of ``mean_columns`` over its seeds, the other columns from its first run, and ``n_seeds``.
    ``df`` itself when no experiment was repeated."""
    if df.empty:
        return df
    groups = experiment_groups(df, by)
    sizes = groups.size()
    if int(sizes.max()) <= 1:
        return df
    keys = list(sizes.index.names)
    agg = {c: ("mean" if c in mean_columns else "first") for c in df.columns if c not in keys}
    out = groups.agg(agg).reset_index()
    out["n_seeds"] = sizes.to_numpy()
    return out[[c for c in df.columns if c in out.columns] + ["n_seeds"]]


def seed_spread(fin: pd.DataFrame) -> dict:
    """Spread of the final loss over the seeds of each repeated experiment: the number of
    groups and of repeated ones, seeds per group, the median and largest standard deviation
    (ddof = 1) in nats and relative to the group mean, and the groups themselves."""
    if fin.empty:
        return {"n_groups": 0, "n_repeated": 0}
    g = experiment_groups(fin)["value"]
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
                       "weights": str(d.get(RUN_MIXTURE, "") or ""),
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
